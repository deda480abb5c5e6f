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
	BatchSizeDefault         = 1000
	IntervalDefault          = time.Minute
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
	// than this lose their row and journal.
	FinishedSagaAfter time.Duration
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
	run   func(ctx context.Context, cutoff time.Time, limit int) (map[string]int64, error)
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
		p.jobs = append(p.jobs,
			p.simple(s+".outbox", c.SentOutboxAfter,
				`DELETE FROM `+ob+` WHERE id IN (SELECT id FROM `+ob+` WHERE sent_at < $1 ORDER BY sent_at LIMIT $2)`),
			p.simple(s+".inbox", c.InboxAfter,
				`DELETE FROM `+ib+` WHERE message_id IN (SELECT message_id FROM `+ib+` WHERE received_at < $1 ORDER BY received_at LIMIT $2)`),
		)
	}
	if s := c.OrchestratorSchema; s != "" {
		sg := pgx.Identifier{s, "sagas"}.Sanitize()
		jn := pgx.Identifier{s, "journal"}.Sanitize()
		// finished_at >= created_at, so created_at < cutoff narrows the scan
		// to the (state, created_at) index. SKIP LOCKED leaves a saga being
		// touched (an operator, a late reply) for the next cycle.
		q := `WITH victims AS (
	SELECT id FROM ` + sg + `
	WHERE state IN ('completed', 'compensated') AND created_at < $1 AND finished_at < $1
	ORDER BY created_at LIMIT $2 FOR UPDATE SKIP LOCKED
), j AS (
	DELETE FROM ` + jn + ` WHERE saga_id IN (SELECT id FROM victims) RETURNING 1
), d AS (
	DELETE FROM ` + sg + ` WHERE id IN (SELECT id FROM victims) RETURNING 1
)
SELECT (SELECT count(*) FROM d), (SELECT count(*) FROM j)`
		sagas, journal := s+".sagas", s+".journal"
		p.jobs = append(p.jobs, job{table: sagas, after: c.FinishedSagaAfter,
			run: func(ctx context.Context, cutoff time.Time, limit int) (map[string]int64, error) {
				var ns, nj int64
				if err := p.pool.QueryRow(ctx, q, cutoff, limit).Scan(&ns, &nj); err != nil {
					return nil, err
				}
				return map[string]int64{sagas: ns, journal: nj}, nil
			}})
	}
	return p, nil
}

func (p *Purger) simple(table string, after time.Duration, q string) job {
	return job{table: table, after: after, run: func(ctx context.Context, cutoff time.Time, limit int) (map[string]int64, error) {
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
		for ctx.Err() == nil {
			n, err := j.run(ctx, cutoff, p.cfg.BatchSize)
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
