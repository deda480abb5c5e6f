package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/google/uuid"
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

// kafkaOutcomes is the OutcomeSource of a Service: its outcome topic on
// its brokers.
type kafkaOutcomes struct {
	brokers []string
	dialer  *kafka.Dialer
	topic   string
}

// OutcomeSource reads the service's outcome topic (for
// ReconcileOptions.Outcomes); nil without brokers.
func (s *Service) OutcomeSource() OutcomeSource {
	if len(s.cfg.Brokers) == 0 {
		return nil
	}
	d := s.cfg.Dialer
	if d == nil {
		d = &kafka.Dialer{Timeout: 10 * time.Second}
	}
	return kafkaOutcomes{brokers: s.cfg.Brokers, dialer: d, topic: s.engine.cfg.OutcomeTopic}
}

// Finished reads every partition of the topic from the first record
// published at or after since up to its end as of the call.
func (k kafkaOutcomes) Finished(ctx context.Context, since time.Time) (map[uuid.UUID]int, error) {
	conn, err := k.dialer.DialContext(ctx, "tcp", k.brokers[0])
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", k.brokers[0], err)
	}
	parts, err := conn.ReadPartitions(k.topic)
	conn.Close()
	if err != nil {
		return nil, fmt.Errorf("partitions of %s: %w", k.topic, err)
	}
	out := map[uuid.UUID]int{}
	seen := map[string]bool{}
	for _, p := range parts {
		if err := k.readPartition(ctx, p, since, out, seen); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (k kafkaOutcomes) readPartition(ctx context.Context, p kafka.Partition, since time.Time, out map[uuid.UUID]int, seen map[string]bool) error {
	leader := net.JoinHostPort(p.Leader.Host, strconv.Itoa(p.Leader.Port))
	lc, err := k.dialer.DialLeader(ctx, "tcp", leader, k.topic, p.ID)
	if err != nil {
		return fmt.Errorf("%s/%d: dial the leader %s: %w", k.topic, p.ID, leader, err)
	}
	first, err1 := lc.ReadOffset(since)
	last, err2 := lc.ReadLastOffset()
	lc.Close()
	if err := errors.Join(err1, err2); err != nil {
		return fmt.Errorf("%s/%d: offsets: %w", k.topic, p.ID, err)
	}
	if first < 0 || first >= last {
		return nil
	}
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: k.brokers, Dialer: k.dialer, Topic: k.topic, Partition: p.ID,
		MinBytes: 1, MaxBytes: 4 << 20, MaxWait: 250 * time.Millisecond})
	defer r.Close()
	if err := r.SetOffset(first); err != nil {
		return fmt.Errorf("%s/%d: seek to %d: %w", k.topic, p.ID, first, err)
	}
	for {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			return fmt.Errorf("%s/%d: read at %d of %d: %w", k.topic, p.ID, first, last, err)
		}
		if o, err := message.DecodeSagaOutcome(m.Value); err == nil && o.Kind == message.OutcomeFinished {
			id := headerValue(m.Headers, message.HeaderMessageID)
			if !seen[id] {
				seen[id] = true
				out[o.SagaID]++
			}
		}
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
