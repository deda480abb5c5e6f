package dlq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sagaflow/sagaflow/internal/jsonlite"
	"github.com/sagaflow/sagaflow/internal/outboxdb"
	"github.com/sagaflow/sagaflow/internal/pgid"
	"github.com/sagaflow/sagaflow/outbox"
)

// Limits.
const (
	// ListLimitDefault and ListLimitMax bound one page of List and
	// DeadOutbox.
	ListLimitDefault = 50
	ListLimitMax     = 500
	// BatchSize is how many dead letters or rows one transaction of
	// RedriveMatching or RequeueAll handles.
	BatchSize = 200
	// MaxActorBytes and MaxReasonBytes bound an Audit.
	MaxActorBytes  = 200
	MaxReasonBytes = 2000
)

// Errors.
var (
	// ErrNotFound: no dead letter with that id.
	ErrNotFound = errors.New("dlq: no such dead letter")
	// ErrInvalidInput: a bad Audit or Filter; the message names the field.
	ErrInvalidInput = errors.New("dlq: invalid input")
	// ErrTopicNotConsumed: a redrive would publish to a topic the schema's
	// consumer does not read; nothing was redriven. The message names the
	// topic and the ones allowed. With a Filter.Topic it wraps
	// ErrInvalidInput too.
	ErrTopicNotConsumed = errors.New("dlq: redrive to a topic this schema does not consume")
)

// Audit says who acts and why; both are required.
type Audit struct {
	Actor  string `json:"actor"`
	Reason string `json:"reason"`
}

func (a Audit) validate() error {
	text := func(v string, n int) bool {
		return strings.TrimSpace(v) != "" && len(v) <= n && utf8.ValidString(v) && !strings.ContainsRune(v, 0)
	}
	switch {
	case !text(a.Actor, MaxActorBytes):
		return fmt.Errorf("%w: actor is required (who acts): UTF-8 text without NUL, at most %d bytes", ErrInvalidInput, MaxActorBytes)
	case !text(a.Reason, MaxReasonBytes):
		return fmt.Errorf("%w: reason is required (why): UTF-8 text without NUL, at most %d bytes", ErrInvalidInput, MaxReasonBytes)
	}
	return nil
}

// DeadLetter is one row of the dead_letters table.
type DeadLetter struct {
	ID        int64  `json:"id"`
	Topic     string `json:"topic"`
	Partition int    `json:"partition"`
	Offset    int64  `json:"offset"`
	Key       string `json:"key"`
	// Value is the record's value; List leaves it out (ValueBytes says
	// how long it is).
	Value         []byte            `json:"value,omitempty"`
	ValueBytes    int               `json:"value_bytes"`
	Headers       map[string]string `json:"headers"`
	MessageID     string            `json:"message_id"`
	Reason        string            `json:"reason"`
	DeadAt        time.Time         `json:"dead_at"`
	RedrivenAt    *time.Time        `json:"redriven_at,omitempty"`
	RedrivenBy    string            `json:"redriven_by,omitempty"`
	RedriveReason string            `json:"redrive_reason,omitempty"`
}

// Filter selects dead letters. Zero fields do not filter.
type Filter struct {
	// Topic is the original topic, exactly.
	Topic string
	// Match keeps dead letters whose reason contains it (case-insensitive).
	Match string
	// Redriven includes dead letters already redriven.
	Redriven bool
	// Before continues a page: ids below it (newest first).
	Before int64
	Limit  int
}

// AuditEntry is one row of the ops_audit table.
type AuditEntry struct {
	ID     int64           `json:"id"`
	At     time.Time       `json:"at"`
	Actor  string          `json:"actor"`
	Reason string          `json:"reason"`
	Action string          `json:"action"`
	Target string          `json:"target"`
	Detail json.RawMessage `json:"detail"`
}

// Audit actions.
const (
	ActionRedrive = "dlq.redrive"
	ActionRequeue = "outbox.requeue"
)

// Store is the dead letters, dead outbox rows and audit of one schema.
type Store struct {
	pool     *pgxpool.Pool
	schema   string
	ob       *outboxdb.Table
	dl, au   string
	consumes []string
}

// New returns the store of schema (created by the messaging migrations).
// consumes are the topics the schema's consumer reads: a redrive publishes
// only to them (a dead letter naming any other topic is refused with
// ErrTopicNotConsumed; with none given, every redrive is).
func New(pool *pgxpool.Pool, schema string, consumes ...string) (*Store, error) {
	if pool == nil {
		return nil, errors.New("dlq: New: pool is nil")
	}
	if !pgid.ValidIdentifier(schema) {
		return nil, fmt.Errorf("dlq: schema %q must match %s", schema, pgid.IdentifierPattern)
	}
	ob := outboxdb.For(schema)
	for i, t := range consumes {
		if t == "" {
			return nil, fmt.Errorf("dlq: New: consumed topic %d is empty", i)
		}
	}
	return &Store{pool: pool, schema: schema, ob: ob, consumes: append([]string(nil), consumes...),
		dl: pgx.Identifier{schema, "dead_letters"}.Sanitize(), au: pgx.Identifier{schema, "ops_audit"}.Sanitize()}, nil
}

// Schema is the schema the store reads.
func (s *Store) Schema() string { return s.schema }

// Consumes is the topics a redrive may publish to.
func (s *Store) Consumes() []string { return append([]string(nil), s.consumes...) }

func (s *Store) consumed(topic string) bool { return slices.Contains(s.consumes, topic) }

// notConsumed is the ErrTopicNotConsumed of topic (of dead letter id, if
// not 0).
func (s *Store) notConsumed(id int64, topic string) error {
	allowed := "none: no consumed topic is configured for it"
	if len(s.consumes) > 0 {
		allowed = strings.Join(s.consumes, ", ")
	}
	what := "topic " + strconv.Quote(topic)
	if id != 0 {
		what = fmt.Sprintf("dead letter %d is from topic %q", id, topic)
	}
	return fmt.Errorf("%w: %s; schema %s consumes (and a redrive may publish to) %s", ErrTopicNotConsumed, what, s.schema, allowed)
}

const columns = `id, topic, partition, "offset", key, length(value), headers, message_id, reason, dead_at, redriven_at, redriven_by, redrive_reason`

func scan(row pgx.Row, withValue bool) (DeadLetter, error) {
	var d DeadLetter
	var h []byte
	dest := []any{&d.ID, &d.Topic, &d.Partition, &d.Offset, &d.Key, &d.ValueBytes, &h, &d.MessageID, &d.Reason, &d.DeadAt, &d.RedrivenAt, &d.RedrivenBy, &d.RedriveReason}
	if withValue {
		dest = append(dest, &d.Value)
	}
	if err := row.Scan(dest...); err != nil {
		return d, err
	}
	var err error
	if d.Headers, err = jsonlite.ReadStringMap(h); err != nil {
		return d, fmt.Errorf("dead letter %d: headers: %w", d.ID, err)
	}
	return d, nil
}

func (s *Store) where(f Filter, args *[]any) string {
	arg := func(v any) string {
		*args = append(*args, v)
		return "$" + strconv.Itoa(len(*args))
	}
	var w []string
	if !f.Redriven {
		w = append(w, "redriven_at IS NULL")
	}
	if f.Topic != "" {
		w = append(w, "topic = "+arg(f.Topic))
	}
	if f.Match != "" {
		w = append(w, "strpos(lower(reason), lower("+arg(f.Match)+")) > 0")
	}
	if f.Before > 0 {
		w = append(w, "id < "+arg(f.Before))
	}
	if len(w) == 0 {
		return ""
	}
	return " WHERE " + strings.Join(w, " AND ")
}

// List returns dead letters matching f, newest first, without their
// values, and the Before of the next page (0 on the last one).
func (s *Store) List(ctx context.Context, f Filter) ([]DeadLetter, int64, error) {
	if f.Limit <= 0 || f.Limit > ListLimitMax {
		f.Limit = ListLimitDefault
	}
	var args []any
	q := `SELECT ` + columns + ` FROM ` + s.dl + s.where(f, &args) + ` ORDER BY id DESC LIMIT ` + strconv.Itoa(f.Limit+1)
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, 0, fmt.Errorf("dlq %s: list dead letters: %w", s.schema, err)
	}
	defer rows.Close()
	out := []DeadLetter{}
	for rows.Next() {
		d, err := scan(rows, false)
		if err != nil {
			return nil, 0, fmt.Errorf("dlq %s: list dead letters: %w", s.schema, err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("dlq %s: list dead letters: %w", s.schema, err)
	}
	var next int64
	if len(out) > f.Limit {
		out = out[:f.Limit]
		next = out[f.Limit-1].ID
	}
	return out, next, nil
}

// Get returns one dead letter with its value.
func (s *Store) Get(ctx context.Context, id int64) (DeadLetter, error) {
	d, err := scan(s.pool.QueryRow(ctx, `SELECT `+columns+`, value FROM `+s.dl+` WHERE id = $1`, id), true)
	if errors.Is(err, pgx.ErrNoRows) {
		return d, fmt.Errorf("%w: %d in schema %s", ErrNotFound, id, s.schema)
	}
	if err != nil {
		return d, fmt.Errorf("dlq %s: dead letter %d: %w", s.schema, id, err)
	}
	return d, nil
}

// Redrive redrives the dead letters ids that are not redriven yet (see the
// package doc) and returns the ids it redrove, in one transaction. An id
// that does not exist or was redriven before is skipped.
func (s *Store) Redrive(ctx context.Context, ids []int64, a Audit) ([]int64, error) {
	done, err := s.repair(ctx, ids, a, func(tx pgx.Tx) ([]int64, error) {
		return s.redriveTx(ctx, tx, `SELECT `+columns+`, value FROM `+s.dl+` WHERE id = ANY($1) AND redriven_at IS NULL ORDER BY id FOR UPDATE`, []any{ids}, a)
	})
	if err != nil {
		return nil, fmt.Errorf("dlq %s: redrive %d dead letters: %w", s.schema, len(ids), err)
	}
	return done, nil
}

// repair checks a, then runs fn in one transaction unless ids is empty.
func (s *Store) repair(ctx context.Context, ids []int64, a Audit, fn func(tx pgx.Tx) ([]int64, error)) ([]int64, error) {
	if err := a.validate(); err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, nil
	}
	var done []int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		done, err = fn(tx)
		return err
	})
	return done, err
}

// RedriveMatching redrives every unredriven dead letter matching f (its
// Redriven, Before and Limit are ignored), BatchSize per transaction,
// oldest first, and returns the ids it redrove. A dead letter written
// while it runs may be redriven too.
func (s *Store) RedriveMatching(ctx context.Context, f Filter, a Audit) ([]int64, error) {
	if err := a.validate(); err != nil {
		return nil, err
	}
	if f.Topic != "" && !s.consumed(f.Topic) {
		return nil, fmt.Errorf("%w: %w", ErrInvalidInput, s.notConsumed(0, f.Topic))
	}
	// Refuse the whole redrive, before any batch, if a matching dead letter
	// names a topic the schema does not consume.
	var args []any
	args = append(args, append([]string{}, s.consumes...))
	q := `SELECT id, topic FROM ` + s.dl + s.where(Filter{Topic: f.Topic, Match: f.Match}, &args) + ` AND topic <> ALL($1::text[]) ORDER BY id LIMIT 1`
	var badID int64
	var badTopic string
	switch err := s.pool.QueryRow(ctx, q, args...).Scan(&badID, &badTopic); {
	case err == nil:
		return nil, fmt.Errorf("dlq %s: redrive matching dead letters: %w (nothing redriven; narrow it with a topic filter)", s.schema, s.notConsumed(badID, badTopic))
	case !errors.Is(err, pgx.ErrNoRows):
		return nil, fmt.Errorf("dlq %s: redrive matching dead letters: check their topics: %w", s.schema, err)
	}
	var all []int64
	var after int64
	for {
		var args []any
		q := `SELECT ` + columns + `, value FROM ` + s.dl + s.where(Filter{Topic: f.Topic, Match: f.Match}, &args)
		args = append(args, after)
		q += ` AND id > $` + strconv.Itoa(len(args)) + ` ORDER BY id LIMIT ` + strconv.Itoa(BatchSize) + ` FOR UPDATE SKIP LOCKED`
		var done []int64
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			var err error
			done, err = s.redriveTx(ctx, tx, q, args, a)
			return err
		})
		if err != nil {
			return all, fmt.Errorf("dlq %s: redrive matching dead letters (%d redriven before the error): %w", s.schema, len(all), err)
		}
		if len(done) == 0 {
			return all, nil
		}
		all = append(all, done...)
		after = done[len(done)-1]
	}
}

// redriveTx locks the dead letters q selects, enqueues their records,
// marks them and audits each.
func (s *Store) redriveTx(ctx context.Context, tx pgx.Tx, q string, args []any, a Audit) ([]int64, error) {
	rows, err := tx.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	var ds []DeadLetter
	for rows.Next() {
		d, err := scan(rows, true)
		if err != nil {
			rows.Close()
			return nil, err
		}
		ds = append(ds, d)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(ds) == 0 {
		return nil, nil
	}
	for _, d := range ds {
		if !s.consumed(d.Topic) {
			return nil, s.notConsumed(d.ID, d.Topic)
		}
	}
	msgs := make([]outbox.Message, len(ds))
	ids := make([]int64, len(ds))
	targets, details := make([]string, len(ds)), make([][]byte, len(ds))
	for i, d := range ds {
		msgs[i] = outbox.Message{Topic: d.Topic, Key: d.Key, Value: d.Value, Headers: d.Headers}
		ids[i] = d.ID
		targets[i] = "dead_letters/" + strconv.FormatInt(d.ID, 10)
		details[i], _ = json.Marshal(map[string]any{"topic": d.Topic, "partition": d.Partition, "offset": d.Offset,
			"message_id": d.MessageID, "dead_reason": d.Reason})
	}
	if err := s.ob.Enqueue(ctx, tx, msgs...); err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, `UPDATE `+s.dl+` SET redriven_at = now(), redriven_by = $2, redrive_reason = $3 WHERE id = ANY($1)`, ids, a.Actor, a.Reason); err != nil {
		return nil, fmt.Errorf("mark redriven: %w", err)
	}
	if err := s.audit(ctx, tx, ActionRedrive, targets, details, a); err != nil {
		return nil, err
	}
	return ids, nil
}

func (s *Store) audit(ctx context.Context, tx pgx.Tx, action string, targets []string, details [][]byte, a Audit) error {
	_, err := tx.Exec(ctx, `INSERT INTO `+s.au+` (actor, reason, action, target, detail)
SELECT $1, $2, $3, t, d FROM unnest($4::text[], $5::jsonb[]) AS u(t, d)`, a.Actor, a.Reason, action, targets, details)
	if err != nil {
		return fmt.Errorf("audit %s of %d: %w", action, len(targets), err)
	}
	return nil
}

// DeadOutbox returns up to limit dead outbox rows with ids above after, in
// id order.
func (s *Store) DeadOutbox(ctx context.Context, after int64, limit int) ([]DeadRow, error) {
	if limit <= 0 || limit > ListLimitMax {
		limit = ListLimitDefault
	}
	rows, err := listDead(ctx, s.pool, s.ob, after, limit)
	if rows == nil && err == nil {
		rows = []DeadRow{}
	}
	return rows, err
}

// OutboxStatus returns where the outbox row id stands (dead, live, sent or
// gone) and when it was sent or parked.
func (s *Store) OutboxStatus(ctx context.Context, id int64) (RowStatus, time.Time, error) {
	return rowStatus(ctx, s.pool, s.ob, id)
}

// Requeue makes the dead outbox rows ids due again (see
// requeue), audited, in one transaction, and returns the ids
// it requeued; ids that are not dead rows are skipped.
func (s *Store) Requeue(ctx context.Context, ids []int64, a Audit) ([]int64, error) {
	done, err := s.repair(ctx, ids, a, func(tx pgx.Tx) ([]int64, error) {
		done, err := requeue(ctx, tx, s.ob, ids)
		if err != nil || len(done) == 0 {
			return done, err
		}
		targets, details := make([]string, len(done)), make([][]byte, len(done))
		for i, id := range done {
			targets[i], details[i] = "outbox/"+strconv.FormatInt(id, 10), []byte(`{}`)
		}
		return done, s.audit(ctx, tx, ActionRequeue, targets, details, a)
	})
	if err != nil {
		return nil, fmt.Errorf("dlq %s: requeue dead outbox rows: %w", s.schema, err)
	}
	return done, nil
}

// RequeueAll requeues every dead outbox row, BatchSize per transaction,
// and returns the ids it requeued.
func (s *Store) RequeueAll(ctx context.Context, a Audit) ([]int64, error) {
	if err := a.validate(); err != nil {
		return nil, err
	}
	var all []int64
	for {
		rows, err := listDead(ctx, s.pool, s.ob, 0, BatchSize)
		if err != nil || len(rows) == 0 {
			return all, err
		}
		ids := make([]int64, len(rows))
		for i, r := range rows {
			ids[i] = r.ID
		}
		done, err := s.Requeue(ctx, ids, a)
		all = append(all, done...)
		if err != nil || len(done) == 0 {
			return all, err
		}
	}
}

// AuditLog returns the newest limit entries of the ops_audit table, newest
// first.
func (s *Store) AuditLog(ctx context.Context, limit int) ([]AuditEntry, error) {
	if limit <= 0 || limit > ListLimitMax {
		limit = ListLimitDefault
	}
	rows, err := s.pool.Query(ctx, `SELECT id, at, actor, reason, action, target, detail FROM `+s.au+` ORDER BY id DESC LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("dlq %s: audit log: %w", s.schema, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (AuditEntry, error) {
		var e AuditEntry
		var d []byte
		err := r.Scan(&e.ID, &e.At, &e.Actor, &e.Reason, &e.Action, &e.Target, &d)
		e.Detail = d
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("dlq %s: audit log: %w", s.schema, err)
	}
	return out, nil
}

// Counts are the open (unredriven) dead letters and the dead outbox rows.
type Counts struct {
	DeadLetters int64 `json:"dead_letters"`
	DeadOutbox  int64 `json:"dead_outbox"`
}

// Count reads Counts.
func (s *Store) Count(ctx context.Context) (Counts, error) {
	var c Counts
	err := s.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+s.dl+` WHERE redriven_at IS NULL),
(SELECT count(*) FROM `+pgx.Identifier{s.schema, "outbox"}.Sanitize()+` WHERE dead_at IS NOT NULL AND sent_at IS NULL)`).Scan(&c.DeadLetters, &c.DeadOutbox)
	if err != nil {
		return c, fmt.Errorf("dlq %s: count: %w", s.schema, err)
	}
	return c, nil
}
