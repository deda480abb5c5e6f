package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/message"
)

// Flow reconciliation of the outcome topic: every saga that ended has
// exactly one finished record on it. The reconciler reads the records of
// a recent slice of time (ReconcileOptions.OutcomeWindow, published from
// its start on) through an OutcomeSource and compares them with the sagas
// that finished in that slice, up to OutcomeGrace ago (what the relay may
// not have published yet): a saga without a record is
// KindOutcomeMissing, one with two finished records (distinct message
// ids) KindOutcomeDuplicated.
const (
	KindOutcomeMissing    DiscrepancyKind = "flow_outcome_missing"
	KindOutcomeDuplicated DiscrepancyKind = "flow_outcome_duplicated"
)

// Outcome check defaults (ReconcileOptions).
const (
	ReconcileOutcomeWindowDefault = 15 * time.Minute
	ReconcileOutcomeGraceDefault  = time.Minute
)

// OutcomeSource reads the outcome topic for the reconciler: the finished
// records published at or after since, counted by saga id, each message id
// once (a record the relay published again carries the same id).
type OutcomeSource interface {
	Finished(ctx context.Context, since time.Time) (map[uuid.UUID]int, error)
}

// missingOutcomes compares the sagas that finished between from and to
// with the finished records src holds from from on.
func (e *Engine) missingOutcomes(ctx context.Context, src OutcomeSource, from, to time.Time) ([]Discrepancy, error) {
	if src == nil || !to.After(from) {
		return nil, nil
	}
	rows, err := e.pool.Query(ctx, `SELECT id, type, version, state FROM `+e.st.sagas+`
WHERE finished_at >= $1 AND finished_at < $2 ORDER BY finished_at LIMIT $3`, from, to, reconcileScanLimit)
	if err != nil {
		return nil, fmt.Errorf("reconcile: outcomes: read the sagas that finished: %w", err)
	}
	type ended struct {
		id         uuid.UUID
		typ, state string
		version    int64
	}
	var sagas []ended
	for rows.Next() {
		var s ended
		if err := rows.Scan(&s.id, &s.typ, &s.version, &s.state); err != nil {
			rows.Close()
			return nil, fmt.Errorf("reconcile: outcomes: read the sagas that finished: %w", err)
		}
		sagas = append(sagas, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reconcile: outcomes: read the sagas that finished: %w", err)
	}
	if len(sagas) == 0 {
		return nil, nil
	}
	// Records are published after their commit: reading from from on
	// finds the record of every saga that finished from from on.
	got, err := src.Finished(ctx, from)
	if err != nil {
		return nil, fmt.Errorf("reconcile: outcomes: %w", err)
	}
	var out []Discrepancy
	for _, s := range sagas {
		switch n := got[s.id]; {
		case n == 0:
			out = append(out, Discrepancy{SagaID: s.id, SagaType: s.typ, version: s.version, Kind: KindOutcomeMissing,
				Detail: fmt.Sprintf("ended %s, but its outcome record is not on the outcome topic", s.state)})
		case n > 1:
			out = append(out, Discrepancy{SagaID: s.id, SagaType: s.typ, version: s.version, Kind: KindOutcomeDuplicated,
				Detail: fmt.Sprintf("ended %s, and the outcome topic holds %d finished records of it", s.state, n)})
		}
	}
	return out, nil
}

// kafkaTopics reads a Service's own topics for the reconciler: the
// outcome topic (OutcomeSource) and the start topic (StartSource).
type kafkaTopics struct {
	brokers          []string
	dialer           *kafka.Dialer
	outcomes, starts string
}

// kafkaSource is the Service's kafkaTopics; nil without brokers.
func (s *Service) kafkaSource() *kafkaTopics {
	if len(s.cfg.Brokers) == 0 {
		return nil
	}
	d := s.cfg.Dialer
	if d == nil {
		d = &kafka.Dialer{Timeout: 10 * time.Second}
	}
	return &kafkaTopics{brokers: s.cfg.Brokers, dialer: d, outcomes: s.engine.cfg.OutcomeTopic, starts: s.cfg.StartTopic}
}

// OutcomeSource reads the service's outcome topic (for
// ReconcileOptions.Outcomes); nil without brokers.
func (s *Service) OutcomeSource() OutcomeSource {
	if k := s.kafkaSource(); k != nil {
		return k
	}
	return nil
}

// StartSource reads the service's start topic (for
// ReconcileOptions.Starts); nil without brokers.
func (s *Service) StartSource() StartSource {
	if k := s.kafkaSource(); k != nil {
		return k
	}
	return nil
}

// Finished reads every partition of the outcome topic from the first
// record published at or after since up to its end as of the call.
func (k *kafkaTopics) Finished(ctx context.Context, since time.Time) (map[uuid.UUID]int, error) {
	out := map[uuid.UUID]int{}
	seen := map[string]bool{}
	err := k.read(ctx, k.outcomes, since, func(m kafka.Message) {
		if o, err := message.DecodeSagaOutcome(m.Value); err == nil && o.Kind == message.OutcomeFinished {
			id := headerValue(m.Headers, message.HeaderMessageID)
			if !seen[id] {
				seen[id] = true
				out[o.SagaID]++
			}
		}
	})
	return out, err
}

// Starts reads every partition of the start topic from the first record
// published at or after since up to its end as of the call, each message
// id once.
func (k *kafkaTopics) Starts(ctx context.Context, since time.Time) ([]StartSeen, error) {
	var out []StartSeen
	seen := map[string]bool{}
	err := k.read(ctx, k.starts, since, func(m kafka.Message) {
		id := headerValue(m.Headers, message.HeaderMessageID)
		if seen[id] {
			return
		}
		seen[id] = true
		st := StartSeen{MessageID: id, At: m.Time, Where: fmt.Sprintf("%s/%d@%d", m.Topic, m.Partition, m.Offset)}
		if r, err := message.DecodeStartRecord(m.Value); err == nil {
			st.Type, st.IdempotencyKey = r.Type, r.IdempotencyKey
		}
		out = append(out, st)
	})
	return out, err
}

// read calls fn with every record of every partition of topic from the
// first published at or after since up to the partition's end as of the
// call.
func (k *kafkaTopics) read(ctx context.Context, topic string, since time.Time, fn func(kafka.Message)) error {
	conn, err := k.dialer.DialContext(ctx, "tcp", k.brokers[0])
	if err != nil {
		return fmt.Errorf("dial %s: %w", k.brokers[0], err)
	}
	parts, err := conn.ReadPartitions(topic)
	conn.Close()
	if err != nil {
		return fmt.Errorf("partitions of %s: %w", topic, err)
	}
	for _, p := range parts {
		if err := k.readPartition(ctx, topic, p, since, fn); err != nil {
			return err
		}
	}
	return nil
}

func (k *kafkaTopics) readPartition(ctx context.Context, topic string, p kafka.Partition, since time.Time, fn func(kafka.Message)) error {
	leader := net.JoinHostPort(p.Leader.Host, strconv.Itoa(p.Leader.Port))
	lc, err := k.dialer.DialLeader(ctx, "tcp", leader, topic, p.ID)
	if err != nil {
		return fmt.Errorf("%s/%d: dial the leader %s: %w", topic, p.ID, leader, err)
	}
	first, err1 := lc.ReadOffset(since)
	last, err2 := lc.ReadLastOffset()
	lc.Close()
	if err := errors.Join(err1, err2); err != nil {
		return fmt.Errorf("%s/%d: offsets: %w", topic, p.ID, err)
	}
	if first < 0 || first >= last {
		return nil
	}
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: k.brokers, Dialer: k.dialer, Topic: topic, Partition: p.ID,
		MinBytes: 1, MaxBytes: 4 << 20, MaxWait: 250 * time.Millisecond})
	defer r.Close()
	if err := r.SetOffset(first); err != nil {
		return fmt.Errorf("%s/%d: seek to %d: %w", topic, p.ID, first, err)
	}
	for {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			return fmt.Errorf("%s/%d: read at %d of %d: %w", topic, p.ID, first, last, err)
		}
		fn(m)
		if m.Offset >= last-1 {
			return nil
		}
	}
}

func headerValue(hs []kafka.Header, key string) string {
	for _, h := range hs {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// Every start on the start topic made a saga: each start record published
// in the window, up to OutcomeGrace ago, must have a saga of its type and
// idempotency key, or have been dead-lettered (a start refused: an unknown
// type, bad data); one with neither is KindStartLost, under an id derived
// from its message id (it has no saga).
const KindStartLost DiscrepancyKind = "flow_start_lost"

// StartSeen is one record of the start topic: its message id, where it is
// (topic/partition@offset), when it was published and, when it decodes,
// the start's type and idempotency key.
type StartSeen struct {
	MessageID, Where     string
	At                   time.Time
	Type, IdempotencyKey string
}

// StartSource reads the start topic for the reconciler: the records
// published at or after since, each message id once.
type StartSource interface {
	Starts(ctx context.Context, since time.Time) ([]StartSeen, error)
}

// lostStartNamespace derives a lost start's discrepancy id from its
// message id.
var lostStartNamespace = uuid.MustParse("0c6f5d1e-8b8a-4c55-9d0c-3f1b7a9e2d44")

// lostStarts finds the start records published between from and to that
// made no saga and were not dead-lettered.
func (e *Engine) lostStarts(ctx context.Context, src StartSource, from, to time.Time) ([]Discrepancy, error) {
	if src == nil || !to.After(from) {
		return nil, nil
	}
	all, err := src.Starts(ctx, from)
	if err != nil {
		return nil, fmt.Errorf("reconcile: starts: %w", err)
	}
	var seen []StartSeen
	for _, st := range all {
		if st.At.Before(to) && len(seen) < reconcileScanLimit {
			seen = append(seen, st)
		}
	}
	if len(seen) == 0 {
		return nil, nil
	}
	types, keys, ids := make([]string, len(seen)), make([]string, len(seen)), make([]string, len(seen))
	for i, st := range seen {
		types[i], keys[i], ids[i] = st.Type, st.IdempotencyKey, st.MessageID
	}
	dl := pgx.Identifier{e.cfg.Schema, "dead_letters"}.Sanitize()
	rows, err := e.pool.Query(ctx, `SELECT u.i FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS u(type, key, mid, i)
WHERE NOT EXISTS (SELECT 1 FROM `+e.st.sagas+` s WHERE s.idempotency_key = u.key AND s.type = u.type AND u.key <> '')
  AND NOT EXISTS (SELECT 1 FROM `+dl+` d WHERE d.message_id = u.mid)`, types, keys, ids)
	if err != nil {
		return nil, fmt.Errorf("reconcile: starts: look up their sagas and dead letters: %w", err)
	}
	lost, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("reconcile: starts: look up their sagas and dead letters: %w", err)
	}
	out := make([]Discrepancy, 0, len(lost))
	for _, i := range lost {
		st := seen[i-1]
		out = append(out, Discrepancy{SagaID: uuid.NewSHA1(lostStartNamespace, []byte(st.MessageID)), SagaType: st.Type, Kind: KindStartLost,
			Detail: fmt.Sprintf("the start at %s (type %q, idempotency key %q, message id %s, published %s) made no saga and was not dead-lettered",
				st.Where, clip(st.Type, 100), clip(st.IdempotencyKey, 200), clip(st.MessageID, 100), st.At.UTC().Format(time.RFC3339))})
	}
	return out, nil
}
