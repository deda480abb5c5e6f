package inbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/kafkaclient"
	"github.com/sagaflow/sagaflow/message"
)

// Defaults filled in by New for zero Config fields.
const (
	DLQSuffixDefault = ".dlq"
	BatchSizeDefault = 100
	// MaxWaitDefault is the fetch wait, as long as the Java consumer's
	// default. It does not delay messages (a fetch returns as soon as one
	// byte is there); it bounds how often an idle partition is polled and,
	// with kafka-go, how late a fetch answer may come: kafka-go asks the
	// broker to wait three quarters of MaxWait and drops the connection at
	// MaxWait (then waits 100 ms and reconnects). At 50 ms, a broker
	// answering 12.5 ms late on a busy machine cut a hundred connections per
	// place-order benchmark run; at 500 ms none, and an idle consumer polls a
	// tenth as often.
	MaxWaitDefault        = 500 * time.Millisecond
	BackoffInitialDefault = 100 * time.Millisecond
	BackoffMaxDefault     = 10 * time.Second
	// LanesDefault is the number of partition lanes processed concurrently.
	// One: concurrent batches of a handler that updates shared rows (a
	// stock counter, say) in varying order deadlock and retry.
	LanesDefault = 1
	// DLQPartitionsDefault is the partition count Run uses when it creates a
	// missing dead-letter topic.
	DLQPartitionsDefault = 1
	// SessionTimeoutDefault is the consumer group session timeout. A
	// consumer whose broker connection was cut cannot leave its group; when
	// it reconnects it joins as a new member, and the group does not settle
	// until the coordinator drops the old member after this long (kafka-go's
	// own default of 30s held every partition of the group that long after
	// a broker outage).
	SessionTimeoutDefault = 6 * time.Second
	// HeartbeatIntervalMax caps the default heartbeat interval (a third of
	// the session timeout): members learn of a rebalance at their next
	// heartbeat, so a short interval lets a group settle sooner.
	HeartbeatIntervalMax = time.Second
	// RebalanceTimeoutDefault is how long the coordinator waits for the
	// members to rejoin during a rebalance (kafka-go's default is 30s). A
	// member that does not rejoin in time is dropped and rejoins later.
	RebalanceTimeoutDefault = 5 * time.Second
	// StallTimeoutDefault: when this consumer has waited this long for a
	// message with no batch in flight, and the group has lag that its
	// committed offsets then do not reduce for half as long again, the
	// Kafka reader is closed and recreated (kafka-go's group session does not always recover from a
	// cut connection or a coordinator that stopped answering).
	StallTimeoutDefault = 20 * time.Second
	// RestartAfterErrorsDefault is the number of consecutive fetch (or
	// offset commit) failures after which the reader is recreated.
	RestartAfterErrorsDefault = 5
	// CommitTimeoutDefault bounds the offset commit and dead-letter publish
	// of a batch, which run even while Run's context is being cancelled.
	CommitTimeoutDefault = 30 * time.Second
)

// HeaderDLQPartition carries the original partition of a dead-lettered
// record (the message package names the other dead-letter headers).
const HeaderDLQPartition = "dlq-original-partition"

// Handler processes one message inside tx. Return nil to commit; an error
// wrapped with Permanent (or wrapping message.ErrInvalid) means the message
// itself is bad: it goes to the dead-letter topic and the partition moves on;
// any other error is transient: the whole batch is rolled back and retried
// with backoff (the message is NOT skipped).
//
// The Handler runs inside a savepoint of the batch transaction: it must not
// commit or roll back tx itself. ctx is not cancelled when Run's context is,
// so that the in-flight batch can finish.
type Handler func(ctx context.Context, tx pgx.Tx, m kafka.Message) error

// BatchHandler processes several messages together inside tx, for
// handlers that do fewer statements per message that way. It gets the new
// (not duplicate, well-formed) messages of a batch in order, inside a
// savepoint. On nil they all count as handled; on any error (or panic) the
// savepoint is rolled back and the Handler runs for each message one by one,
// which decides about retries and dead letters as usual.
type BatchHandler func(ctx context.Context, tx pgx.Tx, ms []kafka.Message) error

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks err as a property of the message itself: retrying cannot
// help, so the message is dead-lettered. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err was marked with Permanent or wraps
// message.ErrInvalid.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p) || errors.Is(err, message.ErrInvalid)
}

// Config configures a Consumer.
type Config struct {
	Brokers []string
	GroupID string
	Topics  []string
	// Schema is the Postgres schema holding the inbox table (the
	// "messaging" migration set).
	Schema string
	// Name labels metrics and logs; default GroupID.
	Name string
	// DLQSuffix is appended to a topic's name to name its dead-letter
	// topic; default DLQSuffixDefault.
	DLQSuffix string
	// BatchSize is the maximum number of messages per transaction; default
	// BatchSizeDefault.
	BatchSize int
	// MaxWait is kafka-go's fetch MaxWait; default MaxWaitDefault.
	MaxWait time.Duration
	// BatchHandler, if set, is tried first for the new messages of each
	// batch; see BatchHandler.
	BatchHandler BatchHandler
	// Lanes is the number of batches processed concurrently, each in its
	// own transaction. A partition always belongs to the same lane, so the
	// order within a partition (and so per key) is kept; default
	// LanesDefault (1: every batch one after another). Raise it when the
	// handler's transactions do not contend for shared rows, e.g. the
	// orchestrator's reply handler (one saga row per key): lanes let
	// Postgres group the commits of concurrent batches. When transactions of
	// different lanes lock the same rows in different order, they deadlock
	// and are retried (correct, but slow).
	Lanes int
	// BackoffInitial and BackoffMax bound the capped exponential backoff
	// (with jitter) between retries of a batch that failed transiently;
	// defaults BackoffInitialDefault and BackoffMaxDefault.
	BackoffInitial, BackoffMax time.Duration
	// SessionTimeout is the consumer group session timeout: how long the
	// coordinator keeps a member that stopped heartbeating (a crashed
	// process, or one cut off from the broker) before giving its partitions
	// to the others; default SessionTimeoutDefault. Heartbeats are sent
	// every third of it, at most every 3s.
	SessionTimeout time.Duration
	// HeartbeatInterval is the consumer group heartbeat interval; default a
	// third of SessionTimeout, at most HeartbeatIntervalMax.
	HeartbeatInterval time.Duration
	// RebalanceTimeout bounds how long the coordinator waits for members to
	// rejoin in a rebalance; default RebalanceTimeoutDefault.
	RebalanceTimeout time.Duration
	// StallTimeout: see StallTimeoutDefault (the default).
	StallTimeout time.Duration
	// RestartAfterErrors: see RestartAfterErrorsDefault (the default).
	RestartAfterErrors int
	// Logger receives the consumer's logs; nil discards them.
	Logger *slog.Logger
	// Metrics receives the consumer's metrics; nil keeps them on a private
	// registry.
	Metrics *Metrics
}

func (c *Config) withDefaults() Config {
	out := *c
	out.Name = cmp.Or(out.Name, out.GroupID)
	out.DLQSuffix = cmp.Or(out.DLQSuffix, DLQSuffixDefault)
	out.BatchSize = cmp.Or(out.BatchSize, BatchSizeDefault)
	out.MaxWait = cmp.Or(out.MaxWait, MaxWaitDefault)
	out.Lanes = cmp.Or(out.Lanes, LanesDefault)
	out.BackoffInitial = cmp.Or(out.BackoffInitial, BackoffInitialDefault)
	out.BackoffMax = cmp.Or(out.BackoffMax, BackoffMaxDefault)
	out.SessionTimeout = cmp.Or(out.SessionTimeout, SessionTimeoutDefault)
	out.HeartbeatInterval = cmp.Or(out.HeartbeatInterval, min(HeartbeatIntervalMax, out.SessionTimeout/3))
	out.RebalanceTimeout = cmp.Or(out.RebalanceTimeout, RebalanceTimeoutDefault)
	out.StallTimeout = cmp.Or(out.StallTimeout, StallTimeoutDefault)
	out.RestartAfterErrors = cmp.Or(out.RestartAfterErrors, RestartAfterErrorsDefault)
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	out.Topics = append([]string(nil), out.Topics...)
	out.Brokers = append([]string(nil), out.Brokers...)
	return out
}

func (c *Config) validate() error {
	switch {
	case len(c.Brokers) == 0:
		return errors.New("inbox: Config.Brokers is empty")
	case c.GroupID == "":
		return errors.New("inbox: Config.GroupID is required")
	case len(c.Topics) == 0:
		return errors.New("inbox: Config.Topics is empty")
	case c.Schema == "":
		return errors.New("inbox: Config.Schema is required")
	case c.BatchSize < 0:
		return fmt.Errorf("inbox: Config.BatchSize is %d, want > 0", c.BatchSize)
	case c.Lanes < 0:
		return fmt.Errorf("inbox: Config.Lanes is %d, want > 0", c.Lanes)
	case c.MaxWait < 0:
		return fmt.Errorf("inbox: Config.MaxWait is %s, want > 0", c.MaxWait)
	case c.BackoffInitial < 0:
		return fmt.Errorf("inbox: Config.BackoffInitial is %s, want > 0", c.BackoffInitial)
	case c.BackoffMax < 0:
		return fmt.Errorf("inbox: Config.BackoffMax is %s, want > 0", c.BackoffMax)
	case c.SessionTimeout < 0 || (c.SessionTimeout > 0 && c.SessionTimeout < time.Second):
		return fmt.Errorf("inbox: Config.SessionTimeout is %s, want at least 1s", c.SessionTimeout)
	case c.HeartbeatInterval < 0:
		return fmt.Errorf("inbox: Config.HeartbeatInterval is %s, want > 0", c.HeartbeatInterval)
	case c.HeartbeatInterval > 0 && c.HeartbeatInterval >= cmp.Or(c.SessionTimeout, SessionTimeoutDefault):
		return fmt.Errorf("inbox: Config.HeartbeatInterval (%s) is not less than the session timeout", c.HeartbeatInterval)
	case c.RebalanceTimeout < 0 || (c.RebalanceTimeout > 0 && c.RebalanceTimeout < time.Second):
		return fmt.Errorf("inbox: Config.RebalanceTimeout is %s, want at least 1s", c.RebalanceTimeout)
	case c.StallTimeout < 0 || (c.StallTimeout > 0 && c.StallTimeout < time.Second):
		return fmt.Errorf("inbox: Config.StallTimeout is %s, want at least 1s", c.StallTimeout)
	case c.RestartAfterErrors < 0:
		return fmt.Errorf("inbox: Config.RestartAfterErrors is %d, want > 0", c.RestartAfterErrors)
	}
	for i, t := range c.Topics {
		if t == "" {
			return fmt.Errorf("inbox: Config.Topics[%d] is empty", i)
		}
	}
	return nil
}

// Consumer consumes Config.Topics through a consumer group and runs a
// Handler per message, deduplicated by message id, in one transaction per
// batch. Build it with New and run it with Run.
type Consumer struct {
	pool    *pgxpool.Pool
	handler Handler
	cfg     Config
	log     *slog.Logger

	table string // quoted "<schema>.inbox"

	mMessages, mDuplicates, mDLQ, mErrors prometheus.Counter
	mBatch, mWait, mBatchTime             prometheus.Observer
	mRestarts                             prometheus.Counter

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
		return nil, errors.New("inbox: New: Config is nil")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := cfg.withDefaults()
	if c.BackoffMax < c.BackoffInitial {
		return nil, fmt.Errorf("inbox: Config.BackoffMax (%s) is less than Config.BackoffInitial (%s)", c.BackoffMax, c.BackoffInitial)
	}
	m := c.Metrics
	if m == nil {
		var err error
		if m, err = NewMetrics(prometheus.NewRegistry(), "sagaflow"); err != nil {
			return nil, err
		}
	}
	return &Consumer{
		pool:        pool,
		handler:     h,
		cfg:         c,
		log:         c.Logger.With("consumer", c.Name, "group", c.GroupID),
		table:       pgx.Identifier{c.Schema, "inbox"}.Sanitize(),
		mMessages:   m.messages.WithLabelValues(c.Name),
		mDuplicates: m.duplicates.WithLabelValues(c.Name),
		mDLQ:        m.dlq.WithLabelValues(c.Name),
		mErrors:     m.handleErrors.WithLabelValues(c.Name),
		mBatch:      m.batchSize.WithLabelValues(c.Name),
		mWait:       m.recordWait.WithLabelValues(c.Name),
		mBatchTime:  m.batchTime.WithLabelValues(c.Name),
		mRestarts:   m.restarts.WithLabelValues(c.Name),
	}, nil
}

// errStopped says Run's context ended while a batch waited to be retried.
var errStopped = errors.New("inbox: stopped")

// Run consumes until ctx is cancelled, then finishes the in-flight batch,
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
	if err := kafkaclient.EnsureTopics(ctx, c.cfg.Brokers, DLQPartitionsDefault, 1, dlqTopics...); err != nil {
		// Operators may pre-create topics and forbid creation; a missing
		// topic will show up as a (retried) publish error.
		c.log.Warn("inbox: could not ensure dead-letter topics", "topics", dlqTopics, "err", err)
	}

	writer := &kafka.Writer{
		Addr:         kafka.TCP(c.cfg.Brokers...),
		Balancer:     &kafka.Hash{},
		RequiredAcks: kafka.RequireAll,
		BatchTimeout: time.Millisecond,
	}
	defer func() {
		if cerr := writer.Close(); cerr != nil {
			c.log.Warn("inbox: close dead-letter writer", "err", cerr)
		}
	}()
	// Readers being closed after a restart; Run waits for them.
	var closing sync.WaitGroup
	defer closing.Wait()
	for restarts := 0; ; restarts++ {
		err := c.session(ctx, writer, &closing)
		if !errors.Is(err, errRestart) {
			if errors.Is(err, errStopped) {
				return nil
			}
			return err
		}
		c.mRestarts.Inc()
		if !sleep(ctx, c.backoff(min(restarts+1, 4))) {
			return nil
		}
	}
}

// errRestart ends a session whose reader must be recreated.
var errRestart = errors.New("inbox: restart the reader")

func (c *Consumer) newReader() *kafka.Reader {
	return kafka.NewReader(kafka.ReaderConfig{
		Brokers:        c.cfg.Brokers,
		GroupID:        c.cfg.GroupID,
		GroupTopics:    c.cfg.Topics,
		CommitInterval: 0,
		StartOffset:    kafka.FirstOffset,
		MinBytes:       1,
		MaxBytes:       10 << 20,
		MaxWait:        c.cfg.MaxWait,
		// A member cut off from the broker (or killed) is dropped after
		// SessionTimeout, so the group settles soon after.
		SessionTimeout:    c.cfg.SessionTimeout,
		HeartbeatInterval: c.cfg.HeartbeatInterval,
		RebalanceTimeout:  c.cfg.RebalanceTimeout,
		JoinGroupBackoff:  3 * time.Second,
		ErrorLogger: kafka.LoggerFunc(func(msg string, args ...any) {
			c.log.Warn("inbox: kafka reader: " + fmt.Sprintf(msg, args...))
		}),
	})
}

// session runs one Kafka reader until ctx ends (nil or errStopped), a lane
// fails (its error) or the reader must be recreated (errRestart). The
// reader is closed in the background, counted in closing.
func (c *Consumer) session(ctx context.Context, w *kafka.Writer, closing *sync.WaitGroup) error {
	reader := c.newReader()
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	lanes := make([]chan kafka.Message, c.cfg.Lanes)
	for i := range lanes {
		lanes[i] = make(chan kafka.Message, c.cfg.BatchSize)
	}
	f := &fetcher{done: make(chan struct{}), restart: cancel}
	go c.fetch(sctx, reader, lanes, f)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		c.watch(sctx, f)
	}()

	err := c.runLanes(sctx, reader, w, lanes, f)

	cancel(nil)
	<-f.done
	<-watched
	restart := ctx.Err() == nil && errors.Is(context.Cause(sctx), errRestart)
	closing.Add(1)
	go func() {
		defer closing.Done()
		if cerr := reader.Close(); cerr != nil {
			c.log.Warn("inbox: close reader", "err", cerr)
		}
	}()
	if restart && (err == nil || errors.Is(err, errStopped)) {
		return errRestart
	}
	return err
}

// watch recreates the reader (cancels the session with errRestart) when
// the group has lag its committed offsets do not reduce for StallTimeout
// while this consumer has been waiting for a message, with no batch in
// flight, for as long.
func (c *Consumer) watch(ctx context.Context, f *fetcher) {
	cl := &kafka.Client{Addr: kafka.TCP(c.cfg.Brokers...), Timeout: 5 * time.Second}
	tick := time.NewTicker(max(c.cfg.StallTimeout/4, 100*time.Millisecond))
	defer tick.Stop()
	var last map[string]int64 // committed offsets at the start of the current stall
	var since time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		waiting := f.waitingSince()
		if waiting.IsZero() || f.busy.Load() > 0 || time.Since(waiting) < c.cfg.StallTimeout {
			last = nil
			continue
		}
		qctx, qcancel := context.WithTimeout(ctx, 10*time.Second)
		committed, lag, err := groupLag(qctx, cl, c.cfg.GroupID, c.cfg.Topics)
		qcancel()
		if err != nil {
			c.log.Debug("inbox: watchdog: could not read the group's lag", "err", err)
			continue
		}
		if lag == 0 || !maps.Equal(committed, last) {
			last, since = committed, time.Now()
			continue
		}
		if time.Since(since) < c.cfg.StallTimeout/2 {
			continue
		}
		c.log.Warn("inbox: group has lag but nothing is consumed; recreating the Kafka reader",
			"lag", lag, "waiting_for", time.Since(waiting).Round(time.Millisecond))
		f.restart(errRestart)
		return
	}
}

// groupLag returns the committed offsets of group ("topic/partition" ->
// offset) and the number of records of topics beyond them.
func groupLag(ctx context.Context, cl *kafka.Client, group string, topics []string) (map[string]int64, int64, error) {
	md, err := cl.Metadata(ctx, &kafka.MetadataRequest{Topics: topics})
	if err != nil {
		return nil, 0, fmt.Errorf("metadata of %v: %w", topics, err)
	}
	parts := map[string][]int{}
	reqs := map[string][]kafka.OffsetRequest{}
	for _, t := range md.Topics {
		if t.Error != nil {
			return nil, 0, fmt.Errorf("metadata of %s: %w", t.Name, t.Error)
		}
		for _, p := range t.Partitions {
			parts[t.Name] = append(parts[t.Name], p.ID)
			reqs[t.Name] = append(reqs[t.Name], kafka.LastOffsetOf(p.ID))
		}
	}
	committed, err := cl.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: parts})
	if err == nil && committed.Error != nil {
		err = committed.Error
	}
	if err != nil {
		return nil, 0, fmt.Errorf("committed offsets of group %s: %w", group, err)
	}
	ends, err := cl.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: reqs})
	if err != nil {
		return nil, 0, fmt.Errorf("end offsets of %v: %w", topics, err)
	}
	end := map[string]int64{}
	for t, ps := range ends.Topics {
		for _, p := range ps {
			if p.Error != nil {
				return nil, 0, fmt.Errorf("end offset of %s/%d: %w", t, p.Partition, p.Error)
			}
			end[t+"/"+strconv.Itoa(p.Partition)] = p.LastOffset
		}
	}
	out := map[string]int64{}
	var lag int64
	for t, ps := range committed.Topics {
		for _, p := range ps {
			if p.Error != nil {
				return nil, 0, fmt.Errorf("committed offset of %s/%d: %w", t, p.Partition, p.Error)
			}
			k := t + "/" + strconv.Itoa(p.Partition)
			out[k] = p.CommittedOffset
			if e := end[k]; e > max(p.CommittedOffset, 0) {
				lag += e - max(p.CommittedOffset, 0)
			}
		}
	}
	return out, lag, nil
}

// runLanes runs one loop per lane until ctx ends or one of them fails; the
// first failure stops the others (each finishes its in-flight batch).
func (c *Consumer) runLanes(ctx context.Context, r *kafka.Reader, w *kafka.Writer, lanes []chan kafka.Message, f *fetcher) error {
	if len(lanes) == 1 {
		return c.loop(ctx, r, w, lanes[0], f)
	}
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(lanes))
	for _, l := range lanes {
		go func() {
			err := c.loop(lctx, r, w, l, f)
			if err != nil {
				cancel()
			}
			errs <- err
		}()
	}
	var first, stopped error
	for range lanes {
		switch err := <-errs; {
		case err == nil:
		case errors.Is(err, errStopped):
			stopped = err
		case first == nil:
			first = err
		}
	}
	return cmp.Or(first, stopped)
}

// lane picks the lane of a partition: every record of one partition goes to
// the same lane, so per-partition order holds.
func lane(m kafka.Message, n int) int {
	if n == 1 {
		return 0
	}
	h := uint32(2166136261)
	for i := 0; i < len(m.Topic); i++ {
		h = (h ^ uint32(m.Topic[i])) * 16777619
	}
	return int((h + uint32(m.Partition)) % uint32(n))
}

// fetcher is what the fetch goroutine shares with the lanes.
type fetcher struct {
	// done is closed when fetch returns.
	done chan struct{}
	// cancelled is set before done is closed when fetch stopped because its
	// context ended: a clean stop, even if a lane's own context does not
	// show the cancellation yet (contexts derived from one parent are
	// cancelled one after another, and the fetcher may win that race).
	cancelled atomic.Bool
	// restart cancels the session with a cause (errRestart).
	restart context.CancelCauseFunc
	// waiting is when the pending FetchMessage call started (unix nanos),
	// 0 while none is pending.
	waiting atomic.Int64
	// busy counts lanes with a batch in flight.
	busy atomic.Int32
	// commitFailures counts consecutive offset commit failures.
	commitFailures atomic.Int32
}

func (f *fetcher) waitingSince() time.Time {
	n := f.waiting.Load()
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// fetch pushes fetched messages into their lanes until ctx ends or the
// reader is closed.
func (c *Consumer) fetch(ctx context.Context, r *kafka.Reader, lanes []chan kafka.Message, f *fetcher) {
	defer func() {
		if ctx.Err() != nil {
			f.cancelled.Store(true)
		}
		close(f.done)
	}()
	failures := 0
	for {
		f.waiting.Store(time.Now().UnixNano())
		m, err := r.FetchMessage(ctx)
		f.waiting.Store(0)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, io.EOF) {
				// kafka-go says its reader is closed although nobody closed
				// it (seen after broker cuts): start over with a new one.
				c.log.Warn("inbox: the Kafka reader stopped; recreating it", "err", err)
				f.restart(errRestart)
				return
			}
			failures++
			if failures >= c.cfg.RestartAfterErrors {
				c.log.Warn("inbox: fetch keeps failing; recreating the Kafka reader", "err", err, "failures", failures)
				f.restart(errRestart)
				return
			}
			c.log.Warn("inbox: fetch failed; retrying", "err", err, "failures", failures)
			if !sleep(ctx, c.backoff(failures)) {
				return
			}
			continue
		}
		failures = 0
		select {
		case lanes[lane(m, len(lanes))] <- m:
		case <-ctx.Done():
			return
		}
	}
}

func (c *Consumer) loop(ctx context.Context, r *kafka.Reader, w *kafka.Writer, fetched <-chan kafka.Message, f *fetcher) error {
	for {
		if ctx.Err() != nil {
			return nil
		}
		var first kafka.Message
		select {
		case <-ctx.Done():
			return nil
		case <-f.done:
			if ctx.Err() != nil || f.cancelled.Load() {
				return nil
			}
			return fmt.Errorf("inbox: consumer %q: reader stopped unexpectedly", c.cfg.Name)
		case first = <-fetched:
		}
		batch := []kafka.Message{first}
	fill:
		for len(batch) < c.cfg.BatchSize {
			select {
			case m := <-fetched:
				batch = append(batch, m)
			default:
				break fill
			}
		}
		start := time.Now()
		for _, m := range batch {
			if !m.Time.IsZero() {
				c.mWait.Observe(max(start.Sub(m.Time), 0).Seconds())
			}
		}
		f.busy.Add(1)
		err := c.processWithRetry(ctx, w, batch)
		if err == nil {
			c.mBatchTime.Observe(time.Since(start).Seconds())
		}
		if err == nil && c.afterDBCommit != nil {
			err = c.afterDBCommit(batch)
		}
		if err != nil {
			f.busy.Add(-1)
			return err
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), CommitTimeoutDefault)
		err = r.CommitMessages(cctx, batch...)
		cancel()
		f.busy.Add(-1)
		if err == nil {
			f.commitFailures.Store(0)
		} else if n := f.commitFailures.Add(1); int(n) >= c.cfg.RestartAfterErrors {
			c.log.Warn("inbox: offset commits keep failing; recreating the Kafka reader (the batch will be redelivered and deduplicated)",
				"err", err, "failures", n)
			f.restart(errRestart)
			return nil
		} else {
			// The database already holds the batch; a redelivery is deduped.
			c.log.Warn("inbox: commit offsets failed; the batch will be redelivered and deduplicated",
				"err", err, "messages", len(batch), "first_topic", batch[0].Topic,
				"first_partition", batch[0].Partition, "first_offset", batch[0].Offset)
		}
	}
}

// processWithRetry runs the batch until it commits, retrying transient
// errors with backoff. It returns errStopped if ctx ends while waiting.
func (c *Consumer) processWithRetry(ctx context.Context, w *kafka.Writer, batch []kafka.Message) error {
	// The batch runs to its end even when ctx is cancelled meanwhile.
	work := context.WithoutCancel(ctx)
	for attempt := 1; ; attempt++ {
		res, err := c.process(work, w, batch)
		if err == nil {
			c.mMessages.Add(float64(res.handled))
			c.mDuplicates.Add(float64(res.duplicates))
			c.mDLQ.Add(float64(res.dead))
			c.mBatch.Observe(float64(len(batch)))
			return nil
		}
		c.mErrors.Inc()
		wait := c.backoff(attempt)
		c.log.Warn("inbox: batch failed; rolled back, will retry",
			"err", err, "attempt", attempt, "retry_in", wait, "messages", len(batch))
		if !sleep(ctx, wait) {
			return errStopped
		}
	}
}

// backoff returns the wait before retry attempt (1-based): exponential from
// BackoffInitial, capped at BackoffMax, with jitter in [d/2, d].
func (c *Consumer) backoff(attempt int) time.Duration {
	d := c.cfg.BackoffInitial
	for i := 1; i < attempt && d < c.cfg.BackoffMax; i++ {
		d *= 2
	}
	d = min(d, c.cfg.BackoffMax)
	if half := d / 2; half > 0 {
		d = half + rand.N(half+1)
	}
	return d
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

type batchResult struct {
	handled, duplicates, dead int
}

type dead struct {
	m      kafka.Message
	reason string
}

// item is one message of a batch with what the batch decided about it.
type item struct {
	m      kafka.Message
	id     uuid.UUID
	bad    string // non-empty: dead-letter without handling, for this reason
	repeat bool   // same id earlier in the batch
}

// process runs one batch in one transaction. Any error means the
// transaction was rolled back and the batch must be retried.
func (c *Consumer) process(ctx context.Context, w *kafka.Writer, batch []kafka.Message) (res batchResult, err error) {
	items := make([]item, len(batch))
	seen := make(map[uuid.UUID]bool, len(batch))
	ids := make([]uuid.UUID, 0, len(batch))
	topics := make([]string, 0, len(batch))
	for i, m := range batch {
		items[i].m = m
		id, reason := messageID(m)
		switch {
		case reason != "":
			items[i].bad = reason
		case seen[id]:
			items[i].id, items[i].repeat = id, true
		default:
			items[i].id = id
			seen[id] = true
			ids = append(ids, id)
			topics = append(topics, m.Topic)
		}
	}

	tx, err := c.pool.Begin(ctx)
	if err != nil {
		return res, fmt.Errorf("inbox: begin batch transaction (%d messages): %w", len(batch), err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()

	// The dedupe insert and, for a batch handler, the savepoint it runs
	// under go to Postgres in one round trip.
	fresh, err := dedupe(ctx, tx, c.table, ids, topics, c.cfg.BatchHandler != nil)
	if err != nil {
		return res, err
	}

	batched := false
	if c.cfg.BatchHandler != nil {
		var ms []kafka.Message
		for _, it := range items {
			if it.bad == "" && !it.repeat && fresh[it.id] {
				ms = append(ms, it.m)
			}
		}
		if len(ms) > 0 {
			if batched, err = c.handleBatch(ctx, tx, ms); err != nil {
				return res, err
			}
		}
	}

	var deads []dead
	for _, it := range items {
		switch {
		case it.bad != "":
			deads = append(deads, dead{m: it.m, reason: it.bad})
			continue
		case it.repeat || !fresh[it.id]:
			res.duplicates++
			continue
		case batched:
			res.handled++
			continue
		}
		herr := c.handle(ctx, tx, it.m)
		switch {
		case herr == nil:
			res.handled++
		case IsPermanent(herr):
			if _, err := tx.Exec(ctx, "DELETE FROM "+c.table+" WHERE message_id = $1", it.id); err != nil {
				return res, fmt.Errorf("inbox: forget dead-lettered message %s: %w", it.id, err)
			}
			c.log.Warn("inbox: message dead-lettered", "message_id", it.id, "topic", it.m.Topic,
				"partition", it.m.Partition, "offset", it.m.Offset, "reason", herr.Error())
			deads = append(deads, dead{m: it.m, reason: herr.Error()})
		default:
			return res, fmt.Errorf("inbox: handle message %s (topic %s partition %d offset %d): %w",
				it.id, it.m.Topic, it.m.Partition, it.m.Offset, herr)
		}
	}

	if len(deads) > 0 {
		recs := make([]kafka.Message, len(deads))
		for i, d := range deads {
			recs[i] = c.deadLetter(d)
		}
		wctx, cancel := context.WithTimeout(ctx, CommitTimeoutDefault)
		err = w.WriteMessages(wctx, recs...)
		cancel()
		if err != nil {
			return res, fmt.Errorf("inbox: publish %d dead-letter records (first from topic %s partition %d offset %d): %w",
				len(recs), deads[0].m.Topic, deads[0].m.Partition, deads[0].m.Offset, err)
		}
		res.dead = len(deads)
	}
	if err = tx.Commit(ctx); err != nil {
		return res, fmt.Errorf("inbox: commit batch transaction (%d messages): %w", len(batch), err)
	}
	return res, nil
}

// dedupe records ids in the inbox table in one statement and returns the
// ids that were not there yet.
// batchSavepoint is the savepoint a batch handler runs under; rolling back
// to it undoes the handler's writes and keeps the inbox rows.
const batchSavepoint = "sagaflow_inbox_batch"

// dedupe records ids in the inbox table and returns those that were new.
// With savepoint it also sets batchSavepoint after the insert, in the same
// round trip.
func dedupe(ctx context.Context, tx pgx.Tx, table string, ids []uuid.UUID, topics []string, savepoint bool) (map[uuid.UUID]bool, error) {
	fresh := make(map[uuid.UUID]bool, len(ids))
	b := &pgx.Batch{}
	if len(ids) > 0 {
		b.Queue("INSERT INTO "+table+" (message_id, topic) SELECT * FROM unnest($1::uuid[], $2::text[]) ON CONFLICT DO NOTHING RETURNING message_id",
			pgUUIDs(ids), topics).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var id pgtype.UUID
				if err := rows.Scan(&id); err != nil {
					return fmt.Errorf("scan: %w", err)
				}
				fresh[uuid.UUID(id.Bytes)] = true
			}
			return rows.Err()
		})
	}
	if savepoint {
		b.Queue("SAVEPOINT " + batchSavepoint)
	}
	if b.Len() == 0 {
		return fresh, nil
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("inbox: record %d message ids in %s: %w", len(ids), table, err)
	}
	return fresh, nil
}

// pgUUIDs converts ids for a uuid[] parameter without going through
// driver.Valuer and text.
func pgUUIDs(ids []uuid.UUID) []pgtype.UUID {
	out := make([]pgtype.UUID, len(ids))
	for i, id := range ids {
		out[i] = pgtype.UUID{Bytes: id, Valid: true}
	}
	return out
}

// handleBatch runs the batch handler inside a savepoint. false (with a nil
// error) means it failed and was rolled back: handle the messages one by
// one. An error means the transaction itself is broken.
func (c *Consumer) handleBatch(ctx context.Context, tx pgx.Tx, ms []kafka.Message) (bool, error) {
	// batchSavepoint was set by dedupe. On success it is left in place (the
	// commit releases it): one round trip fewer per batch.
	herr := func() (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("batch handler panicked: %v", p)
			}
		}()
		return c.cfg.BatchHandler(ctx, tx, ms)
	}()
	if herr == nil {
		return true, nil
	}
	if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT "+batchSavepoint); err != nil {
		return false, fmt.Errorf("inbox: roll back batch savepoint after %q: %w", herr.Error(), err)
	}
	c.log.Debug("inbox: batch handler declined the batch; handling its messages one by one", "err", herr, "messages", len(ms))
	return false, nil
}

// handle runs the handler for m inside a savepoint. A returned permanent
// error means the savepoint was rolled back; any other error leaves the
// transaction to be rolled back by the caller.
func (c *Consumer) handle(ctx context.Context, tx pgx.Tx, m kafka.Message) (err error) {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return fmt.Errorf("savepoint: %w", err)
	}
	herr := c.call(ctx, sp, m)
	if herr == nil {
		if err := sp.Commit(ctx); err != nil {
			return fmt.Errorf("release savepoint: %w", err)
		}
		return nil
	}
	if IsPermanent(herr) {
		if err := sp.Rollback(ctx); err != nil {
			return fmt.Errorf("roll back to savepoint after %q: %w", herr.Error(), err)
		}
	}
	return herr
}

// call runs the handler, turning a panic into a permanent error.
func (c *Consumer) call(ctx context.Context, tx pgx.Tx, m kafka.Message) (err error) {
	defer func() {
		if p := recover(); p != nil {
			c.log.Error("inbox: handler panicked", "topic", m.Topic, "partition", m.Partition,
				"offset", m.Offset, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			err = Permanent(fmt.Errorf("handler panicked: %v", p))
		}
	}()
	return c.handler(ctx, tx, m)
}

// messageID reads the message id header; reason is non-empty when it is
// missing or not a UUID.
func messageID(m kafka.Message) (uuid.UUID, string) {
	for _, h := range m.Headers {
		if h.Key != message.HeaderMessageID {
			continue
		}
		id, err := uuid.Parse(string(h.Value))
		if err != nil {
			return uuid.Nil, fmt.Sprintf("%v: header %q is %q, not a UUID", message.ErrInvalid, message.HeaderMessageID, truncate(string(h.Value), 80))
		}
		if id == uuid.Nil {
			return uuid.Nil, fmt.Sprintf("%v: header %q is the nil UUID", message.ErrInvalid, message.HeaderMessageID)
		}
		return id, ""
	}
	return uuid.Nil, fmt.Sprintf("%v: header %q is missing", message.ErrInvalid, message.HeaderMessageID)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// deadLetter builds the dead-letter record of d.
func (c *Consumer) deadLetter(d dead) kafka.Message {
	extra := map[string]string{
		message.HeaderDLQReason: d.reason,
		message.HeaderDLQTopic:  d.m.Topic,
		message.HeaderDLQOffset: strconv.FormatInt(d.m.Offset, 10),
		HeaderDLQPartition:      strconv.Itoa(d.m.Partition),
	}
	headers := make([]kafka.Header, 0, len(d.m.Headers)+len(extra))
	for _, h := range d.m.Headers {
		if _, replaced := extra[h.Key]; !replaced {
			headers = append(headers, h)
		}
	}
	for _, k := range []string{message.HeaderDLQReason, message.HeaderDLQTopic, message.HeaderDLQOffset, HeaderDLQPartition} {
		headers = append(headers, kafka.Header{Key: k, Value: []byte(extra[k])})
	}
	return kafka.Message{
		Topic:   d.m.Topic + c.cfg.DLQSuffix,
		Key:     d.m.Key,
		Value:   d.m.Value,
		Headers: headers,
	}
}
