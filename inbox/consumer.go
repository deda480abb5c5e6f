package inbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/internal/backoff"
	"github.com/sagaflow/sagaflow/internal/kafkaclient"
)

// Consumer consumes Config.Topics through a consumer group and runs the
// Handler on batches of new messages, deduplicated by message id, in one
// transaction per batch. Build it with New and run it with Run.
type Consumer struct {
	pool    *pgxpool.Pool
	handler Handler
	cfg     Config
	log     *slog.Logger

	table string // quoted "<schema>.inbox"
	// deadRows inserts dead letters into <schema>.dead_letters.
	deadRows string

	mMessages, mDuplicates, mDLQ, mErrors prometheus.Counter
	mBatch, mWait, mBatchTime             prometheus.Observer
	mRestarts, mIsolated, mShortened      prometheus.Counter
	mPaused, mLost                        prometheus.Counter
	mCommits, mCommitErrors, mReruns      prometheus.Counter

	running atomic.Bool

	// afterDBCommit, when set (tests only), runs after the database commit
	// and before the offset commit; a non-nil error makes Run return it at
	// once, as if the process had crashed there.
	afterDBCommit func(batch []kafka.Message) error
}

// New validates cfg, fills in its defaults and returns a Consumer. Nothing
// connects until Run.
func New(pool *pgxpool.Pool, h Handler, cfg *Config) (*Consumer, error) {
	if pool == nil {
		return nil, errors.New("inbox: New: pool is nil")
	}
	if h == nil {
		return nil, errors.New("inbox: New: handler is nil")
	}
	if cfg == nil {
		cfg = &Config{} // validate names what is missing
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := cfg.WithDefaults()
	m := c.Metrics
	if m == nil {
		var err error
		if m, err = NewMetrics(prometheus.NewRegistry(), "sagaflow"); err != nil {
			return nil, err
		}
	}
	return &Consumer{
		pool:          pool,
		handler:       h,
		cfg:           c,
		log:           c.Logger.With("consumer", c.Name, "group", c.GroupID),
		table:         pgx.Identifier{c.Schema, "inbox"}.Sanitize(),
		deadRows:      deadRowsSQL(c.Schema),
		mMessages:     m.messages.WithLabelValues(c.Name),
		mDuplicates:   m.duplicates.WithLabelValues(c.Name),
		mDLQ:          m.dlq.WithLabelValues(c.Name),
		mErrors:       m.handleErrors.WithLabelValues(c.Name),
		mBatch:        m.batchSize.WithLabelValues(c.Name),
		mWait:         m.recordWait.WithLabelValues(c.Name),
		mBatchTime:    m.batchTime.WithLabelValues(c.Name),
		mRestarts:     m.restarts.WithLabelValues(c.Name),
		mIsolated:     m.isolated.WithLabelValues(c.Name),
		mShortened:    m.shortened.WithLabelValues(c.Name),
		mPaused:       m.paused.WithLabelValues(c.Name),
		mLost:         m.lost.WithLabelValues(c.Name),
		mCommits:      m.commits.WithLabelValues(c.Name),
		mCommitErrors: m.commitErrors.WithLabelValues(c.Name),
		mReruns:       m.reruns.WithLabelValues(c.Name),
	}, nil
}

// errStopped says Run's context ended while a batch waited to be retried.
var errStopped = errors.New("inbox: stopped")

// errRestart ends a session whose consumer group must be recreated.
var errRestart = errors.New("inbox: restart the consumer group")

// Run consumes until ctx is cancelled, then finishes the in-flight batches,
// leaves the consumer group and returns nil. It returns an error only if the
// consumer cannot run at all (or is already running).
func (c *Consumer) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return fmt.Errorf("inbox: consumer %q: Run: already running", c.cfg.Name)
	}
	defer c.running.Store(false)

	dlqTopics := make([]string, 0, len(c.cfg.Topics))
	for _, t := range c.cfg.Topics {
		dlqTopics = append(dlqTopics, t+c.cfg.DLQSuffix)
	}
	if err := kafkaclient.EnsureTopicsWith(ctx, c.cfg.Dialer, c.cfg.Brokers, DLQPartitionsDefault, 1, dlqTopics...); err != nil {
		// Operators may pre-create topics and forbid creation; a missing
		// topic will show up as a (retried) publish error.
		c.log.Warn("inbox: could not ensure dead-letter topics", "topics", dlqTopics, "err", err)
	}

	writer := &kafka.Writer{
		Addr:         kafka.TCP(c.cfg.Brokers...),
		Balancer:     kafkaclient.Balancer(),
		RequiredAcks: kafka.RequireAll,
		BatchTimeout: time.Millisecond,
		// A dead letter is at most DeadLetterBytes; leave room for the
		// record's framing so kafka-go never refuses it locally.
		BatchBytes:  int64(c.cfg.DeadLetterBytes) + 64<<10,
		MaxAttempts: 3,
	}
	if c.cfg.Dialer != nil {
		writer.Transport = kafkaclient.Transport(c.cfg.Dialer, "sagaflow-inbox-dlq")
	}
	defer func() {
		if cerr := writer.Close(); cerr != nil {
			c.log.Warn("inbox: close dead-letter writer", "err", cerr)
		}
	}()
	// Groups being closed after a restart; Run waits for them.
	var closing sync.WaitGroup
	defer closing.Wait()
	for restarts := 0; ; restarts++ {
		err := c.session(ctx, writer, &closing)
		if !errors.Is(err, errRestart) {
			if errors.Is(err, errStopped) || (err == nil && ctx.Err() != nil) {
				return nil
			}
			return err
		}
		c.mRestarts.Inc()
		if !backoff.Sleep(ctx, c.backoff(min(restarts+1, 4))) {
			return nil
		}
	}
}

// session runs one consumer group membership until ctx ends (nil), a
// batch fails fatally (its error) or the membership must be recreated
// (errRestart). The group is closed in the background, counted in closing.
func (c *Consumer) session(ctx context.Context, w *kafka.Writer, closing *sync.WaitGroup) error {
	cg, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{
		ID:                c.cfg.GroupID,
		Brokers:           c.cfg.Brokers,
		Dialer:            c.cfg.Dialer,
		Topics:            c.cfg.Topics,
		HeartbeatInterval: c.cfg.HeartbeatInterval,
		// A member cut off from the broker (or killed) is dropped after
		// SessionTimeout, so the group settles soon after.
		SessionTimeout:         c.cfg.SessionTimeout,
		RebalanceTimeout:       c.cfg.RebalanceTimeout,
		JoinGroupBackoff:       3 * time.Second,
		WatchPartitionChanges:  true,
		PartitionWatchInterval: 5 * time.Second,
		StartOffset:            kafka.FirstOffset,
		Timeout:                5 * time.Second,
		ErrorLogger: kafka.LoggerFunc(func(msg string, args ...any) {
			c.log.Warn("inbox: kafka consumer group: " + fmt.Sprintf(msg, args...))
		}),
	})
	if err != nil {
		return fmt.Errorf("inbox: consumer %q: consumer group: %w", c.cfg.Name, err)
	}
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	st := &state{restart: cancel}
	st.touch()
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		c.watch(sctx, st)
	}()

	var fatal error
	failures := 0
	for sctx.Err() == nil {
		gen, err := cg.Next(sctx)
		if err != nil {
			if sctx.Err() != nil {
				break
			}
			failures++
			if failures >= c.cfg.RestartAfterErrors {
				c.log.Warn("inbox: joining the consumer group keeps failing; recreating it", "err", err, "failures", failures)
				cancel(errRestart)
				break
			}
			c.log.Warn("inbox: joining the consumer group failed; retrying", "err", err, "failures", failures)
			if !backoff.Sleep(sctx, c.backoff(failures)) {
				break
			}
			continue
		}
		failures = 0
		st.touch()
		done := make(chan error, 1)
		gen.Start(func(gctx context.Context) {
			done <- c.generation(sctx, gctx, gen, w, st)
		})
		if err := <-done; err != nil {
			fatal = err
			cancel(err)
			break
		}
	}

	cancel(nil)
	<-watched
	restart := ctx.Err() == nil && errors.Is(context.Cause(sctx), errRestart)
	closing.Add(1)
	go func() {
		defer closing.Done()
		if cerr := cg.Close(); cerr != nil {
			c.log.Warn("inbox: close consumer group", "err", cerr)
		}
	}()
	switch {
	case fatal != nil && !errors.Is(fatal, errStopped):
		return fatal
	case restart:
		return errRestart
	}
	return nil
}

// backoff returns the wait before retry attempt (1-based): exponential from
// BackoffInitial, capped at BackoffMax, with jitter in [d/2, d].
func (c *Consumer) backoff(attempt int) time.Duration {
	return backoff.Jitter(backoff.Exponential(c.cfg.BackoffInitial, c.cfg.BackoffMax, attempt))
}

// state is what a session's lanes share with its watchdog.
type state struct {
	restart context.CancelCauseFunc
	// active is when the consumer last fetched a message, finished a batch
	// or joined a generation (unix nanos).
	active atomic.Int64
	// busy counts lanes with a batch in flight; queued counts messages
	// fetched and not yet taken into a batch.
	busy, queued atomic.Int64
	// commitFailures counts consecutive offset commit failures.
	commitFailures atomic.Int32
}

func (s *state) touch() { s.active.Store(time.Now().UnixNano()) }

// idleSince is when the consumer last did anything, or the zero time while
// it has work in hand.
func (s *state) idleSince() time.Time {
	if s.busy.Load() > 0 || s.queued.Load() > 0 {
		return time.Time{}
	}
	return time.Unix(0, s.active.Load())
}
