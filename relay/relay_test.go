package relay_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	"go.uber.org/goleak"

	"github.com/sagaflow/sagaflow/internal/devbroker"
	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/migrations"
	"github.com/sagaflow/sagaflow/outbox"
	"github.com/sagaflow/sagaflow/relay"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const schema = "orch"

type fixture struct {
	pool    *pgxpool.Pool
	ob      *outbox.Outbox
	brokers []string
	topic   string
	reg     *prometheus.Registry
	metrics *relay.Metrics
}

const partitions = 4

func setup(t testing.TB) *fixture {
	t.Helper()
	pool := testkit.Pool(t)
	testkit.Migrate(t, pool, testkit.MustSets(t)(migrations.Orchestrator(schema)))
	ob, err := outbox.New(schema)
	if err != nil {
		t.Fatal(err)
	}
	brokers := testkit.Brokers(t)
	reg := prometheus.NewRegistry()
	m, err := relay.NewMetrics(reg, "sagaflow")
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{pool: pool, ob: ob, brokers: brokers, topic: testkit.Topic(t, brokers, "relay", partitions), reg: reg, metrics: m}
}

func (f *fixture) newRelay(t testing.TB, cfg relay.Config) *relay.Relay {
	t.Helper()
	cfg.Brokers = f.brokers
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 50 * time.Millisecond
	}
	if cfg.StatsInterval == 0 {
		cfg.StatsInterval = 50 * time.Millisecond
	}
	if cfg.RetryBackoff == 0 {
		cfg.RetryBackoff = 10 * time.Millisecond
	}
	cfg.Metrics = f.metrics
	r, err := relay.New(f.pool, f.ob, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// start runs r until the returned stop is called (or the test ends); stop
// cancels it and returns what Run returned, failing the test if Run does not
// return within 15s.
func start(t testing.TB, r *relay.Relay) (stop func() error, done <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan error, 1)
	finished := make(chan struct{})
	var result error
	go func() {
		result = r.Run(ctx)
		close(finished)
		ch <- result
	}()
	var once sync.Once
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case <-finished:
			case <-time.After(15 * time.Second):
				t.Errorf("Run did not return within 15s of cancel")
			}
		})
		return result
	}
	t.Cleanup(func() { _ = stop() })
	return stop, ch
}

func (f *fixture) enqueue(t testing.TB, msgs ...outbox.Message) {
	t.Helper()
	ctx := testkit.Context(t, 30*time.Second)
	tx, err := f.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if err := f.ob.Enqueue(ctx, tx, msgs...); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

func msg(topic, key, value string) outbox.Message {
	return outbox.Message{Topic: topic, Key: key, Value: []byte(value), Headers: map[string]string{
		message.HeaderMessageID: uuid.NewString(), message.HeaderContentType: message.ContentTypeJSON}}
}

// consumer reads every partition of a topic with one partition reader each.
type consumer struct {
	mu   sync.Mutex
	msgs []kafka.Message // in arrival order; per partition in offset order
}

func consume(t testing.TB, brokers []string, topic string) *consumer {
	t.Helper()
	c := &consumer{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for p := range partitions {
		rd := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: topic, Partition: p, MaxWait: 20 * time.Millisecond, MinBytes: 1, MaxBytes: 10 << 20})
		wg.Go(func() {
			defer rd.Close()
			for {
				m, err := rd.ReadMessage(ctx)
				if err != nil {
					return
				}
				c.mu.Lock()
				c.msgs = append(c.msgs, m)
				c.mu.Unlock()
			}
		})
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	return c
}

func (c *consumer) snapshot() []kafka.Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]kafka.Message(nil), c.msgs...)
}

func (c *consumer) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.msgs)
}

func header(m kafka.Message, name string) string {
	for _, h := range m.Headers {
		if h.Key == name {
			return string(h.Value)
		}
	}
	return ""
}

func (f *fixture) scalar(t testing.TB, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := f.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func metricValue(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outbox" && l.GetValue() == schema {
					switch {
					case m.Counter != nil:
						return m.Counter.GetValue()
					case m.Gauge != nil:
						return m.Gauge.GetValue()
					case m.Histogram != nil:
						return float64(m.Histogram.GetSampleCount())
					}
				}
			}
		}
	}
	return -1
}

func waitLeader(t testing.TB, r *relay.Relay) {
	t.Helper()
	testkit.Eventually(t, 30*time.Second, "relay to take the publishing lock", func() (bool, error) { return r.Leader(), nil })
}

// By default a published row is deleted: nothing of it stays in the outbox,
// and rows not yet due stay untouched.
func TestPublishedRowsDeletedByDefault(t *testing.T) {
	t.Parallel()
	f := setup(t)
	c := consume(t, f.brokers, f.topic)
	r := f.newRelay(t, relay.Config{})
	stop, _ := start(t, r)
	waitLeader(t, r)
	late := msg(f.topic, "later", `{"n":0}`)
	late.AvailableAt = time.Now().Add(time.Hour)
	f.enqueue(t, late)
	for i := range 5 {
		f.enqueue(t, msg(f.topic, fmt.Sprintf("k%d", i), fmt.Sprintf(`{"n":%d}`, i+1)))
	}
	testkit.Eventually(t, 30*time.Second, "5 messages on Kafka", func() (bool, error) { return c.count() >= 5, nil })
	testkit.Eventually(t, 30*time.Second, "published rows deleted", func() (bool, error) {
		return f.scalar(t, `SELECT count(*) FROM orch.outbox`) == 1, nil
	})
	if n := f.scalar(t, `SELECT count(*) FROM orch.outbox WHERE key = 'later' AND sent_at IS NULL AND attempts = 0`); n != 1 {
		t.Fatalf("the row due in an hour: %d rows left unsent, want 1", n)
	}
	if err := stop(); err != nil {
		t.Fatalf("Run returned %v after cancel, want nil", err)
	}
	if got := c.count(); got != 5 {
		t.Fatalf("consumed %d messages, want 5", got)
	}
}

// A committed enqueue reaches Kafka through NOTIFY, long before the poll
// fallback would have found it, with its key and headers; the row is marked
// sent once.
func TestPublishOnNotify(t *testing.T) {
	t.Parallel()
	f := setup(t)
	c := consume(t, f.brokers, f.topic)
	r := f.newRelay(t, relay.Config{Advanced: relay.Advanced{PollInterval: time.Minute}, KeepSent: true})
	stop, _ := start(t, r)
	waitLeader(t, r)

	m := msg(f.topic, "order-42", `{"hello":"world"}`)
	m.Headers[message.HeaderSagaID] = uuid.NewString()
	began := time.Now()
	f.enqueue(t, m)
	testkit.Eventually(t, 30*time.Second, "message on Kafka", func() (bool, error) { return c.count() > 0, nil })
	if el := time.Since(began); el >= time.Minute {
		t.Fatalf("delivery took %s: the poll fallback, not NOTIFY, woke the relay", el)
	}
	got := c.snapshot()
	if len(got) != 1 {
		t.Fatalf("consumed %d messages, want 1", len(got))
	}
	if string(got[0].Key) != "order-42" || string(got[0].Value) != `{"hello":"world"}` {
		t.Fatalf("consumed key %q value %q", got[0].Key, got[0].Value)
	}
	for _, h := range []string{message.HeaderMessageID, message.HeaderSagaID, message.HeaderContentType} {
		if header(got[0], h) != m.Headers[h] {
			t.Fatalf("header %s = %q, want %q", h, header(got[0], h), m.Headers[h])
		}
	}
	testkit.Eventually(t, 30*time.Second, "row marked sent", func() (bool, error) {
		return f.scalar(t, `SELECT count(*) FROM orch.outbox WHERE sent_at IS NOT NULL AND attempts = 1`) == 1, nil
	})
	if err := stop(); err != nil {
		t.Fatalf("Run returned %v after cancel, want nil", err)
	}
	if metricValue(t, f.reg, "sagaflow_relay_published_total") != 1 {
		t.Fatalf("published_total = %v, want 1", metricValue(t, f.reg, "sagaflow_relay_published_total"))
	}
}

// The listen lock rides on the claims: after a wake-up the relay keeps
// listening, during a burst it releases the lock (producers stop notifying)
// and takes it again when the burst is over. Every delivery of a lone row
// therefore comes from a NOTIFY, never from the minute-long poll fallback,
// and an idle relay holds the lock.
func TestListensAgainAfterEveryBurst(t *testing.T) {
	t.Parallel()
	f := setup(t)
	c := consume(t, f.brokers, f.topic)
	r := f.newRelay(t, relay.Config{Advanced: relay.Advanced{PollInterval: time.Minute}})
	stop, _ := start(t, r)
	waitLeader(t, r)

	// The listen lock: outbox's listenClass (0x5a6a0b0c) in the two-int advisory key
	// space (objsubid 2), in this test's own database.
	listening := func() bool {
		return f.scalar(t, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2
  AND classid = 1516899084 AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`) == 1
	}
	want := 0
	lone := func(round int) {
		t.Helper()
		testkit.Eventually(t, 30*time.Second, "idle relay holding the listen lock", func() (bool, error) { return listening(), nil })
		began := time.Now()
		f.enqueue(t, msg(f.topic, fmt.Sprintf("lone-%d", round), `{}`))
		want++
		testkit.Eventually(t, 30*time.Second, "lone row on Kafka", func() (bool, error) { return c.count() == want, nil })
		if el := time.Since(began); el >= 30*time.Second {
			t.Fatalf("round %d: lone row took %s: the poll fallback, not a NOTIFY, woke the relay", round, el)
		}
	}
	for round := range 3 {
		lone(round)
		lone(round + 100) // a second wake-up without a burst in between
		// A burst from 8 producers, 25 transactions each.
		var wg sync.WaitGroup
		for p := range 8 {
			wg.Go(func() {
				for i := range 25 {
					f.enqueue(t, msg(f.topic, fmt.Sprintf("burst-%d-%d", p, i%3), `{}`))
				}
			})
		}
		wg.Wait()
		want += 200
		testkit.Eventually(t, 60*time.Second, "burst on Kafka", func() (bool, error) { return c.count() == want, nil })
	}
	lone(1000)
	if err := stop(); err != nil {
		t.Fatalf("Run returned %v after cancel, want nil", err)
	}
	if n := f.scalar(t, `SELECT count(*) FROM orch.outbox`); n != 0 {
		t.Fatalf("%d rows left in the outbox after every row was published", n)
	}
}

// Two relays on one outbox: only one publishes at a time, per-key order
// holds, and when the leader is stopped mid-stream the standby takes over
// and nothing is lost.
func TestTwoRelaysKeepPerKeyOrderAcrossFailover(t *testing.T) {
	t.Parallel()
	f := setup(t)
	c := consume(t, f.brokers, f.topic)
	relays := []*relay.Relay{f.newRelay(t, relay.Config{BatchSize: 100}), f.newRelay(t, relay.Config{BatchSize: 100})}
	var stops []func() error
	for _, r := range relays {
		stop, _ := start(t, r)
		stops = append(stops, stop)
	}
	testkit.Eventually(t, 30*time.Second, "one leader", func() (bool, error) { return relays[0].Leader() != relays[1].Leader(), nil })

	const keys, perKey = 10, 200
	const total = keys * perKey
	var wg sync.WaitGroup
	errs := make(chan error, keys)
	for k := range keys {
		wg.Go(func() {
			ctx := context.Background()
			for s := range perKey {
				tx, err := f.pool.Begin(ctx)
				if err == nil {
					err = f.ob.Enqueue(ctx, tx, msg(f.topic, fmt.Sprintf("key-%d", k), fmt.Sprintf("key-%d:%d", k, s)))
					if err == nil {
						err = tx.Commit(ctx)
					} else {
						_ = tx.Rollback(ctx)
					}
				}
				if err != nil {
					errs <- fmt.Errorf("key %d seq %d: %w", k, s, err)
					return
				}
			}
		})
	}

	// Stop the leader mid-stream.
	testkit.Eventually(t, 60*time.Second, "a third of the messages on Kafka", func() (bool, error) { return c.count() >= total/3, nil })
	leader, standby := 0, 1
	if relays[1].Leader() {
		leader, standby = 1, 0
	}
	if err := stops[leader](); err != nil {
		t.Fatalf("leader's Run returned %v after cancel, want nil", err)
	}
	if relays[leader].Leader() {
		t.Fatal("stopped relay still reports Leader")
	}
	waitLeader(t, relays[standby])

	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("enqueue: %v", err)
	}
	testkit.Eventually(t, 60*time.Second, "every row published and deleted", func() (bool, error) {
		return f.scalar(t, `SELECT count(*) FROM orch.outbox`) == 0, nil
	})
	testkit.Eventually(t, 60*time.Second, "all messages on Kafka", func() (bool, error) { return c.count() >= total, nil })

	// Per key, in partition order: every new sequence number is the next
	// one; anything else must be an exact repeat of one already seen.
	next := map[string]int{}
	partOf := map[string]int{}
	dups := 0
	for _, m := range c.snapshot() {
		key := string(m.Key)
		if p, ok := partOf[key]; ok && p != m.Partition {
			t.Fatalf("key %s on partitions %d and %d", key, p, m.Partition)
		}
		partOf[key] = m.Partition
		k, s, ok := strings.Cut(string(m.Value), ":")
		if !ok || k != key {
			t.Fatalf("value %q under key %q", m.Value, key)
		}
		seq, err := strconv.Atoi(s)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case seq == next[key]:
			next[key]++
		case seq < next[key]:
			dups++
		default:
			t.Fatalf("key %s: got seq %d, want %d (out of order or missing)", key, seq, next[key])
		}
	}
	if len(next) != keys {
		t.Fatalf("saw %d keys, want %d", len(next), keys)
	}
	for key, n := range next {
		if n != perKey {
			t.Fatalf("key %s: %d messages, want %d", key, n, perKey)
		}
	}
	t.Logf("%d messages, %d duplicates", c.count(), dups)
}

// A relay that dies after publishing and before deleting (or marking) leaves
// the rows unsent; the next relay publishes them again (receivers dedupe by
// message-id) and deletes (marks) each exactly once.
func TestCrashBetweenPublishAndMarkRepublishes(t *testing.T) {
	t.Parallel()
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprintf("keep_sent=%v", keep), func(t *testing.T) {
			t.Parallel()
			crashBetweenPublishAndMark(t, keep)
		})
	}
}

func crashBetweenPublishAndMark(t *testing.T, keep bool) {
	f := setup(t)
	c := consume(t, f.brokers, f.topic)
	const n = 20
	var msgs []outbox.Message
	for i := range n {
		msgs = append(msgs, msg(f.topic, fmt.Sprintf("k%d", i%3), strconv.Itoa(i)))
	}
	f.enqueue(t, msgs...)

	crash := errors.New("simulated crash")
	first := f.newRelay(t, relay.Config{KeepSent: keep})
	relay.SetAfterPublish(first, func() error { return crash })
	_, done := start(t, first)
	select {
	case err := <-done:
		if !errors.Is(err, crash) {
			t.Fatalf("crashing relay's Run returned %v, want the crash", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("crashing relay did not stop")
	}
	if u := f.scalar(t, `SELECT count(*) FROM orch.outbox WHERE sent_at IS NULL AND attempts = 0`); u != n {
		t.Fatalf("%d untouched unsent rows after the crash, want %d", u, n)
	}
	testkit.Eventually(t, 30*time.Second, "first copies on Kafka", func() (bool, error) { return c.count() >= n, nil })

	second := f.newRelay(t, relay.Config{KeepSent: keep})
	start(t, second)
	if keep {
		testkit.Eventually(t, 30*time.Second, "rows marked sent", func() (bool, error) {
			return f.scalar(t, `SELECT count(*) FROM orch.outbox WHERE sent_at IS NOT NULL`) == n, nil
		})
		if bad := f.scalar(t, `SELECT count(*) FROM orch.outbox WHERE attempts <> 1`); bad != 0 {
			t.Fatalf("%d rows with attempts <> 1: a row was marked more than once", bad)
		}
	} else {
		testkit.Eventually(t, 30*time.Second, "rows deleted", func() (bool, error) {
			return f.scalar(t, `SELECT count(*) FROM orch.outbox`) == 0, nil
		})
	}
	testkit.Eventually(t, 30*time.Second, "second copies on Kafka", func() (bool, error) { return c.count() >= 2*n, nil })
	seen := map[string]int{}
	for _, m := range c.snapshot() {
		seen[header(m, message.HeaderMessageID)]++
	}
	if len(seen) != n {
		t.Fatalf("%d distinct message ids on Kafka, want %d", len(seen), n)
	}
	for _, m := range msgs {
		if got := seen[m.Headers[message.HeaderMessageID]]; got != 2 {
			t.Fatalf("message %s seen %d times, want 2", m.Headers[message.HeaderMessageID], got)
		}
	}
}

// Rows Kafka can never take do not hold back the rows around them; they
// are retried with backoff and parked dead after MaxAttempts.
func TestPoisonRowDoesNotBlock(t *testing.T) {
	t.Parallel()
	f := setup(t)
	c := consume(t, f.brokers, f.topic)
	poison := []outbox.Message{msg("bad topic", "k", "poison"), msg(strings.Repeat("x", 250), "k", "poison")}
	f.enqueue(t, msg(f.topic, "k", "0"), poison[0], msg(f.topic, "k", "1"), poison[1], msg(f.topic, "k", "2"))

	r := f.newRelay(t, relay.Config{MaxAttempts: 3, Advanced: relay.Advanced{RetryBackoff: time.Millisecond}, KeepSent: true})
	start(t, r)
	testkit.Eventually(t, 30*time.Second, "valid rows on Kafka", func() (bool, error) { return c.count() >= 3, nil })
	for i, m := range c.snapshot() {
		if string(m.Value) != strconv.Itoa(i) {
			t.Fatalf("message %d has value %q, want %d", i, m.Value, i)
		}
	}
	testkit.Eventually(t, 30*time.Second, "poison rows parked dead", func() (bool, error) {
		return f.scalar(t, `SELECT count(*) FROM orch.outbox WHERE dead_at IS NOT NULL AND attempts = 3 AND last_error LIKE '%topic%'`) == 2, nil
	})
	// A published batch is marked with the next claim: wait for it.
	testkit.Eventually(t, 30*time.Second, "the 3 valid rows marked sent", func() (bool, error) {
		return f.scalar(t, `SELECT count(*) FROM orch.outbox WHERE sent_at IS NOT NULL AND dead_at IS NULL`) == 3, nil
	})
	testkit.Eventually(t, 30*time.Second, "dead gauge", func() (bool, error) {
		return metricValue(t, f.reg, "sagaflow_outbox_dead") == 2, nil
	})
	if e := metricValue(t, f.reg, "sagaflow_relay_publish_errors_total"); e != 6 {
		t.Fatalf("publish_errors_total = %v, want 6 (2 rows x 3 attempts)", e)
	}
	if p := metricValue(t, f.reg, "sagaflow_relay_published_total"); p != 3 {
		t.Fatalf("published_total = %v, want 3", p)
	}
}

// When the server kills the lock connection the relay drops leadership,
// reconnects, takes the lock again and keeps publishing.
func TestReacquiresLockAfterConnectionLoss(t *testing.T) {
	t.Parallel()
	f := setup(t)
	c := consume(t, f.brokers, f.topic)
	r := f.newRelay(t, relay.Config{})
	start(t, r)
	waitLeader(t, r)
	holder := func() int64 {
		return f.scalar(t, `SELECT coalesce(max(pid), 0) FROM pg_locks WHERE locktype = 'advisory' AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`)
	}
	old := holder()
	if old == 0 {
		t.Fatal("leader holds no advisory lock")
	}
	if f.scalar(t, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND application_name = 'sagaflow-relay-orch'`, old) != 1 {
		t.Fatal("advisory lock is not held by the relay's own connection")
	}
	if _, err := f.pool.Exec(context.Background(), `SELECT pg_terminate_backend($1)`, old); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "lock retaken on a new connection", func() (bool, error) {
		h := holder()
		return h != 0 && h != old && r.Leader(), nil
	})
	f.enqueue(t, msg(f.topic, "k", "after"))
	testkit.Eventually(t, 30*time.Second, "message after reconnect", func() (bool, error) { return c.count() == 1, nil })
}

// Run returns nil promptly on cancel, as leader and as standby (goleak in
// TestMain checks nothing is left running).
func TestRunReturnsOnCancel(t *testing.T) {
	t.Parallel()
	f := setup(t)
	a, b := f.newRelay(t, relay.Config{}), f.newRelay(t, relay.Config{})
	stopA, _ := start(t, a)
	stopB, _ := start(t, b)
	testkit.Eventually(t, 30*time.Second, "one leader", func() (bool, error) { return a.Leader() != b.Leader(), nil })
	for _, stop := range []func() error{stopA, stopB} {
		began := time.Now()
		if err := stop(); err != nil {
			t.Fatalf("Run returned %v, want nil", err)
		}
		if el := time.Since(began); el > 5*time.Second {
			t.Fatalf("Run took %s to return after cancel", el)
		}
	}
	if a.Leader() || b.Leader() {
		t.Fatal("a stopped relay reports Leader")
	}
}

func TestNewValidatesConfig(t *testing.T) {
	t.Parallel()
	ob, err := outbox.New(schema)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(context.Background(), testkit.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for _, tc := range []struct {
		cfg   relay.Config
		field string
	}{
		{relay.Config{}, "Brokers"},
		{relay.Config{Brokers: []string{"x:1"}, BatchSize: -1}, "BatchSize"},
		{relay.Config{Brokers: []string{"x:1"}, MaxAttempts: -2}, "MaxAttempts"},
		{relay.Config{Brokers: []string{"x:1"}, Advanced: relay.Advanced{PollInterval: -time.Second}}, "PollInterval"},
		{relay.Config{Brokers: []string{"x:1"}, Advanced: relay.Advanced{BusyPoll: -time.Second}}, "BusyPoll"},
		{relay.Config{Brokers: []string{"x:1"}, Advanced: relay.Advanced{StatsInterval: -time.Second}}, "StatsInterval"},
		{relay.Config{Brokers: []string{"x:1"}, Advanced: relay.Advanced{RetryBackoff: -time.Second}}, "RetryBackoff"},
		{relay.Config{Brokers: []string{"x:1"}, WriteTimeout: -time.Second}, "WriteTimeout"},
		{relay.Config{Brokers: []string{"x:1", ""}}, "Brokers[1]"},
	} {
		if _, err := relay.New(pool, ob, &tc.cfg); err == nil || !strings.Contains(err.Error(), "Config."+tc.field) {
			t.Fatalf("New(%+v) = %v, want an error naming Config.%s", tc.cfg, err, tc.field)
		}
	}
	if _, err := relay.New(pool, ob, &relay.Config{Brokers: []string{"x:1"}}); err != nil {
		t.Fatalf("New with defaults: %v", err)
	}
	if _, err := relay.New(pool, ob, nil); err == nil || !strings.Contains(err.Error(), "Config.Brokers") {
		t.Fatalf("New with a nil config = %v, want an error naming Config.Brokers", err)
	}
	if _, err := relay.NewMetrics(prometheus.NewRegistry(), "sagaflow"); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	_, _ = relay.NewMetrics(reg, "dup")
	if _, err := relay.NewMetrics(reg, "dup"); err == nil {
		t.Fatal("registering the metrics twice on one registry did not fail")
	}
}

// A record the broker refuses (larger than its message.max.bytes) fails in
// kafka.WriteErrors together with the rows that shared its partition batch;
// those are retried one by one and get through, the big one is parked dead.
func TestOversizedRowRefusedByBrokerDoesNotBlock(t *testing.T) {
	t.Parallel()
	f := setup(t)
	c := consume(t, f.brokers, f.topic)
	big := msg(f.topic, "k", strings.Repeat("x", 2<<20))
	f.enqueue(t, msg(f.topic, "k", "0"), big, msg(f.topic, "k", "1"), msg(f.topic, "other", "2"))
	r := f.newRelay(t, relay.Config{MaxAttempts: 2, Advanced: relay.Advanced{RetryBackoff: time.Millisecond}, KeepSent: true})
	start(t, r)
	testkit.Eventually(t, 30*time.Second, "valid rows on Kafka", func() (bool, error) { return c.count() >= 3, nil })
	testkit.Eventually(t, 30*time.Second, "oversized row parked dead", func() (bool, error) {
		return f.scalar(t, `SELECT count(*) FROM orch.outbox WHERE dead_at IS NOT NULL AND attempts = 2 AND key = 'k' AND length(value) > 1000`) == 1, nil
	})
	// A published batch is marked with the next claim: wait for it.
	testkit.Eventually(t, 30*time.Second, "the 3 valid rows marked sent", func() (bool, error) {
		return f.scalar(t, `SELECT count(*) FROM orch.outbox WHERE sent_at IS NOT NULL`) == 3, nil
	})
	var order []string
	for _, m := range c.snapshot() {
		if string(m.Key) == "k" {
			order = append(order, string(m.Value))
		}
		if len(m.Value) > 1000 {
			t.Fatal("the oversized record reached the topic")
		}
	}
	if strings.Join(order, ",") != "0,1" {
		t.Fatalf("key k delivered %v, want [0 1]", order)
	}
}

// While Kafka is unreachable no row is marked failed (attempts untouched);
// the relay backs off, counts the errors, and publishes once Kafka is back.
func TestKafkaOutageBacksOffWithoutBurningAttempts(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()

	f.brokers = []string{addr}
	r := f.newRelay(t, relay.Config{WriteTimeout: 2 * time.Second, KeepSent: true})
	start(t, r)
	f.enqueue(t, msg("outage-topic", "k", "0"), msg("outage-topic", "k", "1"))
	testkit.Eventually(t, 30*time.Second, "publish errors counted", func() (bool, error) {
		return metricValue(t, f.reg, "sagaflow_relay_publish_errors_total") >= 4, nil
	})
	if n := f.scalar(t, `SELECT count(*) FROM orch.outbox WHERE attempts = 0 AND last_error IS NULL AND sent_at IS NULL`); n != 2 {
		t.Fatalf("%d rows untouched during the outage, want 2", n)
	}
	if !r.Leader() {
		t.Fatal("relay gave up leadership during a Kafka outage")
	}

	br, err := devbroker.Start(devbroker.Config{Addr: addr, Topics: []string{"outage-topic"}})
	if err != nil {
		t.Fatalf("restart broker on %s: %v", addr, err)
	}
	t.Cleanup(br.Close)
	testkit.Eventually(t, 30*time.Second, "rows sent after Kafka came back", func() (bool, error) {
		return f.scalar(t, `SELECT count(*) FROM orch.outbox WHERE sent_at IS NOT NULL AND attempts = 1`) == 2, nil
	})
	c := consume(t, f.brokers, "outage-topic")
	testkit.Eventually(t, 30*time.Second, "messages on Kafka", func() (bool, error) { return c.count() == 2, nil })
}

// WithDefaults fills every zero field and keeps what is set (a negative
// Linger stays: no linger).
func TestConfigWithDefaults(t *testing.T) {
	t.Parallel()
	d := relay.Config{}.WithDefaults()
	if d.BatchSize != relay.BatchSizeDefault || d.MaxAttempts != relay.MaxAttemptsDefault || d.WriteTimeout != relay.WriteTimeoutDefault ||
		d.PollInterval != relay.PollIntervalDefault || d.BusyPoll != relay.BusyPollDefault || d.Linger != relay.LingerDefault ||
		d.StatsInterval != relay.StatsIntervalDefault || d.RetryBackoff != relay.RetryBackoffDefault || d.Logger == nil {
		t.Errorf("zero fields not set to their defaults: %+v", d)
	}
	set := relay.Config{BatchSize: 3, Advanced: relay.Advanced{Linger: -1}}.WithDefaults()
	if set.BatchSize != 3 || set.Linger != -1 {
		t.Errorf("WithDefaults changed set fields: %+v", set)
	}
}
