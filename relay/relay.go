package relay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/internal/backoff"
	"github.com/sagaflow/sagaflow/internal/outboxdb"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/outbox"
)

// Defaults filled in by New for zero Config fields.
const (
	BatchSizeDefault     = 500
	PollIntervalDefault  = 500 * time.Millisecond
	BusyPollDefault      = 2 * time.Millisecond
	LingerDefault        = 3 * time.Millisecond
	StatsIntervalDefault = 5 * time.Second
	MaxAttemptsDefault   = 20
	RetryBackoffDefault  = time.Second
	WriteTimeoutDefault  = 10 * time.Second
)

// MaxRetryBackoff caps the doubling delay of a failed row and of the pause
// after a whole-batch failure.
const MaxRetryBackoff = time.Minute

// MaxMessageBytes bounds key+value+headers of one row. Larger rows are never
// handed to Kafka; they are marked failed (and eventually dead) at once. The
// broker's own limit (message.max.bytes, 1 MiB by default) is usually lower;
// rows it refuses are failed individually as well.
const MaxMessageBytes = 64 << 20

// ErrInvalidMessage is wrapped by the error recorded on a row the relay
// refuses to hand to Kafka: a topic name Kafka does not accept, or a row
// larger than MaxMessageBytes.
var ErrInvalidMessage = errors.New("relay: row cannot be published to Kafka")

// Config configures one relay. Zero fields take the XxxDefault values; nil
// is a Config of zeros (refused: Brokers is required).
type Config struct {
	// Brokers are the Kafka bootstrap brokers; required.
	Brokers []string
	// Dialer, if set, makes the relay's Kafka connections (TLS, SASL: see
	// kafkaclient.Security); nil dials plain TCP.
	Dialer       *kafka.Dialer
	BatchSize    int           // rows claimed and published per cycle; default BatchSizeDefault
	MaxAttempts  int           // publish attempts of one row before it is parked dead; default MaxAttemptsDefault
	WriteTimeout time.Duration // Kafka write timeout, also bounds each database call of a cycle; default WriteTimeoutDefault
	// KeepSent keeps published rows as sent history (marked with sent_at,
	// purged by retention) instead of deleting them; default false: delete.
	KeepSent bool
	Logger   *slog.Logger // nil: discard
	Metrics  *Metrics     // nil: no metrics
	// Advanced holds the relay's tuning knobs (polling, linger, gauges,
	// retry backoff); their defaults suit most deployments. Its fields are
	// promoted: cfg.Linger works.
	Advanced
}

// Advanced are the relay's tuning knobs. Zero fields take their defaults.
type Advanced struct {
	PollInterval  time.Duration // fallback poll when no NOTIFY arrives, and lock retry of a standby; default PollIntervalDefault
	BusyPoll      time.Duration // poll interval while producers are not notifying (the relay is busy); default BusyPollDefault
	Linger        time.Duration // pause after a partial batch before claiming again; default LingerDefault, negative: none
	StatsInterval time.Duration // refresh of the outbox gauges; default StatsIntervalDefault
	RetryBackoff  time.Duration // first delay for a failed row; doubles per attempt, capped at MaxRetryBackoff; default RetryBackoffDefault
	// NoDispatch turns the dispatch mode off: the processes that commit
	// outbox rows leave every one to the sweep (woken by NOTIFY) instead
	// of handing it to Send right after their commit; default false:
	// dispatch.
	NoDispatch bool
	// DispatchLease: how long a dispatched row is left to its process
	// before the relay may publish it; default DispatchLeaseDefault.
	DispatchLease time.Duration
}

// WithDefaults returns c with its zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.BatchSize = cmp.Or(c.BatchSize, BatchSizeDefault)
	c.PollInterval = cmp.Or(c.PollInterval, PollIntervalDefault)
	c.Linger = cmp.Or(c.Linger, LingerDefault)
	c.DispatchLease = cmp.Or(c.DispatchLease, DispatchLeaseDefault)
	c.BusyPoll = cmp.Or(c.BusyPoll, BusyPollDefault)
	c.StatsInterval = cmp.Or(c.StatsInterval, StatsIntervalDefault)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, MaxAttemptsDefault)
	c.RetryBackoff = cmp.Or(c.RetryBackoff, RetryBackoffDefault)
	c.WriteTimeout = cmp.Or(c.WriteTimeout, WriteTimeoutDefault)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	c.Brokers = append([]string(nil), c.Brokers...)
	return c
}

// validate checks c as given (zero fields stand for their defaults); the
// error names the field.
func (c Config) validate() error {
	switch {
	case len(c.Brokers) == 0:
		return errors.New("Config.Brokers is empty")
	case c.BatchSize < 0:
		return fmt.Errorf("Config.BatchSize is %d, want > 0", c.BatchSize)
	case c.PollInterval < 0:
		return fmt.Errorf("Config.PollInterval is %s, want > 0", c.PollInterval)
	case c.BusyPoll < 0:
		return fmt.Errorf("Config.BusyPoll is %s, want > 0", c.BusyPoll)
	case c.StatsInterval < 0:
		return fmt.Errorf("Config.StatsInterval is %s, want > 0", c.StatsInterval)
	case c.MaxAttempts < 0:
		return fmt.Errorf("Config.MaxAttempts is %d, want > 0", c.MaxAttempts)
	case c.RetryBackoff < 0:
		return fmt.Errorf("Config.RetryBackoff is %s, want > 0", c.RetryBackoff)
	case c.WriteTimeout < 0:
		return fmt.Errorf("Config.WriteTimeout is %s, want > 0", c.WriteTimeout)
	}
	for i, b := range c.Brokers {
		if b == "" {
			return fmt.Errorf("Config.Brokers[%d] is empty", i)
		}
	}
	return nil
}

// Relay publishes the rows of one outbox to Kafka, in two modes over one
// producer: it sweeps the table (while it holds the outbox's publishing
// lock), and it dispatches the rows its own process hands it with Send
// right after their commit (unless Config.NoDispatch). See the package
// documentation for its guarantees.
type Relay struct {
	pool    *pgxpool.Pool
	ob      *outboxdb.Table
	cfg     Config
	log     *slog.Logger
	m       *outboxMetrics
	lockKey string

	leader  atomic.Bool
	running atomic.Bool

	// The dispatch mode: Send's queue, the published rows waiting for
	// their delete, whether it runs.
	queue       chan *outboxdb.Pending
	done        chan []int64
	dispatching atomic.Bool
	dropped     sync.Once

	// afterPublish (tests only) runs after a sweep's publish and before
	// its rows are recorded; an error makes Run stop there as if the
	// process crashed. afterDispatch (tests only) runs after a dispatch
	// publish and before the delete; an error drops the delete.
	afterPublish, afterDispatch func() error
}

// New returns a relay for ob. pool is used to open the relay's dedicated
// lock connection (with the pool's connection settings), to read the
// outbox statistics and to delete the rows it dispatched.
func New(pool *pgxpool.Pool, ob *outbox.Outbox, cfg *Config) (*Relay, error) {
	if pool == nil {
		return nil, errors.New("relay: New: pool is nil")
	}
	if ob == nil {
		return nil, errors.New("relay: New: outbox is nil")
	}
	if cfg == nil {
		cfg = &Config{} // validate names what is missing
	}
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("relay %s: New: %w", ob.Schema(), err)
	}
	c := cfg.WithDefaults()
	return &Relay{
		pool:    pool,
		ob:      outboxdb.For(ob.Schema()),
		cfg:     c,
		log:     c.Logger.With("outbox", ob.Schema()),
		m:       c.Metrics.forOutbox(ob.Schema()),
		lockKey: "sagaflow.relay." + ob.Schema(),
		queue:   make(chan *outboxdb.Pending, dispatchQueue),
		done:    make(chan []int64, dispatchQueue),
	}, nil
}

// Leader reports whether this relay currently holds the publishing lock of
// its outboxdb.
func (r *Relay) Leader() bool { return r.leader.Load() }

// Run publishes until ctx is cancelled, then finishes the batch in flight
// (and the dispatches queued), releases the lock and returns nil. While
// another relay holds the lock it sweeps nothing and waits as a standby,
// dispatching all the same. It returns an error only when called twice at
// once.
func (r *Relay) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return fmt.Errorf("relay %s: Run: already running", r.ob.Schema())
	}
	defer r.running.Store(false)

	var wg sync.WaitGroup
	sideCtx, stopSide := context.WithCancel(ctx)
	defer wg.Wait()
	defer stopSide()
	if r.m != nil {
		wg.Go(func() { r.statsLoop(sideCtx) })
	}
	if !r.cfg.NoDispatch {
		r.dispatching.Store(true)
		wg.Go(func() { r.dispatch(sideCtx) })
	}
	return r.sweep(ctx)
}

// sweep is the sweeping mode: standby, or publishing the due rows while it
// holds the publishing lock, until ctx ends (or the test hook crashes it).
func (r *Relay) sweep(ctx context.Context) error {
	prod := newDirect(r.cfg, "sagaflow-relay")
	defer prod.close()

	var conn *pgx.Conn
	defer func() { r.closeConn(conn) }()
	for ctx.Err() == nil {
		if conn == nil {
			c, err := r.connect(ctx)
			if err != nil {
				if ctx.Err() == nil {
					r.log.Error("relay: open lock connection; retrying", "error", err, "retry_in", r.cfg.PollInterval)
				}
				backoff.Sleep(ctx, r.cfg.PollInterval)
				continue
			}
			conn = c
		}
		got, err := r.tryLock(ctx, conn)
		if err != nil {
			if ctx.Err() == nil {
				r.log.Error("relay: take publishing lock; reconnecting", "error", err)
			}
			r.closeConn(conn)
			conn = nil
			backoff.Sleep(ctx, r.cfg.PollInterval)
			continue
		}
		if !got {
			backoff.Sleep(ctx, r.cfg.PollInterval)
			continue
		}
		err = r.lead(ctx, conn, prod)
		r.leader.Store(false)
		// The session lock dies with its connection: close it whatever the
		// reason we stopped leading, so no half-dead session keeps it.
		r.closeConn(conn)
		conn = nil
		var crash *crashError
		if errors.As(err, &crash) {
			return err
		}
		if err != nil && ctx.Err() == nil {
			r.log.Error("relay: lost the lock connection; stopped publishing, reacquiring", "error", err)
		}
	}
	return nil
}

func (r *Relay) connect(ctx context.Context) (*pgx.Conn, error) {
	cc := r.pool.Config().ConnConfig.Copy()
	if cc.RuntimeParams == nil {
		cc.RuntimeParams = map[string]string{}
	}
	cc.RuntimeParams["application_name"] = "sagaflow-relay-" + r.ob.Schema()
	// The relay's own writes only record that rows were published (or
	// failed to be). Losing one in a crash re-publishes the rows, which
	// receivers dedupe: the guarantee of the publish-then-mark window. So
	// they need not wait for a WAL flush; everything else stays durable.
	cc.RuntimeParams["synchronous_commit"] = "off"
	cctx, cancel := context.WithTimeout(ctx, r.cfg.WriteTimeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(cctx, cc)
	if err != nil {
		return nil, fmt.Errorf("relay %s: connect: %w", r.ob.Schema(), err)
	}
	return conn, nil
}

func (r *Relay) closeConn(conn *pgx.Conn) {
	if conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}

func (r *Relay) tryLock(ctx context.Context, conn *pgx.Conn) (bool, error) {
	lctx, cancel := context.WithTimeout(ctx, r.cfg.WriteTimeout)
	defer cancel()
	var got bool
	if err := conn.QueryRow(lctx, `SELECT pg_try_advisory_lock(hashtext($1))`, r.lockKey).Scan(&got); err != nil {
		return false, fmt.Errorf("relay %s: try advisory lock %q: %w", r.ob.Schema(), r.lockKey, err)
	}
	return got, nil
}

// lead publishes while conn holds the lock. It returns nil when ctx is done,
// a *crashError from the test hook, or the error that broke conn.
func (r *Relay) lead(ctx context.Context, conn *pgx.Conn, prod *direct) error {
	listen := "LISTEN " + pgx.Identifier{r.ob.Channel()}.Sanitize()
	lctx, cancel := context.WithTimeout(ctx, r.cfg.WriteTimeout)
	_, err := conn.Exec(lctx, listen)
	cancel()
	if err != nil {
		return fmt.Errorf("relay %s: %s: %w", r.ob.Schema(), listen, err)
	}
	r.leader.Store(true)
	r.log.Info("relay: holding the publishing lock; publishing")
	defer r.log.Info("relay: stopped publishing")

	// listening: this session holds the outbox's listen lock, so producers
	// notify. Otherwise they do not, and the relay polls every BusyPoll.
	// The lock is taken and released in the round trip of a claim (op).
	listening := false
	op := outboxdb.ListenTry
	outages := 0 // in a row, for the pause after each
	// published: rows Kafka acknowledged that are not deleted (or marked)
	// yet; the next claim records them in the same round trip. The empty
	// claim before the relay waits records the last ones, and so does the
	// way out.
	var published []int64
	defer func() {
		if len(published) == 0 || conn.IsClosed() {
			return
		}
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.WriteTimeout)
		defer cancel()
		if err := r.record(fctx, conn, published); err != nil {
			r.log.Warn("relay: published rows not marked on the way out (they will be published again)", "rows", len(published), "error", err)
		}
	}()
	for ctx.Err() == nil {
		n, claimed, err := r.cycle(ctx, conn, prod, &published, op)
		if claimed {
			switch op {
			case outboxdb.ListenTry:
				listening = n.listening
			case outboxdb.ListenRelease:
				listening = false
			}
		}
		var outage *outageError
		switch {
		case errors.As(err, &outage):
			op = outboxdb.ListenKeep
			outages++
			pause := backoff.Exponential(r.cfg.RetryBackoff, MaxRetryBackoff, outages)
			r.log.Error("relay: publish failed for the whole batch; backing off", "error", err, "rows", outage.rows, "retry_in", pause)
			backoff.Sleep(ctx, pause)
			continue
		case err != nil:
			return err
		}
		outages = 0
		if rows := n.rows; rows > 0 {
			switch {
			case listening && rows > 1:
				// Rows keep coming: stop the NOTIFYs, poll instead.
				op = outboxdb.ListenRelease
			case !listening && rows < r.cfg.BatchSize:
				// Maybe the last of them: be ready to wait.
				op = outboxdb.ListenTry
			default:
				op = outboxdb.ListenKeep
			}
			if rows < r.cfg.BatchSize && r.cfg.Linger > 0 {
				// A partial batch: let more rows gather before the next
				// claim, trading a little latency for fewer, fuller cycles.
				backoff.Sleep(ctx, r.cfg.Linger)
			}
			continue // drain before waiting
		}
		if !listening {
			if op != outboxdb.ListenTry {
				op = outboxdb.ListenTry
				continue
			}
			// The listen lock was refused: a producer that did not
			// notify is still in flight, and its rows come next.
			backoff.Sleep(ctx, r.cfg.BusyPoll)
			continue
		}
		// Nothing due and producers notify: wait for one (at most
		// PollInterval, the poll fallback that also finds rows whose
		// available_at has come), keeping the lock.
		op = outboxdb.ListenKeep
		wctx, cancel := context.WithTimeout(ctx, r.cfg.PollInterval)
		_, err = conn.WaitForNotification(wctx)
		timedOut := errors.Is(wctx.Err(), context.DeadlineExceeded)
		cancel()
		if err != nil && ctx.Err() == nil && !timedOut {
			return fmt.Errorf("relay %s: wait for notification on %q: %w", r.ob.Schema(), r.ob.Channel(), err)
		}
	}
	return nil
}

// rowBackoff is the delay after the (attempts+1)-th failed publish of a row.
func (r *Relay) rowBackoff(attempts int) time.Duration {
	return backoff.Exponential(r.cfg.RetryBackoff, MaxRetryBackoff, attempts+1)
}

// crashError is the error of the afterPublish test hook.
type crashError struct{ err error }

func (e *crashError) Error() string {
	return "relay: stopped after publish, before mark sent: " + e.err.Error()
}
func (e *crashError) Unwrap() error { return e.err }

// outageError: nothing of the batch reached Kafka because Kafka could not
// be reached; the rows are left untouched and the relay backs off.
type outageError struct {
	rows int
	err  error
}

func (e *outageError) Error() string { return e.err.Error() }
func (e *outageError) Unwrap() error { return e.err }

// record deletes (or, with KeepSent, marks sent) published rows.
func (r *Relay) record(ctx context.Context, conn *pgx.Conn, ids []int64) error {
	return r.ob.RecordPublished(ctx, conn, ids, r.cfg.KeepSent)
}

// cycleResult is what one cycle claimed.
type cycleResult struct {
	rows      int  // rows claimed
	listening bool // with ListenTry: the listen lock was taken
}

// cycle records the rows published by the previous cycle (*published),
// applies op to the listen lock and claims due rows (one round trip for
// all three), publishes them and leaves the acknowledged ones in
// *published; failed rows are marked at once. claimed reports whether the
// claim round trip succeeded (and so op took effect).
func (r *Relay) cycle(ctx context.Context, conn *pgx.Conn, prod *direct, published *[]int64, op outboxdb.ListenOp) (res cycleResult, claimed bool, err error) {
	schema := r.ob.Schema()
	// The claim runs on the lock connection: if that session (and so the
	// lock) is gone, the claim fails and nothing is published.
	cctx, cancel := context.WithTimeout(ctx, r.cfg.WriteTimeout)
	got, err := r.ob.Claim(cctx, conn, outboxdb.Claim{Done: *published, KeepSent: r.cfg.KeepSent, Listen: op, Limit: r.cfg.BatchSize})
	cancel()
	if err != nil {
		// Whether the previous rows were recorded is unknown: they stay in
		// *published, and recording them again changes nothing.
		return res, false, fmt.Errorf("relay %s: %d rows published but maybe not marked (they may be published again): %w", schema, len(*published), err)
	}
	rows := got.Rows
	res = cycleResult{rows: len(rows), listening: got.Listening}
	*published = (*published)[:0]
	if len(rows) == 0 {
		return res, true, nil
	}
	// From here the batch is in flight: finish it even if ctx is cancelled,
	// so a shutdown does not cause re-publishing.
	wctx := context.WithoutCancel(ctx)
	pr := r.publish(wctx, prod, rows)
	if r.afterPublish != nil {
		if err := r.afterPublish(); err != nil {
			return res, true, &crashError{err: err}
		}
	}
	mctx, cancel := context.WithTimeout(wctx, r.cfg.WriteTimeout)
	defer cancel()
	*published = append(*published, pr.sent...)
	for _, f := range pr.failed {
		if err := r.markFailed(mctx, conn, f.row, f.err); err != nil {
			return res, true, err
		}
	}
	if len(pr.untouched) > 0 {
		return res, true, &outageError{rows: len(pr.untouched), err: fmt.Errorf("relay %s: publish %d rows (first row id %d): %w",
			schema, len(pr.untouched), pr.untouched[0].ID, pr.outage)}
	}
	return res, true, nil
}

func (r *Relay) markFailed(ctx context.Context, conn *pgx.Conn, row outboxdb.Row, cause error) error {
	msg := cause.Error()
	attrs := []any{"outbox_row_id", row.ID, "topic", row.Topic, "key", row.Key,
		message.AttrMessageIDHash, message.IDTextHash(row.Headers[message.HeaderMessageID]), "attempt", row.Attempts + 1, "error", msg}
	if row.Attempts+1 >= r.cfg.MaxAttempts {
		if err := r.ob.MarkDead(ctx, conn, row.ID, msg); err != nil {
			return fmt.Errorf("relay %s: park row %d dead: %w", r.ob.Schema(), row.ID, err)
		}
		r.log.Error("relay: row parked dead after its last publish attempt; needs an operator", attrs...)
		return nil
	}
	d := r.rowBackoff(row.Attempts)
	if err := r.ob.MarkFailed(ctx, conn, row.ID, msg, time.Now().Add(d)); err != nil {
		return fmt.Errorf("relay %s: mark row %d failed: %w", r.ob.Schema(), row.ID, err)
	}
	r.log.Warn("relay: publish of row failed; will retry", append(attrs, "retry_in", d)...)
	return nil
}

func (r *Relay) statsLoop(ctx context.Context) {
	t := time.NewTicker(r.cfg.StatsInterval)
	defer t.Stop()
	for {
		r.refreshStats(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (r *Relay) refreshStats(ctx context.Context) {
	sctx, cancel := context.WithTimeout(ctx, r.cfg.WriteTimeout)
	defer cancel()
	s, err := r.ob.Stats(sctx, r.pool)
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("relay: refresh outbox gauges", "error", err)
		}
		return
	}
	r.m.pending.Set(float64(s.Pending))
	r.m.oldest.Set(s.OldestUnsent.Seconds())
	r.m.dead.Set(float64(s.Dead))
}
