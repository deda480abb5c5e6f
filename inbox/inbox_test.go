package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/inbox"
	"github.com/sagaflow/sagaflow/internal/kafkaclient"
	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/migrations"
)

const wait = 30 * time.Second

// env is what each test needs: a migrated database with an effects table, a
// broker, a topic and a producer.
type env struct {
	pool    *pgxpool.Pool
	brokers []string
	topic   string
	group   string
	w       *kafka.Writer
}

func setup(t *testing.T, partitions int) *env {
	t.Helper()
	pool := testkit.Pool(t)
	testkit.Migrate(t, pool, testkit.MustSets(t)(migrations.Participant("p")))
	ctx := testkit.Context(t, wait)
	// No unique constraint: a message handled twice shows up as two rows.
	if _, err := pool.Exec(ctx, `CREATE TABLE effects (message_id uuid NOT NULL, body text NOT NULL)`); err != nil {
		t.Fatalf("create effects table: %v", err)
	}
	brokers := testkit.Brokers(t)
	topic := testkit.Topic(t, brokers, "inbox", partitions)
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, Balancer: kafkaclient.Balancer(), BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
	t.Cleanup(func() { _ = w.Close() })
	return &env{pool: pool, brokers: brokers, topic: topic, group: "g-" + testkit.RandomSuffix(4), w: w}
}

func record(id uuid.UUID, body string) kafka.Message {
	return kafka.Message{
		Key:     []byte(body),
		Value:   []byte(body),
		Headers: []kafka.Header{{Key: message.HeaderMessageID, Value: []byte(id.String())}},
	}
}

func (e *env) produce(t *testing.T, msgs ...kafka.Message) {
	t.Helper()
	if err := e.w.WriteMessages(testkit.Context(t, wait), msgs...); err != nil {
		t.Fatalf("produce %d messages to %s: %v", len(msgs), e.topic, err)
	}
}

// writeEffect is the usual handler: one effects row per message.
func writeEffect(ctx context.Context, tx pgx.Tx, m message.Record) error {
	id, err := uuid.Parse(rheader(m, message.HeaderMessageID))
	if err != nil {
		return inbox.Permanent(err)
	}
	_, err = tx.Exec(ctx, `INSERT INTO effects (message_id, body) VALUES ($1, $2)`, id, string(m.Value))
	return err
}

// rheader is the value of a handled record's header key.
func rheader(r message.Record, key string) string {
	v, _ := r.Header(key)
	return v
}

func header(m kafka.Message, key string) string {
	for _, h := range m.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func newMetrics(t *testing.T) *inbox.Metrics {
	t.Helper()
	m, err := inbox.NewMetrics(prometheus.NewRegistry(), "test")
	if err != nil {
		t.Fatalf("NewMetrics: %v", err)
	}
	return m
}

func (e *env) config(m *inbox.Metrics) *inbox.Config {
	return &inbox.Config{
		Brokers:  e.brokers,
		GroupID:  e.group,
		Topics:   []string{e.topic},
		Schema:   "p",
		Name:     "test",
		Metrics:  m,
		Advanced: inbox.Advanced{BackoffInitial: 5 * time.Millisecond, BackoffMax: 50 * time.Millisecond},
	}
}

// run starts c and returns a stop function that cancels it and checks that
// Run returned nil within a bounded wait.
func run(t *testing.T, c *inbox.Consumer) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run returned %v after cancel, want nil", err)
				}
			case <-time.After(wait):
				t.Errorf("Run did not return within %s of cancel", wait)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func count(t *testing.T, pool *pgxpool.Pool, q string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(testkit.Context(t, wait), q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// effectsOncePerID fails unless every id has exactly one effects row and no
// other rows exist.
func effectsOncePerID(t *testing.T, pool *pgxpool.Pool, ids []uuid.UUID) {
	t.Helper()
	if got := count(t, pool, `SELECT count(*) FROM effects`); got != len(ids) {
		t.Fatalf("effects has %d rows, want %d (one per message)", got, len(ids))
	}
	if got := count(t, pool, `SELECT count(DISTINCT message_id) FROM effects WHERE message_id = ANY($1)`, ids); got != len(ids) {
		t.Fatalf("effects has %d distinct expected ids, want %d", got, len(ids))
	}
}

func waitCounter(t *testing.T, c prometheus.Counter, want float64, what string) {
	t.Helper()
	testkit.Eventually(t, wait, what, func() (bool, error) {
		return testutil.ToFloat64(c) == want, nil
	})
}

// lag is the number of messages of topic not covered by group's committed
// offsets.
func lag(t *testing.T, brokers []string, group, topic string, partitions int) int64 {
	t.Helper()
	ctx := testkit.Context(t, wait)
	cl := &kafka.Client{Addr: kafka.TCP(brokers...)}
	parts := make([]int, partitions)
	reqs := make([]kafka.OffsetRequest, partitions)
	for i := range parts {
		parts[i] = i
		reqs[i] = kafka.LastOffsetOf(i)
	}
	committed, err := cl.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: parts}})
	if err != nil || committed.Error != nil {
		t.Fatalf("offset fetch for group %s: %v %v", group, err, committed)
	}
	ends, err := cl.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		t.Fatalf("list offsets of %s: %v", topic, err)
	}
	end := map[int]int64{}
	for _, p := range ends.Topics[topic] {
		if p.Error != nil {
			t.Fatalf("list offsets of %s partition %d: %v", topic, p.Partition, p.Error)
		}
		end[p.Partition] = p.LastOffset
	}
	var total int64
	for _, p := range committed.Topics[topic] {
		if p.Error != nil {
			t.Fatalf("offset fetch %s partition %d: %v", topic, p.Partition, p.Error)
		}
		c := max(p.CommittedOffset, 0)
		total += end[p.Partition] - c
	}
	return total
}

func TestHandledOnceAndDuplicatesSkipped(t *testing.T) {
	t.Parallel()
	e := setup(t, 3)
	m := newMetrics(t)
	c, err := inbox.New(e.pool, inbox.EachMessage(writeEffect), e.config(m))
	if err != nil {
		t.Fatal(err)
	}
	run(t, c)

	const n = 30
	ids := make([]uuid.UUID, n)
	var msgs []kafka.Message
	for i := range ids {
		ids[i] = uuid.New()
		msgs = append(msgs, record(ids[i], "m"+strconv.Itoa(i)))
	}
	e.produce(t, msgs...)
	waitCounter(t, m.Messages("test"), n, "all messages handled")
	effectsOncePerID(t, e.pool, ids)
	if got := count(t, e.pool, `SELECT count(*) FROM p.inbox WHERE topic = $1`, e.topic); got != n {
		t.Fatalf("inbox has %d rows for %s, want %d", got, e.topic, n)
	}

	// The same ids again (a relay re-publishing after a crash), plus the
	// same id twice inside what is likely one batch.
	dup := append(append([]kafka.Message(nil), msgs...), record(ids[0], "m0"))
	e.produce(t, dup...)
	waitCounter(t, m.Duplicates("test"), n+1, "duplicates counted")
	effectsOncePerID(t, e.pool, ids)
	if got := testutil.ToFloat64(m.Messages("test")); got != n {
		t.Fatalf("messages_total = %v after duplicates, want %d", got, n)
	}
	// A batch of copies began lazily (ids recorded at the commit), failed
	// its commit and ran again with the ids recorded first: that is not a
	// handler error.
	if got := testutil.ToFloat64(m.BatchReruns("test")); got < 1 {
		t.Fatalf("batch_reruns_total = %v after the copies, want at least 1", got)
	}
	if got := testutil.ToFloat64(m.HandleErrors("test")); got != 0 {
		t.Fatalf("handle_errors_total = %v, want 0 (copies are no errors)", got)
	}
	testkit.Eventually(t, wait, "offsets committed up to the end of every partition", func() (bool, error) {
		return lag(t, e.brokers, e.group, e.topic, 3) == 0, nil
	})
	if got := testutil.CollectAndCount(m.Messages("test")); got != 1 {
		t.Fatalf("messages_total collects %d series, want 1", got)
	}
}

func TestTransientErrorRetriesWithoutSkipping(t *testing.T) {
	t.Parallel()
	e := setup(t, 1)
	m := newMetrics(t)
	const failures = 3
	target := uuid.New()
	var mu sync.Mutex
	calls := 0
	h := func(ctx context.Context, tx pgx.Tx, msg message.Record) error {
		// The write happens before the failure: it must be rolled back.
		if err := writeEffect(ctx, tx, msg); err != nil {
			return err
		}
		if rheader(msg, message.HeaderMessageID) == target.String() {
			mu.Lock()
			defer mu.Unlock()
			calls++
			if calls <= failures {
				return fmt.Errorf("database is restarting (call %d)", calls)
			}
		}
		return nil
	}
	c, err := inbox.New(e.pool, inbox.EachMessage(h), e.config(m))
	if err != nil {
		t.Fatal(err)
	}
	run(t, c)

	ids := []uuid.UUID{uuid.New(), target, uuid.New(), uuid.New()}
	var msgs []kafka.Message
	for i, id := range ids {
		msgs = append(msgs, record(id, "t"+strconv.Itoa(i)))
	}
	e.produce(t, msgs...)
	waitCounter(t, m.Messages("test"), float64(len(ids)), "all messages handled after retries")
	effectsOncePerID(t, e.pool, ids)
	mu.Lock()
	got := calls
	mu.Unlock()
	if got != failures+1 {
		t.Fatalf("handler called %d times for the failing message, want %d", got, failures+1)
	}
	if got := testutil.ToFloat64(m.HandleErrors("test")); got != failures {
		t.Fatalf("handle_errors_total = %v, want %d", got, failures)
	}
	if got := testutil.ToFloat64(m.DeadLettered("test")); got != 0 {
		t.Fatalf("dlq_messages_total = %v, want 0 (transient errors are never dead-lettered)", got)
	}
}

func TestPoisonMessagesGoToDLQAndPartitionMovesOn(t *testing.T) {
	t.Parallel()
	e := setup(t, 1)
	dlqTopic := e.topic + inbox.DLQSuffixDefault
	if err := kafkaclient.EnsureTopics(testkit.Context(t, wait), e.brokers, 1, 1, dlqTopic); err != nil {
		t.Fatal(err)
	}
	m := newMetrics(t)
	h := func(ctx context.Context, tx pgx.Tx, msg message.Record) error {
		if err := writeEffect(ctx, tx, msg); err != nil {
			return err
		}
		switch string(msg.Value) {
		case "permanent":
			return inbox.Permanent(errors.New("amount is negative"))
		case "invalid":
			_, err := message.DecodeCommand([]byte(`{"message_id":1}`))
			return fmt.Errorf("decode: %w", err)
		case "panic":
			panic("handler bug")
		}
		return nil
	}
	c, err := inbox.New(e.pool, inbox.EachMessage(h), e.config(m))
	if err != nil {
		t.Fatal(err)
	}
	run(t, c)

	good := []uuid.UUID{uuid.New(), uuid.New(), uuid.New(), uuid.New()}
	permanentID, invalidID, panicID := uuid.New(), uuid.New(), uuid.New()
	noHeader := kafka.Message{Key: []byte("k"), Value: []byte("no-header")}
	badHeader := kafka.Message{Key: []byte("k"), Value: []byte("bad-header"),
		Headers: []kafka.Header{{Key: message.HeaderMessageID, Value: []byte("not-a-uuid")}}}
	// One partition: every poison message sits before a good one.
	e.produce(t,
		record(good[0], "ok0"),
		noHeader,
		record(permanentID, "permanent"),
		record(good[1], "ok1"),
		record(panicID, "panic"),
		badHeader,
		record(invalidID, "invalid"),
		record(good[2], "ok2"),
	)
	waitCounter(t, m.DeadLettered("test"), 5, "five messages dead-lettered")
	waitCounter(t, m.Messages("test"), 3, "good messages handled")
	// The handler's writes for the poison messages were rolled back.
	effectsOncePerID(t, e.pool, good[:3])
	if got := count(t, e.pool, `SELECT count(*) FROM p.inbox WHERE message_id = ANY($1)`, []uuid.UUID{permanentID, invalidID, panicID}); got != 0 {
		t.Fatalf("inbox keeps %d rows of dead-lettered messages, want 0", got)
	}

	// Still running after a panic: a later message is handled.
	e.produce(t, record(good[3], "ok3"))
	waitCounter(t, m.Messages("test"), 4, "message after the poison ones handled")
	effectsOncePerID(t, e.pool, good)

	r := kafka.NewReader(kafka.ReaderConfig{Brokers: e.brokers, Topic: dlqTopic, Partition: 0, MaxWait: 50 * time.Millisecond})
	defer r.Close()
	ctx := testkit.Context(t, wait)
	want := []struct{ value, key, reason string }{
		{"no-header", "k", "is missing"},
		{"permanent", "permanent", "amount is negative"},
		{"panic", "panic", "handler bug"},
		{"bad-header", "k", "not a UUID"},
		{"invalid", "invalid", `"message_id"`},
	}
	for i, w := range want {
		d, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("read dead-letter record %d: %v", i, err)
		}
		if string(d.Value) != w.value {
			t.Fatalf("dead-letter record %d has value %q, want %q (original order)", i, d.Value, w.value)
		}
		if reason := header(d, message.HeaderDLQReason); !strings.Contains(reason, w.reason) {
			t.Fatalf("dead-letter record %q has reason %q, want it to contain %q", w.value, reason, w.reason)
		}
		if got := header(d, message.HeaderDLQTopic); got != e.topic {
			t.Fatalf("dead-letter record %q: original topic header %q, want %q", w.value, got, e.topic)
		}
		if _, err := strconv.ParseInt(header(d, message.HeaderDLQOffset), 10, 64); err != nil {
			t.Fatalf("dead-letter record %q: offset header: %v", w.value, err)
		}
		if got := header(d, inbox.HeaderDLQPartition); got != "0" {
			t.Fatalf("dead-letter record %q: partition header %q, want 0", w.value, got)
		}
		if string(d.Key) != w.key {
			t.Fatalf("dead-letter record %q has key %q, want the original key", w.value, d.Key)
		}
	}
	if got := testutil.ToFloat64(m.HandleErrors("test")); got != 0 {
		t.Fatalf("handle_errors_total = %v, want 0 (poison is not transient)", got)
	}
}

func TestCrashBetweenDBCommitAndOffsetCommit(t *testing.T) {
	t.Parallel()
	e := setup(t, 2)
	const n = 20
	ids := make([]uuid.UUID, n)
	var msgs []kafka.Message
	for i := range ids {
		ids[i] = uuid.New()
		msgs = append(msgs, record(ids[i], "c"+strconv.Itoa(i)))
	}
	e.produce(t, msgs...)

	errCrash := errors.New("simulated crash after database commit")
	m1 := newMetrics(t)
	first, err := inbox.New(e.pool, inbox.EachMessage(writeEffect), oneLane(e.config(m1)))
	if err != nil {
		t.Fatal(err)
	}
	crashed := 0
	inbox.SetAfterDBCommit(first, func(batch []kafka.Message) error {
		crashed = len(batch)
		return errCrash
	})
	ctx := testkit.Context(t, wait)
	if err := first.Run(ctx); !errors.Is(err, errCrash) {
		t.Fatalf("Run = %v, want the simulated crash", err)
	}
	if crashed == 0 {
		t.Fatal("the crash hook saw an empty batch")
	}
	if got := count(t, e.pool, `SELECT count(*) FROM effects`); got != crashed {
		t.Fatalf("after the crash effects has %d rows, want the %d of the committed batch", got, crashed)
	}
	if got := lag(t, e.brokers, e.group, e.topic, 2); got != n {
		t.Fatalf("after the crash lag is %d, want %d (no offset committed)", got, n)
	}

	// Restart in the same group: everything is redelivered; the crashed
	// batch is deduplicated, the rest handled, each exactly once.
	m2 := newMetrics(t)
	second, err := inbox.New(e.pool, inbox.EachMessage(writeEffect), e.config(m2))
	if err != nil {
		t.Fatal(err)
	}
	run(t, second)
	waitCounter(t, m2.Messages("test"), float64(n-crashed), "remaining messages handled")
	waitCounter(t, m2.Duplicates("test"), float64(crashed), "redelivered batch deduplicated")
	effectsOncePerID(t, e.pool, ids)
	testkit.Eventually(t, wait, "offsets committed after restart", func() (bool, error) {
		return lag(t, e.brokers, e.group, e.topic, 2) == 0, nil
	})
}

func TestNewValidatesConfig(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	base := func() *inbox.Config {
		return &inbox.Config{Brokers: []string{"127.0.0.1:9092"}, GroupID: "g", Topics: []string{"t"}, Schema: "p"}
	}
	cases := []struct {
		field string
		mut   func(*inbox.Config)
	}{
		{"Brokers", func(c *inbox.Config) { c.Brokers = nil }},
		{"GroupID", func(c *inbox.Config) { c.GroupID = "" }},
		{"Topics", func(c *inbox.Config) { c.Topics = nil }},
		{"Topics[1]", func(c *inbox.Config) { c.Topics = []string{"a", ""} }},
		{"Schema", func(c *inbox.Config) { c.Schema = "" }},
		{"BatchSize", func(c *inbox.Config) { c.BatchSize = -1 }},
		{"BackoffMax", func(c *inbox.Config) { c.BackoffInitial, c.BackoffMax = time.Second, time.Millisecond }},
		{"SessionTimeout", func(c *inbox.Config) { c.SessionTimeout = 10 * time.Millisecond }},
		{"HeartbeatInterval", func(c *inbox.Config) { c.HeartbeatInterval = -time.Second }},
		{"HeartbeatInterval", func(c *inbox.Config) { c.SessionTimeout, c.HeartbeatInterval = 2*time.Second, 2*time.Second }},
		{"RebalanceTimeout", func(c *inbox.Config) { c.RebalanceTimeout = time.Millisecond }},
		{"StallTimeout", func(c *inbox.Config) { c.StallTimeout = -time.Second }},
		{"RestartAfterErrors", func(c *inbox.Config) { c.RestartAfterErrors = -1 }},
		{"CommitInterval", func(c *inbox.Config) { c.CommitInterval = -time.Second }},
		{"CommitInterval", func(c *inbox.Config) { c.CommitInterval = time.Hour }},
	}
	for _, tc := range cases {
		cfg := base()
		tc.mut(cfg)
		_, err := inbox.New(pool, inbox.EachMessage(writeEffect), cfg)
		if err == nil || !strings.Contains(err.Error(), "Config."+tc.field) {
			t.Errorf("New with bad %s: err = %v, want one naming Config.%s", tc.field, err, tc.field)
		}
	}
	if _, err := inbox.New(pool, nil, base()); err == nil || !strings.Contains(err.Error(), "handler") {
		t.Errorf("New with nil handler: err = %v", err)
	}
	if _, err := inbox.New(pool, inbox.EachMessage(writeEffect), base()); err != nil {
		t.Errorf("New with a good config: %v", err)
	}
}

func TestPermanentClassification(t *testing.T) {
	t.Parallel()
	base := errors.New("boom")
	if inbox.Permanent(nil) != nil {
		t.Fatal("Permanent(nil) != nil")
	}
	p := fmt.Errorf("step reserve: %w", inbox.Permanent(base))
	if !inbox.IsPermanent(p) || !errors.Is(p, base) {
		t.Fatalf("wrapped Permanent: IsPermanent=%v errors.Is=%v", inbox.IsPermanent(p), errors.Is(p, base))
	}
	if p.Error() != "step reserve: boom" {
		t.Fatalf("Permanent changes the error text: %q", p.Error())
	}
	_, derr := message.DecodeReply([]byte(`not json`))
	if !inbox.IsPermanent(fmt.Errorf("x: %w", derr)) {
		t.Fatal("an error wrapping message.ErrInvalid is not permanent")
	}
	if inbox.IsPermanent(base) || inbox.IsPermanent(context.DeadlineExceeded) {
		t.Fatal("a plain error is permanent")
	}
}

func TestNewMetricsRejectsDoubleRegistration(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	if _, err := inbox.NewMetrics(reg, "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := inbox.NewMetrics(reg, "x"); err == nil {
		t.Fatal("registering the same metrics twice succeeded")
	}
	n, err := testutil.GatherAndCount(reg)
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 { // vectors without children gather nothing
		t.Fatalf("gathered %d series before any use, want 0", n)
	}
}

func TestCancelFinishesInFlightBatch(t *testing.T) {
	t.Parallel()
	e := setup(t, 1)
	m := newMetrics(t)
	entered := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	h := func(ctx context.Context, tx pgx.Tx, msg message.Record) error {
		once.Do(func() {
			close(entered)
			<-release
		})
		return writeEffect(ctx, tx, msg)
	}
	c, err := inbox.New(e.pool, inbox.EachMessage(h), oneLane(e.config(m)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()

	id := uuid.New()
	e.produce(t, record(id, "slow"))
	select {
	case <-entered:
	case <-time.After(wait):
		t.Fatal("handler was not called")
	}
	cancel()
	select {
	case err := <-done:
		t.Fatalf("Run returned (%v) while a batch was in flight", err)
	default:
	}
	close(release)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v after cancel, want nil", err)
		}
	case <-time.After(wait):
		t.Fatal("Run did not return after the in-flight batch finished")
	}
	effectsOncePerID(t, e.pool, []uuid.UUID{id})
	if got := lag(t, e.brokers, e.group, e.topic, 1); got != 0 {
		t.Fatalf("lag = %d after shutdown, want 0 (the in-flight batch's offset committed)", got)
	}
	if err := c.Run(testkit.Context(t, time.Millisecond)); err != nil {
		t.Fatalf("Run again with an expiring context = %v, want nil", err)
	}
}

// oneLane makes c process its batches one after another, for tests that
// follow a single batch through a hook.
func oneLane(c *inbox.Config) *inbox.Config {
	c.Lanes = 1
	return c
}

func TestLanesKeepPerKeyOrderAndHandleOnce(t *testing.T) {
	t.Parallel()
	e := setup(t, 4)
	ctx := testkit.Context(t, wait)
	if _, err := e.pool.Exec(ctx, `CREATE TABLE ordered (n bigserial PRIMARY KEY, key text NOT NULL, seq int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	const keys, perKey = 12, 25
	var msgs []kafka.Message
	var ids []uuid.UUID
	for s := range perKey {
		for k := range keys {
			id := uuid.New()
			ids = append(ids, id)
			m := record(id, fmt.Sprintf("%d", s))
			m.Key = []byte(fmt.Sprintf("key-%02d", k))
			msgs = append(msgs, m)
		}
	}
	e.produce(t, msgs...)
	h := func(ctx context.Context, tx pgx.Tx, m message.Record) error {
		if err := writeEffect(ctx, tx, m); err != nil {
			return err
		}
		seq, err := strconv.Atoi(string(m.Value))
		if err != nil {
			return inbox.Permanent(err)
		}
		_, err = tx.Exec(ctx, `INSERT INTO ordered (key, seq) VALUES ($1, $2)`, string(m.Key), seq)
		return err
	}
	m := newMetrics(t)
	cfg := e.config(m)
	cfg.Lanes, cfg.BatchSize = 4, 7
	c, err := inbox.New(e.pool, inbox.EachMessage(h), cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, c)
	testkit.Eventually(t, wait, "every message handled", func() (bool, error) {
		return count(t, e.pool, `SELECT count(*) FROM effects`) >= len(ids), nil
	})
	stop()
	effectsOncePerID(t, e.pool, ids)
	// Per key, the rows were committed in the order of the sequence numbers.
	bad := count(t, e.pool, `SELECT count(*) FROM (
  SELECT seq < lag(seq) OVER (PARTITION BY key ORDER BY n) AS back FROM ordered) x WHERE back`)
	if bad != 0 {
		t.Fatalf("%d rows were handled before an earlier record of the same key", bad)
	}
	if got := lag(t, e.brokers, e.group, e.topic, 4); got != 0 {
		t.Fatalf("lag after the run is %d, want 0 (offsets committed by every lane)", got)
	}
}

func TestNewRejectsNegativeLanes(t *testing.T) {
	t.Parallel()
	_, err := inbox.New(&pgxpool.Pool{}, inbox.EachMessage(writeEffect), &inbox.Config{Brokers: []string{"b:9092"}, GroupID: "g", Topics: []string{"t"}, Schema: "p", Lanes: -1})
	if err == nil || !strings.Contains(err.Error(), "Config.Lanes") {
		t.Fatalf("New with Lanes -1 = %v, want an error naming Config.Lanes", err)
	}
}

// A batch handler handles a clean batch in one call; a batch with a poison
// message fails as a whole, and the inbox splits it until the poison message
// stands alone: it alone is dead-lettered and every good one is applied
// exactly once (the failed calls' writes rolled back).
func TestBatchHandlerFailureIsolatesThePoisonMessage(t *testing.T) {
	t.Parallel()
	e := setup(t, 1)
	dlqTopic := e.topic + inbox.DLQSuffixDefault
	if err := kafkaclient.EnsureTopics(testkit.Context(t, wait), e.brokers, 1, 1, dlqTopic); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var sizes []int
	h := func(ctx context.Context, tx pgx.Tx, ms []message.Record) ([]inbox.Result, error) {
		mu.Lock()
		sizes = append(sizes, len(ms))
		mu.Unlock()
		for _, msg := range ms {
			if err := writeEffect(ctx, tx, msg); err != nil {
				return nil, err
			}
		}
		for _, msg := range ms {
			if string(msg.Value) == "poison" {
				return nil, inbox.Permanent(errors.New("a poison message"))
			}
		}
		return make([]inbox.Result, len(ms)), nil
	}
	m := newMetrics(t)
	c, err := inbox.New(e.pool, h, e.config(m))
	if err != nil {
		t.Fatal(err)
	}
	run(t, c)
	clean := []uuid.UUID{uuid.New(), uuid.New()}
	e.produce(t, record(clean[0], "c0"), record(clean[1], "c1"))
	waitCounter(t, m.Messages("test"), 2, "clean messages handled")
	effectsOncePerID(t, e.pool, clean)

	good := make([]uuid.UUID, 9)
	var msgs []kafka.Message
	for i := range good {
		good[i] = uuid.New()
		msgs = append(msgs, record(good[i], "g"+strconv.Itoa(i)))
		if i == 6 {
			msgs = append(msgs, record(uuid.New(), "poison"))
		}
	}
	e.produce(t, msgs...)
	waitCounter(t, m.DeadLettered("test"), 1, "poison dead-lettered")
	waitCounter(t, m.Messages("test"), float64(2+len(good)), "good messages handled")
	effectsOncePerID(t, e.pool, append(clean, good...))
	if got := testutil.ToFloat64(m.HandleErrors("test")); got != 0 {
		t.Fatalf("handle_errors_total = %v, want 0 (a permanent error is isolated in the same transaction)", got)
	}
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: e.brokers, Topic: dlqTopic, Partition: 0, MaxWait: 50 * time.Millisecond})
	defer r.Close()
	d, err := r.ReadMessage(testkit.Context(t, wait))
	if err != nil {
		t.Fatalf("read the dead letter: %v", err)
	}
	if string(d.Value) != "poison" || !strings.Contains(header(d, message.HeaderDLQReason), "a poison message") {
		t.Fatalf("dead letter %q with reason %q, want the poison message with its reason", d.Value, header(d, message.HeaderDLQReason))
	}
}

func TestRecordWaitAndBatchTimeAreObserved(t *testing.T) {
	t.Parallel()
	e := setup(t, 1)
	reg := prometheus.NewRegistry()
	m, err := inbox.NewMetrics(reg, "test")
	if err != nil {
		t.Fatal(err)
	}
	c, err := inbox.New(e.pool, inbox.EachMessage(writeEffect), e.config(m))
	if err != nil {
		t.Fatal(err)
	}
	run(t, c)

	// Records written "two seconds ago" (their timestamp) wait at least
	// that long before their batch starts.
	const n = 12
	written := time.Now().Add(-2 * time.Second)
	var msgs []kafka.Message
	for i := range n {
		r := record(uuid.New(), "w"+strconv.Itoa(i))
		r.Time = written
		msgs = append(msgs, r)
	}
	e.produce(t, msgs...)
	waitCounter(t, m.Messages("test"), n, "all messages handled")

	hist := func(name string) (count uint64, sum float64) {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name {
				h := mf.GetMetric()[0].GetHistogram()
				return h.GetSampleCount(), h.GetSampleSum()
			}
		}
		t.Fatalf("%s not gathered", name)
		return 0, 0
	}
	waits, waitSum := hist("test_inbox_record_wait_seconds")
	if waits != n || waitSum < 2*n || waitSum > 60*n {
		t.Fatalf("record wait: %d observations summing %.1f s, want %d of at least 2 s each", waits, waitSum, n)
	}
	batches, batchSum := hist("test_inbox_batch_seconds")
	sizes, sizeSum := hist("test_inbox_batch_size")
	if batches == 0 || batches != sizes || sizeSum != n || batchSum <= 0 {
		t.Fatalf("batch time: %d observations (%.3f s); batch size: %d observations of %v messages; want one time per committed batch of the %d", batches, batchSum, sizes, sizeSum, n)
	}
}

// Offsets are committed at most every CommitInterval, one commit covering
// every batch handled since the one before, and the lanes never wait for
// them: many more batches than commits, and in the end the group has no lag.
func TestOffsetCommitsCoalesceAcrossBatches(t *testing.T) {
	t.Parallel()
	e := setup(t, 1)
	m := newMetrics(t)
	var batches atomic.Int64
	each := inbox.EachMessage(writeEffect)
	h := func(ctx context.Context, tx pgx.Tx, ms []message.Record) ([]inbox.Result, error) {
		batches.Add(1)
		return each(ctx, tx, ms)
	}
	cfg := oneLane(e.config(m))
	cfg.CommitInterval = 400 * time.Millisecond
	c, err := inbox.New(e.pool, h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	run(t, c)
	const n = 40
	ids := make([]uuid.UUID, n)
	start := time.Now()
	for i := range ids {
		ids[i] = uuid.New()
		e.produce(t, record(ids[i], "c"+strconv.Itoa(i)))
		waitCounter(t, m.Messages("test"), float64(i+1), "message handled")
	}
	elapsed := time.Since(start)
	effectsOncePerID(t, e.pool, ids)
	testkit.Eventually(t, wait, "offsets committed up to the end", func() (bool, error) {
		return lag(t, e.brokers, e.group, e.topic, 1) == 0, nil
	})
	commits := testutil.ToFloat64(m.OffsetCommits("test"))
	// One commit per interval the messages took, the first at once, and
	// the last after the last batch.
	most := float64(elapsed/cfg.CommitInterval) + 2
	if b := batches.Load(); b < n {
		t.Fatalf("%d batches for %d messages handed over one at a time", b, n)
	}
	if commits < 1 || commits > most {
		t.Fatalf("%v offset commits for %d batches in %s, want 1 to %v (at most one per %s)", commits, batches.Load(), elapsed, most, cfg.CommitInterval)
	}
	if got := testutil.ToFloat64(m.OffsetCommitErrors("test")); got != 0 {
		t.Fatalf("%v offset commit errors", got)
	}
}
