// Package outboxdb is the outbox table as the relay, the saga engine, the
// participant SDK and the operators' tools use it: enqueue in a batch or
// leased for dispatch, claim, record what was published, park and requeue,
// stats. Applications enqueue through package outbox; how the table is
// used: docs/DESIGN.md, "Inside the packages", package outbox.
package outboxdb

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sagaflow/sagaflow/internal/jsonlite"
	"github.com/sagaflow/sagaflow/internal/pgid"
)

// Querier is what Enqueue needs: a transaction, a connection or a pool.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// DB is what the table needs from a connection, pool or transaction.
type DB interface {
	Querier
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Message is one record to publish (package outbox exports it).
type Message struct {
	Topic   string
	Key     string
	Value   []byte
	Headers map[string]string
	// AvailableAt delays publication; zero means now.
	AvailableAt time.Time
}

// Row is a stored, not yet sent message as the relay reads it.
type Row struct {
	ID        int64
	Topic     string
	Key       string
	Value     []byte
	Headers   map[string]string
	Attempts  int
	CreatedAt time.Time
}

// ErrEmptyTopic is returned by Enqueue for a message without a topic.
var ErrEmptyTopic = errors.New("outbox: message has no topic")

// Table is the outbox table of one schema. It is safe for concurrent use.
type Table struct {
	schema  string
	channel string

	insertSQL, claimSQL, markSentSQL, deleteSentSQL, markFailedSQL, markDeadSQL, statsSQL string

	// listenKey is the advisory lock (two-int key space) a relay holds
	// while it waits for a NOTIFY; see Enqueue and ListenOp.
	listenKey [2]int32
}

const (
	tryListenSQL = `SELECT pg_try_advisory_lock($1::int4, $2::int4)`
	unlistenSQL  = `SELECT pg_advisory_unlock($1::int4, $2::int4)`
)

// listenClass is the first half of every outbox's listen lock key.
const listenClass int32 = 0x5a6a0b0c

// tables caches For's tables by schema.
var tables sync.Map // string -> *Table

// For is the table of schema, built once per process; schema must be valid
// (the schema of an outbox.Outbox, which New checked): it panics otherwise.
func For(schema string) *Table {
	if t, ok := tables.Load(schema); ok {
		return t.(*Table)
	}
	t, err := New(schema)
	if err != nil {
		panic(err)
	}
	got, _ := tables.LoadOrStore(schema, t)
	return got.(*Table)
}

// New returns the outbox table stored in schema (created by the
// migrations' messaging set).
func New(schema string) (*Table, error) {
	if !pgid.ValidIdentifier(schema) {
		return nil, fmt.Errorf("outbox: schema %q must match %s", schema, pgid.IdentifierPattern)
	}
	t := pgx.Identifier{schema, "outbox"}.Sanitize()
	o := &Table{schema: schema, channel: schema + "_outbox"}
	h := fnv.New32a()
	_, _ = h.Write([]byte(o.channel))
	o.listenKey = [2]int32{listenClass, int32(h.Sum32())}
	// The NOTIFY is sent only when a relay is waiting for one (it holds the
	// listen lock exclusively). Otherwise the transaction holds the lock
	// shared until it ends, which keeps the relay polling until then. A
	// NOTIFY is not free: Postgres serializes the commits of notifying
	// transactions of a database, WAL flush included.
	o.insertSQL = `WITH ins AS (
  INSERT INTO ` + t + ` (topic, key, value, headers, available_at)
  SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[], $4::jsonb[], $5::timestamptz[])
  RETURNING 1),
busy AS (SELECT pg_try_advisory_xact_lock_shared($7::int4, $8::int4) AS polling)
SELECT (SELECT count(*) FROM (SELECT pg_notify($6, '') FROM busy WHERE NOT busy.polling) n), (SELECT count(*) FROM ins)`
	o.claimSQL = `SELECT id, topic, key, value, headers, attempts, created_at FROM ` + t + `
WHERE sent_at IS NULL AND dead_at IS NULL AND available_at <= now()
ORDER BY id LIMIT $1`
	o.markSentSQL = `UPDATE ` + t + ` SET sent_at = now(), attempts = attempts + 1 WHERE id = ANY($1) AND sent_at IS NULL`
	// By primary key alone: with "AND sent_at IS NULL" the planner ANDed
	// the partial unsent index, reading every entry of it (dead ones of
	// rows deleted before included) on each call. The relay deletes only
	// rows it claimed unsent under its publishing lock.
	o.deleteSentSQL = `DELETE FROM ` + t + ` WHERE id = ANY($1)`
	o.markFailedSQL = `UPDATE ` + t + ` SET attempts = attempts + 1, last_error = $2, available_at = $3 WHERE id = $1 AND sent_at IS NULL`
	o.markDeadSQL = `UPDATE ` + t + ` SET attempts = attempts + 1, last_error = $2, dead_at = now() WHERE id = $1 AND sent_at IS NULL`
	// Live unsent rows through outbox_unsent_idx, dead ones through
	// outbox_dead_idx: the two partial indexes the relay keeps anyway.
	o.statsSQL = `SELECT u.n, coalesce(extract(epoch FROM now() - u.oldest), 0)::float8,
  (SELECT count(*) FROM ` + t + ` WHERE dead_at IS NOT NULL AND sent_at IS NULL)
FROM (SELECT count(*) AS n, min(created_at) AS oldest FROM ` + t + ` WHERE sent_at IS NULL AND dead_at IS NULL) u`
	return o, nil
}

// Schema is the schema the table lives in.
func (o *Table) Schema() string { return o.schema }

// Channel is the LISTEN/NOTIFY channel that Enqueue notifies.
func (o *Table) Channel() string { return o.channel }

// Enqueue inserts msgs inside the caller's transaction and, if the relay is
// waiting for a notification (see ListenOp), notifies it when that
// transaction commits. Nothing is published unless the transaction commits.
func (o *Table) Enqueue(ctx context.Context, tx Querier, msgs ...Message) error {
	if len(msgs) == 0 {
		return nil
	}
	args, err := o.enqueueArgs(msgs)
	if err != nil {
		return err
	}
	var n, notified int64
	if err := tx.QueryRow(ctx, o.insertSQL, args...).Scan(&notified, &n); err != nil {
		return fmt.Errorf("outbox %s: enqueue %d messages: %w", o.schema, len(msgs), err)
	}
	return nil
}

// QueueEnqueue adds Enqueue's statement for msgs to b, for a caller that
// sends several statements of one transaction in one round trip.
func (o *Table) QueueEnqueue(b *pgx.Batch, msgs ...Message) error {
	if len(msgs) == 0 {
		return nil
	}
	args, err := o.enqueueArgs(msgs)
	if err != nil {
		return err
	}
	n := len(msgs)
	b.Queue(o.insertSQL, args...).QueryRow(func(row pgx.Row) error {
		var inserted, notified int64
		if err := row.Scan(&notified, &inserted); err != nil {
			return fmt.Errorf("outbox %s: enqueue %d messages: %w", o.schema, n, err)
		}
		return nil
	})
	return nil
}

func (o *Table) enqueueArgs(msgs []Message) ([]any, error) {
	topics := make([]string, len(msgs))
	keys := make([]string, len(msgs))
	values := make([][]byte, len(msgs))
	headers := make([][]byte, len(msgs))
	avail := make([]time.Time, len(msgs))
	now := time.Now()
	for i, m := range msgs {
		if m.Topic == "" {
			return nil, fmt.Errorf("outbox %s: enqueue message %d: %w", o.schema, i, ErrEmptyTopic)
		}
		topics[i], keys[i], values[i] = m.Topic, m.Key, m.Value
		h := m.Headers
		if h == nil {
			h = map[string]string{}
		}
		if err := checkHeaders(h); err != nil {
			return nil, fmt.Errorf("outbox %s: enqueue message %d (topic %q): %w", o.schema, i, m.Topic, err)
		}
		headers[i] = jsonlite.AppendStringMap(nil, h)
		avail[i] = m.AvailableAt
		if avail[i].IsZero() {
			avail[i] = now
		}
	}
	return []any{topics, keys, values, headers, avail, o.channel, o.listenKey[0], o.listenKey[1]}, nil
}

// ListenOp is what a Claim round trip does with the outbox's listen lock
// before it claims. The relay holds that session lock while it waits for a
// NOTIFY: from then on every Enqueue sends one at its commit. Taking it
// fails while a transaction that enqueued without notifying is still open
// (it holds the lock shared); such a transaction's rows are not visible
// yet, so the relay must keep polling.
type ListenOp int

const (
	// ListenKeep leaves the listen lock as it is.
	ListenKeep ListenOp = iota
	// ListenTry tries to take it; Claimed.Listening reports whether it was
	// taken. The claim runs after the try, so when the lock was taken it
	// sees every row committed without a NOTIFY: the relay may then wait.
	ListenTry
	// ListenRelease releases it: producers stop notifying and the relay
	// polls.
	ListenRelease
)

// Claim is one relay round trip: record the rows published by the previous
// one, change the listen lock, claim due rows.
type Claim struct {
	// Done were published: deleted, or with KeepSent marked sent.
	Done     []int64
	KeepSent bool
	Listen   ListenOp
	// Limit is the most rows returned (>= 1).
	Limit int
}

// Claimed is the result of Claim.
type Claimed struct {
	// Rows are up to Limit due, unsent, not dead rows in id order.
	Rows []Row
	// Listening: with ListenTry, whether the listen lock was taken.
	Listening bool
}

// Claim records c.Done, applies c.Listen and returns up to c.Limit due,
// unsent rows in id order, all in one round trip: the relay records a batch
// and takes or releases its listen lock with the claim of the next batch.
// The caller is expected to hold the relay's publishing lock (see relay).
func (o *Table) Claim(ctx context.Context, db DB, c Claim) (Claimed, error) {
	b := &pgx.Batch{}
	if len(c.Done) > 0 {
		b.Queue(o.publishedSQL(c.KeepSent), c.Done)
	}
	var out Claimed
	switch c.Listen {
	case ListenTry:
		b.Queue(tryListenSQL, o.listenKey[0], o.listenKey[1]).QueryRow(func(row pgx.Row) error {
			return row.Scan(&out.Listening)
		})
	case ListenRelease:
		b.Queue(unlistenSQL, o.listenKey[0], o.listenKey[1])
	}
	b.Queue(o.claimSQL, c.Limit).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var r Row
			var h []byte
			if err := rows.Scan(&r.ID, &r.Topic, &r.Key, &r.Value, &h, &r.Attempts, &r.CreatedAt); err != nil {
				return fmt.Errorf("scan row: %w", err)
			}
			if len(h) > 0 {
				hs, err := jsonlite.ReadStringMap(h)
				if err != nil {
					return fmt.Errorf("row %d headers: %w", r.ID, err)
				}
				r.Headers = hs
			}
			out.Rows = append(out.Rows, r)
		}
		return rows.Err()
	})
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		if len(c.Done) > 0 {
			return Claimed{}, fmt.Errorf("outbox %s: record %d published rows and claim due rows: %w", o.schema, len(c.Done), err)
		}
		return Claimed{}, fmt.Errorf("outbox %s: claim due rows: %w", o.schema, err)
	}
	return out, nil
}

// publishedSQL records rows as published: deletes them, or with keep
// marks them sent (kept as history for retention). Deleting is the
// relay's default: a delete writes no new row version and no index entry,
// where marking a row sent rewrites the whole row (its payload included)
// and adds it to the sent-history index.
func (o *Table) publishedSQL(keep bool) string {
	if keep {
		return o.markSentSQL
	}
	return o.deleteSentSQL
}

// RecordPublished deletes ids (keep: marks them sent) after Kafka
// acknowledged them.
func (o *Table) RecordPublished(ctx context.Context, db DB, ids []int64, keep bool) error {
	if len(ids) == 0 {
		return nil
	}
	if _, err := db.Exec(ctx, o.publishedSQL(keep), ids); err != nil {
		return fmt.Errorf("outbox %s: record %d published rows: %w", o.schema, len(ids), err)
	}
	return nil
}

// ForgetPublished deletes ids (keep: marks them sent) after Kafka
// acknowledged them, in a transaction of its own whose commit does not wait
// for its WAL flush (synchronous_commit off), all in one round trip. It is
// for rows already published: if Postgres crashes before that commit
// reaches the disk the rows come back, and are published again once their
// lease ends, which receivers dedupe by message-id. db must not be inside a
// transaction (a pool or an idle connection).
func (o *Table) ForgetPublished(ctx context.Context, db DB, ids []int64, keep bool) error {
	if len(ids) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue("SET LOCAL synchronous_commit = off")
	b.Queue(o.publishedSQL(keep), ids)
	b.Queue("COMMIT")
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("outbox %s: forget %d published rows: %w", o.schema, len(ids), err)
	}
	return nil
}

// MarkFailed records a failed publication of id and makes it due again at
// retryAt, so one undeliverable row does not hold back the others.
func (o *Table) MarkFailed(ctx context.Context, db DB, id int64, cause string, retryAt time.Time) error {
	if _, err := db.Exec(ctx, o.markFailedSQL, id, cause, retryAt); err != nil {
		return fmt.Errorf("outbox %s: mark row %d failed: %w", o.schema, id, err)
	}
	return nil
}

// MarkDead parks id for an operator after the relay gave up on it.
func (o *Table) MarkDead(ctx context.Context, db DB, id int64, cause string) error {
	if _, err := db.Exec(ctx, o.markDeadSQL, id, cause); err != nil {
		return fmt.Errorf("outbox %s: mark row %d dead: %w", o.schema, id, err)
	}
	return nil
}

// Stats describes the unsent part of the outbox. Pending and OldestUnsent
// leave out dead rows, which are counted in Dead.
type Stats struct {
	Pending      int64
	OldestUnsent time.Duration
	Dead         int64
}

// Stats reads pending depth, the age of the oldest unsent row and how many
// rows were parked as dead.
//
// The query walks the unsent rows' index, not a bitmap of it nor the table:
// the outbox's rows are deleted soon after they are inserted, their index
// entries stay until vacuum, and a bitmap scan visits every one of them
// (and the pages behind them) on every call, where an index scan marks
// the entries of rows dead to everyone as it passes them and later calls
// skip them, so a call costs the live rows, not the deleted ones
// (docs/perf/figures.md#outbox-stats-index-scan).
//
// In the caller's own transaction (db a pgx.Tx) the query runs as it is:
// the planner settings would outlast it there, and BEGIN/COMMIT must not.
func (o *Table) Stats(ctx context.Context, db DB) (Stats, error) {
	var s Stats
	b := &pgx.Batch{}
	_, inTx := db.(pgx.Tx)
	if !inTx {
		b.Queue("BEGIN READ ONLY")
		b.Queue("SET LOCAL enable_seqscan = off")
		b.Queue("SET LOCAL enable_bitmapscan = off")
		b.Queue("SET LOCAL jit = off") // a disabled scan's cost must not start a compile
	}
	o.QueueStats(b, &s)
	if !inTx {
		b.Queue("COMMIT")
	}
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return Stats{}, fmt.Errorf("outbox %s: stats: %w", o.schema, err)
	}
	return s, nil
}

// QueueStats queues Stats' query on b, to run in a transaction of the
// caller's that keeps to the indexes as Stats does (sequential and bitmap
// scans off); its answer is written to s when b's results are read.
func (o *Table) QueueStats(b *pgx.Batch, s *Stats) {
	b.Queue(o.statsSQL).QueryRow(func(r pgx.Row) error {
		var age float64
		if err := r.Scan(&s.Pending, &age, &s.Dead); err != nil {
			return fmt.Errorf("outbox %s: stats: %w", o.schema, err)
		}
		s.OldestUnsent = time.Duration(age * float64(time.Second))
		return nil
	})
}
