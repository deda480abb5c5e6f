package history

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Options of [Fill].
type Options struct {
	// Schema is the orchestrator's schema, migrated (default "sagaflow").
	Schema string
	// Sagas is how many sagas to add.
	Sagas int64
	// Running is the share of them still running (the newest ones), each
	// with a timer a day away; the rest are finished. Default 0.01.
	Running float64
	// Span is how far back the oldest saga starts; starts are spread
	// evenly from then to now. Default 30 days (the default retention of finished sagas).
	Span time.Duration
	// Chunk is how many sagas one transaction adds. Default 100,000.
	Chunk int64
	// Seed makes ids and keys differ between fills of one database; two
	// fills with one seed collide on their idempotency keys.
	Seed string
	// Now is the end of the span (default time.Now()).
	Now time.Time
	// Progress, if set, is called after each chunk with the sagas added so far.
	Progress func(done int64)
}

// Result is what a fill added and what it cost.
type Result struct {
	Sagas       int64         `json:"sagas"`
	Running     int64         `json:"running"`
	JournalRows int64         `json:"journal_rows"`
	Elapsed     time.Duration `json:"elapsed_ns"`
	SagasPerSec float64       `json:"sagas_per_second"`
	// BytesBefore and BytesAfter are the on-disk size of the sagas,
	// journal and timers tables with their indexes and TOAST.
	BytesBefore int64   `json:"bytes_before"`
	BytesAfter  int64   `json:"bytes_after"`
	BytesPer    float64 `json:"bytes_per_saga"`
}

// Fill adds opts.Sagas sagas of realistic shape to a migrated orchestrator
// schema: copies of template sagas that package sagatest ran through the
// place-order and the bench's generic definitions (completed, completed
// after retries, compensated at the pivot, failed at the first step,
// running at a step), each with its own id, business key, times and
// journal. The rows are generated inside Postgres (INSERT ... SELECT over
// generate_series), so nothing crosses the wire per row.
func Fill(ctx context.Context, pool *pgxpool.Pool, opts Options) (Result, error) {
	opts.Schema = cmp.Or(opts.Schema, "sagaflow")
	opts.Running = cmp.Or(opts.Running, 0.01)
	opts.Span = cmp.Or(opts.Span, 30*24*time.Hour)
	opts.Chunk = cmp.Or(opts.Chunk, 100_000)
	opts.Seed = cmp.Or(opts.Seed, "h")
	if opts.Now.IsZero() {
		opts.Now = time.Now()
	}
	switch {
	case opts.Sagas <= 0:
		return Result{}, fmt.Errorf("history: sagas is %d, want at least 1", opts.Sagas)
	case opts.Running < 0 || opts.Running > 1:
		return Result{}, fmt.Errorf("history: running share is %v, want 0 to 1", opts.Running)
	case opts.Chunk <= 0:
		return Result{}, fmt.Errorf("history: chunk is %d, want at least 1", opts.Chunk)
	}
	shs, err := shapes()
	if err != nil {
		return Result{}, err
	}
	rows := make([]row, len(shs))
	var picks []pick
	for i, s := range shs {
		if rows[i], err = s.row(); err != nil {
			return Result{}, err
		}
		for range s.weight {
			picks = append(picks, pick{N: i, Running: s.running})
		}
	}
	tpl, err := json.Marshal(rows)
	if err != nil {
		return Result{}, err
	}
	pk, err := json.Marshal(picks)
	if err != nil {
		return Result{}, err
	}

	conn, err := pool.Acquire(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("history: connect: %w", err)
	}
	defer conn.Release()
	q := newQueries(opts.Schema)
	res := Result{Sagas: opts.Sagas, Running: int64(float64(opts.Sagas) * opts.Running)}
	if err := conn.QueryRow(ctx, q.size).Scan(&res.BytesBefore); errors.Is(err, pgx.ErrNoRows) {
		return res, fmt.Errorf("%w: no sagas, journal and timers tables in schema %q", ErrNotMigrated, opts.Schema)
	} else if err != nil {
		return res, fmt.Errorf("history: size of schema %q: %w", opts.Schema, err)
	}
	defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), q.teardown) }()
	for i, st := range q.setup {
		var args []any
		if i == 0 {
			args = []any{tpl}
		} else if i == 2 {
			args = []any{pk}
		}
		if _, err := conn.Exec(ctx, st, args...); err != nil {
			return res, fmt.Errorf("history: load templates: %w", err)
		}
	}

	start := time.Now()
	for from := int64(0); from < opts.Sagas; from += opts.Chunk {
		to := min(from+opts.Chunk, opts.Sagas)
		n, err := fillChunk(ctx, conn.Conn(), q, from, to, opts, res.Running)
		if err != nil {
			return res, fmt.Errorf("history: sagas %d to %d: %w", from, to, err)
		}
		res.JournalRows += n
		if opts.Progress != nil {
			opts.Progress(to)
		}
	}
	res.Elapsed = time.Since(start)
	res.SagasPerSec = float64(opts.Sagas) / res.Elapsed.Seconds()
	for _, st := range q.analyze {
		if _, err := conn.Exec(ctx, st); err != nil {
			return res, fmt.Errorf("history: analyze: %w", err)
		}
	}
	if err := conn.QueryRow(ctx, q.size).Scan(&res.BytesAfter); err != nil {
		return res, err
	}
	res.BytesPer = float64(res.BytesAfter-res.BytesBefore) / float64(opts.Sagas)
	return res, nil
}

type pick struct {
	N       int  `json:"n"`
	Running bool `json:"running"`
}

func fillChunk(ctx context.Context, conn *pgx.Conn, q queries, from, to int64, o Options, running int64) (int64, error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	b := &pgx.Batch{}
	b.Queue(q.truncate)
	b.Queue(q.chunk, from, to, o.Sagas, running, o.Span.Seconds(), o.Seed, o.Now)
	b.Queue(q.sagas)
	b.Queue(q.journal)
	b.Queue(q.timers)
	br := tx.SendBatch(ctx, b)
	var journal int64
	for i := range b.Len() {
		tag, err := br.Exec()
		if err != nil {
			_ = br.Close()
			return 0, fmt.Errorf("statement %d: %w", i+1, err)
		}
		if i == 3 {
			journal = tag.RowsAffected()
		}
	}
	if err := br.Close(); err != nil {
		return 0, err
	}
	return journal, tx.Commit(ctx)
}

type queries struct {
	size, teardown, truncate, chunk, sagas, journal, timers string
	setup, analyze                                          []string
}

func newQueries(schema string) queries {
	id := func(t string) string { return pgx.Identifier{schema, t}.Sanitize() }
	sagas, journal, timers := id("sagas"), id("journal"), id("timers")
	return queries{
		size: `SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = ` + quoteLiteral(schema) + ` AND c.relname IN ('sagas', 'journal', 'timers') AND c.relkind = 'r'
HAVING count(*) = 3`,
		setup: []string{`CREATE TEMP TABLE hist_tpl AS
  SELECT (ord - 1)::int AS n, t.* FROM jsonb_array_elements($1::jsonb) WITH ORDINALITY AS e(v, ord),
  LATERAL jsonb_to_record(e.v) AS t(name text, type text, version int, changes bigint, state text, current_step text,
    data jsonb, steps jsonb, duration_s float8, wakeup_s float8, journal jsonb)`,
			`CREATE TEMP TABLE hist_tpl_journal AS
  SELECT t.n, j.ord::int AS seq, r.* FROM hist_tpl t, jsonb_array_elements(t.journal) WITH ORDINALITY AS j(v, ord),
  LATERAL jsonb_to_record(j.v) AS r(offset_s float8, event text, from_state text, to_state text, step text, action text,
    has_message bool, actor text, reason text, ignored bool)`,
			`CREATE TEMP TABLE hist_pick AS
  SELECT (row_number() OVER (PARTITION BY p.running ORDER BY ord) - 1)::int AS slot, p.running, p.n
  FROM jsonb_array_elements($1::jsonb) WITH ORDINALITY AS e(v, ord), LATERAL jsonb_to_record(e.v) AS p(n int, running bool)`,
			`CREATE TEMP TABLE hist_chunk (g bigint, id uuid, n int, running bool, key text, created_at timestamptz)`},
		teardown: `DROP TABLE IF EXISTS hist_tpl, hist_tpl_journal, hist_pick, hist_chunk`,
		truncate: `TRUNCATE hist_chunk`,
		// $1 first number, $2 end (exclusive), $3 all sagas, $4 running
		// ones (the newest), $5 span in seconds, $6 seed, $7 now.
		chunk: `INSERT INTO hist_chunk
SELECT g.g, md5($6::text || ':' || g.g)::uuid, p.n, g.running,
  split_part(t.name, '-', 1) || '-' || $6::text || '-' || g.g,
  $7::timestamptz - make_interval(secs => $5::float8 * (1 - g.g::float8 / $3::bigint))
FROM (SELECT s AS g, s >= $3::bigint - $4::bigint AS running FROM generate_series($1::bigint, $2::bigint - 1) AS s) AS g
JOIN hist_pick p ON p.running = g.running
  AND p.slot = (g.g * 7919) % (SELECT count(*) FROM hist_pick q WHERE q.running = g.running)
JOIN hist_tpl t ON t.n = p.n`,
		sagas: `INSERT INTO ` + sagas + ` (id, type, definition_version, aggregate_id, idempotency_key, state, current_step,
  data, steps, version, flag, deadline_at, next_wakeup_at, created_at, updated_at, finished_at, secret)
SELECT c.id, t.type, t.version, c.key, c.key, t.state, t.current_step,
  CASE WHEN t.data ? 'order_id' THEN jsonb_set(t.data, '{order_id}', to_jsonb(c.key))
       WHEN t.data ? 'id' THEN jsonb_set(t.data, '{id}', to_jsonb(c.key)) ELSE t.data END,
  t.steps, t.changes, '',
  CASE WHEN c.running THEN c.created_at + make_interval(secs => t.wakeup_s) END,
  CASE WHEN c.running THEN c.created_at + make_interval(secs => t.wakeup_s) END,
  c.created_at, c.created_at + make_interval(secs => t.duration_s),
  CASE WHEN NOT c.running THEN c.created_at + make_interval(secs => t.duration_s) END,
  sha256(c.id::text::bytea)
FROM hist_chunk c JOIN hist_tpl t ON t.n = c.n ORDER BY c.g`,
		journal: `INSERT INTO ` + journal + ` (saga_id, at, event, from_state, to_state, step, action, message_id, actor, reason, ignored)
SELECT c.id, c.created_at + make_interval(secs => j.offset_s), j.event, j.from_state, j.to_state, j.step, j.action,
  CASE WHEN j.has_message THEN md5(c.id::text || ':' || j.seq)::uuid END, j.actor, j.reason, j.ignored
FROM hist_chunk c JOIN hist_tpl_journal j ON j.n = c.n ORDER BY c.g, j.seq`,
		timers: `INSERT INTO ` + timers + ` (saga_id, due_at)
SELECT c.id, c.created_at + make_interval(secs => t.wakeup_s) FROM hist_chunk c JOIN hist_tpl t ON t.n = c.n
WHERE c.running AND t.wakeup_s IS NOT NULL`,
		analyze: []string{`ANALYZE ` + sagas, `ANALYZE ` + journal, `ANALYZE ` + timers},
	}
}

func quoteLiteral(s string) string {
	out := []byte{'\''}
	for i := range len(s) {
		if s[i] == '\'' {
			out = append(out, '\'')
		}
		out = append(out, s[i])
	}
	return string(append(out, '\''))
}

// ErrNotMigrated is returned when the schema has no sagas table.
var ErrNotMigrated = errors.New("history: the schema is not migrated")
