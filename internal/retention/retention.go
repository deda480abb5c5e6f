package retention

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of Config.
const (
	SentOutboxAfterDefault   = 24 * time.Hour
	InboxAfterDefault        = 7 * 24 * time.Hour
	FinishedSagaAfterDefault = 30 * 24 * time.Hour
	// FailedSagaAfterDefault keeps failed sagas, and sagas an operator (or
	// the reconciler) acted on, half a year: their journal is the audit.
	FailedSagaAfterDefault = 180 * 24 * time.Hour
	// BarrierAfterDefault keeps participants' barrier rows 90 days: longer
	// than the inbox window and than any saga stays open (see BarrierAfter).
	BarrierAfterDefault = 90 * 24 * time.Hour
	// DeadLetterAfterDefault keeps a redriven dead letter 30 days after its
	// redrive; open ones are kept until they are redriven.
	DeadLetterAfterDefault = 30 * 24 * time.Hour
	// StrayDeadLetterAfterDefault keeps a stray reply's dead letter a week,
	// redriven or not (see StrayDeadLetterAfter).
	StrayDeadLetterAfterDefault = 7 * 24 * time.Hour
	// AuditAfterDefault keeps the operators' message repairs (ops_audit),
	// the operator audit of sagas gone and four-eyes proposals half a year,
	// as long as audited sagas.
	AuditAfterDefault = 180 * 24 * time.Hour
	BatchSizeDefault  = 1000
	IntervalDefault   = time.Minute
)

// Config configures a Purger.
type Config struct {
	// Schemas whose outbox and inbox tables are purged (the orchestrator's
	// schema and every participant's).
	Schemas []string
	// OrchestratorSchema holds the sagas and journal tables; empty: saga
	// history is not purged (a participants-only process).
	OrchestratorSchema string
	// SentOutboxAfter: outbox rows sent longer ago than this are deleted.
	SentOutboxAfter time.Duration
	// InboxAfter: inbox rows received longer ago than this are deleted; a
	// duplicate arriving later than this is no longer recognised by the
	// inbox.
	InboxAfter time.Duration
	// FinishedSagaAfter: completed and compensated sagas finished longer ago
	// than this lose their row and journal, unless an operator or the
	// reconciler acted on them (a journal entry with an actor).
	FinishedSagaAfter time.Duration
	// FailedSagaAfter: failed sagas, and finished ones an operator or the
	// reconciler acted on, are deleted this long after they finished. At
	// least FinishedSagaAfter.
	FailedSagaAfter time.Duration
	// BarrierAfter: barrier rows of the Schemas that have a barrier table
	// (participants) older than this are deleted. A barrier row is what
	// refuses a forward arriving after its compensation and answers a
	// re-sent command with the recorded outcome instead of executing it
	// again; deleted too early, a very late redelivered forward would run
	// after its compensation (or twice). So it must outlast any
	// redelivery: the consumed topics' Kafka retention, the inbox window
	// (it is at least InboxAfter) and the longest a saga stays open and
	// re-sends.
	BarrierAfter time.Duration
	// DeadLetterAfter: dead letters of the Schemas redriven longer ago
	// than this are deleted. Open dead letters (not redriven) are never
	// deleted: each is a record an operator still has to look at.
	DeadLetterAfter time.Duration
	// StrayDeadLetterAfter: open dead letters marked stray (a reply that
	// answers nothing the orchestrator sent: inbox.Result.Stray) older than
	// this are deleted although nobody redrove them. They need no
	// operator, and anyone who can write the reply topic can make them.
	StrayDeadLetterAfter time.Duration
	// AuditAfter: ops_audit entries (redrives, requeues) of the Schemas
	// older than this are deleted, and in the OrchestratorSchema the
	// operator_audit rows of sagas already deleted and the four-eyes
	// proposals this long past their expiry. At least DeadLetterAfter, so
	// a kept redriven dead letter keeps its audit entry.
	AuditAfter time.Duration
	// BatchSize bounds the rows one DELETE removes.
	BatchSize int
	// Interval between purge cycles.
	Interval time.Duration
	Logger   *slog.Logger
	// Metrics: nil counts nothing.
	Metrics *Metrics
}

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.SentOutboxAfter = cmp.Or(c.SentOutboxAfter, SentOutboxAfterDefault)
	c.InboxAfter = cmp.Or(c.InboxAfter, InboxAfterDefault)
	c.FinishedSagaAfter = cmp.Or(c.FinishedSagaAfter, FinishedSagaAfterDefault)
	c.FailedSagaAfter = cmp.Or(c.FailedSagaAfter, FailedSagaAfterDefault)
	c.BarrierAfter = cmp.Or(c.BarrierAfter, BarrierAfterDefault)
	c.DeadLetterAfter = cmp.Or(c.DeadLetterAfter, DeadLetterAfterDefault)
	c.StrayDeadLetterAfter = cmp.Or(c.StrayDeadLetterAfter, StrayDeadLetterAfterDefault)
	c.AuditAfter = cmp.Or(c.AuditAfter, AuditAfterDefault)
	c.BatchSize = cmp.Or(c.BatchSize, BatchSizeDefault)
	c.Interval = cmp.Or(c.Interval, IntervalDefault)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	pos := func(name string, d time.Duration) {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("retention: Config.%s is %s, want > 0", name, d))
		}
	}
	pos("SentOutboxAfter", c.SentOutboxAfter)
	pos("InboxAfter", c.InboxAfter)
	pos("FinishedSagaAfter", c.FinishedSagaAfter)
	pos("FailedSagaAfter", c.FailedSagaAfter)
	pos("BarrierAfter", c.BarrierAfter)
	pos("DeadLetterAfter", c.DeadLetterAfter)
	pos("StrayDeadLetterAfter", c.StrayDeadLetterAfter)
	pos("AuditAfter", c.AuditAfter)
	if c.AuditAfter < c.DeadLetterAfter {
		errs = append(errs, fmt.Errorf("retention: Config.AuditAfter (%s) is shorter than DeadLetterAfter (%s): a kept redriven dead letter keeps its audit entry", c.AuditAfter, c.DeadLetterAfter))
	}
	if c.FailedSagaAfter < c.FinishedSagaAfter {
		errs = append(errs, fmt.Errorf("retention: Config.FailedSagaAfter (%s) is shorter than FinishedSagaAfter (%s): failed and operator-resolved sagas are kept at least as long", c.FailedSagaAfter, c.FinishedSagaAfter))
	}
	if c.BarrierAfter < c.InboxAfter {
		errs = append(errs, fmt.Errorf("retention: Config.BarrierAfter (%s) is shorter than InboxAfter (%s): a redelivered command the inbox no longer dedupes must still find its barrier row", c.BarrierAfter, c.InboxAfter))
	}
	pos("Interval", c.Interval)
	if c.BatchSize <= 0 {
		errs = append(errs, fmt.Errorf("retention: Config.BatchSize is %d, want > 0", c.BatchSize))
	}
	for i, s := range c.Schemas {
		if s == "" {
			errs = append(errs, fmt.Errorf("retention: Config.Schemas[%d] is empty", i))
		}
	}
	if len(c.Schemas) == 0 && c.OrchestratorSchema == "" {
		errs = append(errs, errors.New("retention: Config.Schemas and Config.OrchestratorSchema are both empty: nothing to purge"))
	}
	return errors.Join(errs...)
}

// Metrics are the purger's collectors.
type Metrics struct {
	purged *prometheus.CounterVec
	errors prometheus.Counter
}

// NewMetrics registers, under namespace ns:
//
//	<ns>_retention_purged_total{table}  rows deleted by retention
//	<ns>_retention_errors_total         failed purge batches (retried next cycle)
func NewMetrics(reg prometheus.Registerer, ns string) (*Metrics, error) {
	if reg == nil {
		return nil, errors.New("retention: NewMetrics: registerer is nil")
	}
	m := &Metrics{
		purged: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: "retention", Name: "purged_total",
			Help: "Rows deleted by retention, by qualified table name."}, []string{"table"}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: "retention", Name: "errors_total",
			Help: "Retention batches that failed; they are retried on the next cycle."}),
	}
	for _, c := range []prometheus.Collector{m.purged, m.errors} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("retention: NewMetrics: register under namespace %q: %w", ns, err)
		}
	}
	return m, nil
}

// Purger deletes expired rows in bounded batches.
type Purger struct {
	pool *pgxpool.Pool
	cfg  Config
	jobs []job
}

type job struct {
	table string        // qualified name, the metric label
	after time.Duration // age window
	run   func(ctx context.Context, cutoff time.Time, limit int, from *position) (map[string]int64, error)
}

// position is where a cycle's batches of a saga job have come to in
// (created_at, id) order: each batch starts after the last saga the one
// before it deleted, instead of passing again over the index entries (and
// the dead rows) of the sagas deleted since the last vacuum. The zero
// position is the start.
type position struct {
	createdAt time.Time
	id        string
}

// New checks cfg and returns a Purger over pool.
func New(pool *pgxpool.Pool, cfg *Config) (*Purger, error) {
	if pool == nil {
		return nil, errors.New("retention: New: pool is nil")
	}
	if cfg == nil {
		cfg = &Config{}
	}
	c := cfg.WithDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	p := &Purger{pool: pool, cfg: c}
	for _, s := range c.Schemas {
		ob := pgx.Identifier{s, "outbox"}.Sanitize()
		ib := pgx.Identifier{s, "inbox"}.Sanitize()
		// Dead letters and the audit of their repairs: redriven dead
		// letters by redrive time (a partial index), audit entries by
		// time (a BRIN index); open dead letters stay.
		dl := pgx.Identifier{s, "dead_letters"}.Sanitize()
		au := pgx.Identifier{s, "ops_audit"}.Sanitize()
		p.jobs = append(p.jobs,
			p.simple(s+".outbox", c.SentOutboxAfter,
				`DELETE FROM `+ob+` WHERE id IN (SELECT id FROM `+ob+` WHERE sent_at < $1 ORDER BY sent_at LIMIT $2)`),
			p.simple(s+".inbox", c.InboxAfter,
				`DELETE FROM `+ib+` WHERE message_id IN (SELECT message_id FROM `+ib+` WHERE received_at < $1 LIMIT $2)`),
			p.barrier(s, c.BarrierAfter),
			p.holds(s, c.BarrierAfter),
			p.simple(s+".dead_letters", c.DeadLetterAfter,
				`DELETE FROM `+dl+` WHERE id IN (SELECT id FROM `+dl+` WHERE redriven_at < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)`),
			// Stray replies' dead letters, open ones too, by their time.
			p.simple(s+".dead_letters", c.StrayDeadLetterAfter,
				`DELETE FROM `+dl+` WHERE id IN (SELECT id FROM `+dl+` WHERE stray AND redriven_at IS NULL AND dead_at < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)`),
			p.simple(s+".ops_audit", c.AuditAfter,
				`DELETE FROM `+au+` WHERE id IN (SELECT id FROM `+au+` WHERE at < $1 LIMIT $2)`),
		)
	}
	if s := c.OrchestratorSchema; s != "" {
		sagas, journal := s+".sagas", s+".journal"
		finished, failed := sagaPurgeSQL(s)
		for _, k := range []struct {
			after time.Duration
			q     string
		}{
			{c.FinishedSagaAfter, finished},
			{c.FailedSagaAfter, failed},
		} {
			p.jobs = append(p.jobs, job{table: sagas, after: k.after,
				run: func(ctx context.Context, cutoff time.Time, limit int, from *position) (map[string]int64, error) {
					var ns, nj int64
					id := cmp.Or(from.id, "00000000-0000-0000-0000-000000000000")
					if err := p.pool.QueryRow(ctx, k.q, cutoff, limit, from.createdAt, id).Scan(&ns, &nj, &from.createdAt, &from.id); err != nil {
						return nil, err
					}
					return map[string]int64{sagas: ns, journal: nj}, nil
				}})
		}
		// The operator audit and the four-eyes proposals: audit rows after
		// AuditAfter once their saga is gone (the evidence outlives the
		// saga), proposals AuditAfter past their expiry (decided or
		// expired by then).
		sg := pgx.Identifier{s, "sagas"}.Sanitize()
		oa := pgx.Identifier{s, "operator_audit"}.Sanitize()
		op := pgx.Identifier{s, "operator_proposals"}.Sanitize()
		p.jobs = append(p.jobs,
			p.simple(s+".operator_audit", c.AuditAfter,
				`DELETE FROM `+oa+` WHERE id IN (SELECT a.id FROM `+oa+` a WHERE a.at < $1 AND NOT EXISTS (SELECT 1 FROM `+sg+` x WHERE x.id = a.saga_id) LIMIT $2)`),
			p.simple(s+".operator_proposals", c.AuditAfter,
				`DELETE FROM `+op+` WHERE id IN (SELECT id FROM `+op+` WHERE expires < $1 LIMIT $2)`),
		)
	}
	return p, nil
}

// sagaPurgeSQL returns the statements that delete a batch of the finished
// sagas of schema, and of the failed and audited ones, with their journal:
// $1 the cutoff, $2 the batch size, ($3, $4) the position (created_at,
// id) of the last saga the batch before deleted; they answer the sagas and
// journal rows deleted and the new position.
//
// finished_at >= created_at, so created_at < cutoff narrows the scan to
// the creation-order index (sagas_created_idx), read oldest first from the
// position on. SKIP LOCKED leaves a saga being touched (an operator, a
// late reply) for the next cycle. A saga with a journal entry that has an
// actor (an operator's action, the reconciler's repair) is audited: it
// waits for FailedSagaAfter, like failed sagas.
func sagaPurgeSQL(schema string) (finished, failed string) {
	sg := pgx.Identifier{schema, "sagas"}.Sanitize()
	jn := pgx.Identifier{schema, "journal"}.Sanitize()
	// A finished saga has no timer row; one left by a bug or by hand goes
	// with its saga.
	tm := pgx.Identifier{schema, "timers"}.Sanitize()
	audited := `EXISTS (SELECT 1 FROM ` + jn + ` j WHERE j.saga_id = s.id AND j.actor <> '')`
	purge := func(where string) string {
		return `WITH victims AS (
	SELECT id, created_at FROM ` + sg + ` s
	WHERE ` + where + ` AND created_at < $1 AND finished_at < $1 AND (created_at, id) > ($3, $4::uuid)
	ORDER BY created_at, id LIMIT $2 FOR UPDATE SKIP LOCKED
), j AS (
	DELETE FROM ` + jn + ` WHERE saga_id IN (SELECT id FROM victims) RETURNING 1
), t AS (
	DELETE FROM ` + tm + ` WHERE saga_id IN (SELECT id FROM victims)
), d AS (
	DELETE FROM ` + sg + ` WHERE id IN (SELECT id FROM victims) RETURNING 1
), last AS (
	SELECT created_at, id FROM victims ORDER BY created_at DESC, id DESC LIMIT 1
)
SELECT (SELECT count(*) FROM d), (SELECT count(*) FROM j),
	coalesce((SELECT created_at FROM last), $3), coalesce((SELECT id FROM last), $4::uuid)::text`
	}
	return purge(`state IN ('completed', 'compensated') AND NOT ` + audited),
		purge(`(state = 'failed' OR (state IN ('completed', 'compensated') AND ` + audited + `))`)
}

// barrier purges <schema>.barrier when the schema has one (a
// participant's), by created_at (its BRIN index); rows locked by a handler
// are skipped, and so are forwards still accepted (settled later, however
// old: their row is what Complete and Fail settle).
func (p *Purger) barrier(schema string, after time.Duration) job {
	table := schema + ".barrier"
	b := pgx.Identifier{schema, "barrier"}.Sanitize()
	q := `DELETE FROM ` + b + ` WHERE (saga_id, step, action) IN (
	SELECT saga_id, step, action FROM ` + b + ` WHERE created_at < $1 AND outcome <> 'accepted' LIMIT $2 FOR UPDATE SKIP LOCKED)`
	return job{table: table, after: after, run: func(ctx context.Context, cutoff time.Time, limit int, _ *position) (map[string]int64, error) {
		var exists bool
		if err := p.pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, b).Scan(&exists); err != nil || !exists {
			return map[string]int64{}, err
		}
		tag, err := p.pool.Exec(ctx, q, cutoff, limit)
		if err != nil {
			return nil, err
		}
		return map[string]int64{table: tag.RowsAffected()}, nil
	}}
}

// holds purges <schema>.holds when the schema has one (a participant's):
// the holds settled (confirmed or released) before the cutoff, by
// settled_at (a partial index); a hold still held is never purged.
func (p *Purger) holds(schema string, after time.Duration) job {
	table := schema + ".holds"
	h := pgx.Identifier{schema, "holds"}.Sanitize()
	q := `DELETE FROM ` + h + ` WHERE (saga_id, step, resource) IN (
	SELECT saga_id, step, resource FROM ` + h + ` WHERE state <> 'held' AND settled_at < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)`
	return job{table: table, after: after, run: func(ctx context.Context, cutoff time.Time, limit int, _ *position) (map[string]int64, error) {
		var exists bool
		if err := p.pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, h).Scan(&exists); err != nil || !exists {
			return map[string]int64{}, err
		}
		tag, err := p.pool.Exec(ctx, q, cutoff, limit)
		if err != nil {
			return nil, err
		}
		return map[string]int64{table: tag.RowsAffected()}, nil
	}}
}

func (p *Purger) simple(table string, after time.Duration, q string) job {
	return job{table: table, after: after, run: func(ctx context.Context, cutoff time.Time, limit int, _ *position) (map[string]int64, error) {
		tag, err := p.pool.Exec(ctx, q, cutoff, limit)
		if err != nil {
			return nil, err
		}
		return map[string]int64{table: tag.RowsAffected()}, nil
	}}
}

// PurgeOnce runs one cycle at now: every table is purged batch by batch
// until a batch deletes fewer than BatchSize rows. It returns the rows
// deleted per qualified table. On an error the other tables are still
// purged and the errors are joined.
func (p *Purger) PurgeOnce(ctx context.Context, now time.Time) (map[string]int64, error) {
	total := map[string]int64{}
	var errs []error
	for _, j := range p.jobs {
		cutoff := now.Add(-j.after)
		var from position
		for ctx.Err() == nil {
			n, err := j.run(ctx, cutoff, p.cfg.BatchSize, &from)
			if err != nil {
				if p.cfg.Metrics != nil {
					p.cfg.Metrics.errors.Inc()
				}
				errs = append(errs, fmt.Errorf("retention: purge %s before %s: %w", j.table, cutoff.Format(time.RFC3339), err))
				break
			}
			for t, c := range n {
				total[t] += c
				if p.cfg.Metrics != nil && c > 0 {
					p.cfg.Metrics.purged.WithLabelValues(t).Add(float64(c))
				}
			}
			if n[j.table] < int64(p.cfg.BatchSize) {
				break
			}
		}
	}
	if err := ctx.Err(); err != nil {
		errs = append(errs, err)
	}
	return total, errors.Join(errs...)
}

// Run purges every Interval (first cycle at once) until ctx is cancelled,
// then returns nil; a running batch is one short statement and is let to
// finish or is cancelled with ctx. Failed cycles are logged and retried on
// the next tick.
func (p *Purger) Run(ctx context.Context) error {
	t := time.NewTicker(p.cfg.Interval)
	defer t.Stop()
	for {
		n, err := p.PurgeOnce(ctx, time.Now())
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			p.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "retention cycle failed; retrying next cycle", slog.String("error", err.Error()))
		}
		for table, c := range n {
			if c > 0 {
				p.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "retention purged rows", slog.String("table", table), slog.Int64("rows", c))
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Purged returns the counter of rows purged from table (a qualified name).
func (m *Metrics) Purged(table string) prometheus.Counter {
	return m.purged.WithLabelValues(table)
}
