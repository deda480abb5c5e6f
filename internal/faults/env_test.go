package faults_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/inbox"
	"github.com/sagaflow/sagaflow/internal/kafkaclient"
	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/internal/workload"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/participants/reference"
	"github.com/sagaflow/sagaflow/relay"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps"
)

// env is one test's pipeline: a database, a broker, unique topics, and
// factories for the component groups.
type env struct {
	t        *testing.T
	url      string
	brokers  []string
	prefix   string // topic prefix of the command topics
	replies  string // reply topic
	group    string // orchestrator consumer group
	reg      *prometheus.Registry
	im       *inbox.Metrics
	rm       *relay.Metrics
	sm       *orchestrator.Metrics
	registry *saga.Registry
	check    *pgxpool.Pool // the test's own pool for assertions
	schemas  workload.Schemas
	plan     workload.Plan
	// engine is the engine of the first orchestrator built; used to start
	// sagas and read status.
	engine *orchestrator.Engine
	// extraReplies are reply topics the participants accept besides the
	// orchestrator's (participants.Config.ReplyTopics).
	extraReplies []string
	// keepSent: every relay keeps published rows (relay.Config.KeepSent),
	// so tests can read what was sent (sentOn) and turn rows back into
	// unsent ones. The default, deleting relay runs in the e2e, chaos, demo
	// and metricscheck tests and in the relay's own.
	keepSent bool
	// ended: the sagas the orchestrators' engines reported finished
	// (orchestrator.EngineConfig.OnFinished), with their state.
	endedMu sync.Mutex
	ended   map[uuid.UUID]saga.State
	// trips: the participants include book-trip's (flights, hotels, cars).
	trips bool
}

type envOpts struct {
	orders   int
	seed     int64
	override func(*saga.Registry) error
	// trips runs book-trip's participants too (the trips themselves are
	// the test's: env.useTrips).
	trips bool
}

func newEnv(t *testing.T, o envOpts) *env {
	t.Helper()
	if o.seed == 0 {
		o.seed = 1
	}
	e := &env{t: t, url: testkit.Database(t), brokers: testkit.Brokers(t), keepSent: true, trips: o.trips}
	sfx := testkit.RandomSuffix(4)
	e.prefix = "f" + sfx + "."
	e.replies = "f" + sfx + ".saga.replies"
	e.group = "orch-" + sfx
	e.reg = prometheus.NewRegistry()
	var err error
	if e.im, err = inbox.NewMetrics(e.reg, "sagaflow"); err != nil {
		t.Fatal(err)
	}
	if e.rm, err = relay.NewMetrics(e.reg, "sagaflow"); err != nil {
		t.Fatal(err)
	}
	if e.sm, err = orchestrator.NewMetrics(e.reg, "sagaflow"); err != nil {
		t.Fatal(err)
	}
	e.registry = saga.NewRegistry()
	if err := steps.Register(e.registry); err != nil {
		t.Fatal(err)
	}
	if o.override != nil {
		if err := o.override(e.registry); err != nil {
			t.Fatal(err)
		}
	}
	e.check = testkit.PoolURL(t, e.url+"&pool_max_conns=2")
	ctx := testkit.Context(t, time.Minute)

	svc := e.serviceOn(e.check, orchestrator.DefaultRun)
	e.engine = svc.Engine()
	if err := svc.Prepare(ctx); err != nil {
		t.Fatalf("prepare orchestrator: %v", err)
	}
	parts := e.participantsOn(e.check)
	if err := parts.Prepare(ctx); err != nil {
		t.Fatalf("prepare participants: %v", err)
	}
	e.schemas = workload.SchemasOf(svc.Engine().Outbox().Schema(), parts)
	e.plan = workload.NewPlan(workload.Mix{Orders: o.orders, Seed: o.seed, OutOfStockRate: 0.1, CouponTakenRate: 0.1, DeclineRate: 0.1})
	if err := workload.Seed(ctx, e.check, e.schemas, e.plan); err != nil {
		t.Fatal(err)
	}
	return e
}

// service builds an orchestrator service on its own pool.
func (e *env) service(run orchestrator.RunSet) *orchestrator.Service {
	return e.serviceOn(e.pool(), run)
}

func (e *env) serviceOn(pool *pgxpool.Pool, run orchestrator.RunSet, edit ...func(*orchestrator.Config)) *orchestrator.Service {
	e.t.Helper()
	cfg := &orchestrator.Config{
		Brokers: e.brokers, GroupID: e.group, Partitions: 4, Run: run,
		Engine: orchestrator.EngineConfig{ReplyTopic: e.replies, TopicPrefix: e.prefix, Metrics: e.sm, TimerInterval: 20 * time.Millisecond, OnFinished: e.onFinished},
		Inbox:  inbox.Config{Metrics: e.im, Name: "orchestrator"},
		Relay:  relay.Config{Metrics: e.rm, KeepSent: e.keepSent},
	}
	for _, f := range edit {
		f(cfg)
	}
	svc, err := orchestrator.New(pool, e.registry, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	return svc
}

// participants builds the reference participants on their own pool.
func (e *env) participants() *reference.Set {
	e.t.Helper()
	return e.participantsOn(e.pool())
}

// pool opens a small pool for one component group: the server is shared
// by every test of the machine, so each group keeps few connections.
func (e *env) pool() *pgxpool.Pool {
	return testkit.PoolURL(e.t, e.url+"&pool_max_conns=3")
}

func (e *env) participantsOn(pool *pgxpool.Pool) *reference.Set {
	e.t.Helper()
	s, err := reference.New(pool, reference.Options{
		Trips:   e.trips,
		Brokers: e.brokers, TopicPrefix: e.prefix, Partitions: 4, Seed: 7, ReplyTopics: append([]string{e.replies}, e.extraReplies...),
		PaymentLimitCents: workload.LimitCentsDefault, InboxMetrics: e.im, RelayMetrics: e.rm, KeepSent: e.keepSent,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

// component is something running in the background until stopped.
type component struct {
	name   string
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// run starts fn(ctx) in the background; stop (or the test's end) cancels
// it and fails the test if it returned an error.
func (e *env) run(name string, fn func(context.Context) error) *component {
	ctx, cancel := context.WithCancel(context.Background())
	c := &component{name: name, cancel: cancel, done: make(chan error, 1)}
	go func() { c.done <- fn(ctx) }()
	e.t.Cleanup(func() { c.stop(e.t) })
	return c
}

// stop cancels the component and waits (bounded) for it to return; an
// error other than a clean stop fails the test.
func (c *component) stop(t *testing.T) {
	t.Helper()
	c.once.Do(func() {
		c.cancel()
		select {
		case c.err = <-c.done:
		case <-time.After(30 * time.Second):
			c.err = fmt.Errorf("%s did not stop within 30s", c.name)
		}
		switch {
		case c.err == nil || errors.Is(c.err, context.Canceled):
		default:
			t.Errorf("%s: %v", c.name, c.err)
		}
	})
}

// exited reports (without blocking) whether the component returned on its
// own.
func (c *component) exited() (error, bool) {
	select {
	case err := <-c.done:
		c.done <- err
		return err, true
	default:
		return nil, false
	}
}

// inboxOnly runs every reference participant's command consumer without
// its reply relay: commands execute and replies stay in the participants'
// outboxes, as when a participant crashes after its commit and before its
// relay publishes.
func (e *env) inboxOnly(set *reference.Set, pool *pgxpool.Pool) func(context.Context) error {
	return func(ctx context.Context) error {
		var wg sync.WaitGroup
		errs := make([]error, len(set.Participants()))
		for i, p := range set.Participants() {
			c, err := inbox.New(pool, p.HandleCommands, &inbox.Config{
				Brokers: e.brokers, GroupID: p.Name(), Topics: []string{e.prefix + p.Name() + ".commands"},
				Schema: p.Schema(), Name: p.Name(), Metrics: e.im,
			})
			if err != nil {
				return err
			}
			wg.Add(1)
			go func() { defer wg.Done(); errs[i] = c.Run(ctx) }()
		}
		wg.Wait()
		return errors.Join(errs...)
	}
}

// startAll starts one saga per planned order.
func (e *env) startAll(ctx context.Context) []uuid.UUID {
	e.t.Helper()
	ids, err := workload.StartAll(ctx, e.engine, e.plan, 4)
	if err != nil {
		e.t.Fatal(err)
	}
	return ids
}

// waitTerminal waits until every saga is terminal.
func (e *env) waitTerminal(timeout time.Duration) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	left, err := workload.WaitTerminal(ctx, e.check, e.schemas.Orchestrator, 20*time.Millisecond)
	if err != nil {
		e.logJournalOf(`state IN ('running', 'compensating')`)
		e.t.Fatalf("%d sagas still not terminal: %v", left, err)
	}
}

// checkInvariants runs workload.Check and the journal/outbox invariants.
func (e *env) checkInvariants(allowFailed bool) workload.Report {
	e.t.Helper()
	ctx := testkit.Context(e.t, 30*time.Second)
	rep, err := workload.CheckPlan(ctx, e.check, e.schemas, e.plan, allowFailed)
	if err != nil {
		e.t.Fatal(err)
	}
	if !rep.OK() {
		e.t.Fatalf("invariants violated: %v", rep.Violations)
	}
	if rep.Sagas != len(e.plan.Orders)+len(e.plan.Trips) {
		e.t.Fatalf("%d orders and %d trips but %d sagas", len(e.plan.Orders), len(e.plan.Trips), rep.Sagas)
	}
	// No transition applied twice: a reply message id moves a saga at most
	// once (ignored/late rows are not transitions).
	var dup int
	if err := e.check.QueryRow(ctx, `SELECT count(*) FROM (SELECT saga_id, message_id FROM `+e.schemas.Orchestrator+`.journal
		WHERE message_id IS NOT NULL AND NOT ignored GROUP BY 1, 2 HAVING count(*) > 1) d`).Scan(&dup); err != nil {
		e.t.Fatal(err)
	}
	if dup != 0 {
		e.t.Fatalf("%d (saga, message) pairs applied more than once in the journal", dup)
	}
	// Each (saga, step, action) executed at most once by a participant is the
	// barrier's primary key; every forward that succeeded on a compensated
	// saga must have its compensation recorded.
	for _, s := range e.compensable() {
		var n int
		if err := e.check.QueryRow(ctx, `SELECT count(*) FROM `+s+`.barrier f JOIN `+e.schemas.Orchestrator+`.sagas g ON g.id = f.saga_id
			WHERE f.action = 'forward' AND f.outcome = 'success' AND NOT f.closed AND g.state = 'compensated'
			AND NOT EXISTS (SELECT 1 FROM `+s+`.barrier c WHERE c.saga_id = f.saga_id AND c.step = f.step AND c.action = 'compensate')`).Scan(&n); err != nil {
			e.t.Fatal(err)
		}
		if n != 0 {
			e.t.Fatalf("%s: %d forward effects of compensated sagas were never compensated", s, n)
		}
	}
	// Nothing compensated after its pivot succeeded.
	var afterPivot int
	if err := e.check.QueryRow(ctx, `SELECT count(*) FROM `+e.schemas.Payment+`.barrier p JOIN `+e.schemas.Orchestrator+`.sagas g ON g.id = p.saga_id
		WHERE p.action = 'forward' AND p.outcome = 'success' AND g.state = 'compensated'`).Scan(&afterPivot); err != nil {
		e.t.Fatal(err)
	}
	if afterPivot != 0 {
		e.t.Fatalf("%d sagas compensated after their pivot succeeded", afterPivot)
	}
	e.waitOutboxesDrained()
	return rep
}

// waitOutboxesDrained waits until no outbox row of any schema is unsent.
func (e *env) waitOutboxesDrained() {
	e.t.Helper()
	testkit.Eventually(e.t, 30*time.Second, "outboxes drained", func() (bool, error) {
		n, err := e.unsent()
		return n == 0, err
	})
}

func (e *env) unsent() (int, error) {
	total := 0
	for _, s := range e.allSchemas() {
		var n int
		if err := e.check.QueryRow(context.Background(), `SELECT count(*) FROM `+s+`.outbox WHERE sent_at IS NULL`).Scan(&n); err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

func (e *env) allSchemas() []string {
	s := e.schemas
	all := []string{s.Orchestrator, s.Inventory, s.Coupon, s.Payment, s.Shipping, s.Points}
	if e.trips {
		all = append(all, s.Flights, s.Hotels, s.Cars)
	}
	return all
}

// compensable are the schemas of the participants whose steps come before
// a pivot (their effects are compensated when the saga turns back).
func (e *env) compensable() []string {
	s := e.schemas
	if e.trips {
		return []string{s.Inventory, s.Coupon, s.Flights, s.Hotels, s.Cars}
	}
	return []string{s.Inventory, s.Coupon}
}

// count runs a count query.
func (e *env) count(q string, args ...any) int {
	e.t.Helper()
	var n int
	if err := e.check.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		e.t.Fatalf("%s: %v", q, err)
	}
	return n
}

// metric sums every series of a counter or gauge family.
func (e *env) metric(name string) float64 {
	e.t.Helper()
	fams, err := e.reg.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	var sum float64
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			}
		}
	}
	return sum
}

// readAll reads every record of topic from the start, waiting until at
// least min records were read.
func (e *env) readAll(topic string, min int) []kafka.Message {
	e.t.Helper()
	ctx := testkit.Context(e.t, 30*time.Second)
	conn, err := kafka.DialContext(ctx, "tcp", e.brokers[0])
	if err != nil {
		e.t.Fatal(err)
	}
	parts, err := conn.ReadPartitions(topic)
	conn.Close()
	if err != nil {
		e.t.Fatal(err)
	}
	var out []kafka.Message
	for _, p := range parts {
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: e.brokers, Topic: topic, Partition: p.ID, MaxWait: 50 * time.Millisecond})
		last, err := lastOffset(ctx, e.brokers[0], topic, p.ID)
		if err != nil {
			r.Close()
			e.t.Fatal(err)
		}
		for off := int64(0); off < last; off++ {
			m, err := r.ReadMessage(ctx)
			if err != nil {
				r.Close()
				e.t.Fatalf("read %s[%d]: %v", topic, p.ID, err)
			}
			out = append(out, m)
			if m.Offset+1 >= last {
				break
			}
		}
		r.Close()
	}
	if len(out) < min {
		e.t.Fatalf("read %d records from %s, want at least %d", len(out), topic, min)
	}
	return out
}

func lastOffset(ctx context.Context, broker, topic string, partition int) (int64, error) {
	c, err := kafka.DialLeader(ctx, "tcp", broker, topic, partition)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	return c.ReadLastOffset()
}

// produce writes records to topic (acks from all replicas).
func (e *env) produce(topic string, ms ...kafka.Message) {
	e.t.Helper()
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	w := &kafka.Writer{Addr: kafka.TCP(e.brokers...), Topic: topic, Transport: tr, RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond, Balancer: kafkaclient.Balancer()}
	defer w.Close()
	out := make([]kafka.Message, len(ms))
	for i, m := range ms {
		out[i] = kafka.Message{Key: m.Key, Value: m.Value, Headers: m.Headers}
	}
	if err := w.WriteMessages(testkit.Context(e.t, 30*time.Second), out...); err != nil {
		e.t.Fatalf("produce to %s: %v", topic, err)
	}
}

// runAll starts the orchestrator and the participants with every component.
func (e *env) runAll() (*component, *component) {
	svc := e.service(orchestrator.DefaultRun)
	parts := e.participants()
	return e.run("orchestrator", svc.Run), e.run("participants", parts.Run)
}

// records is the number of records in every partition of topic.
func (e *env) records(topic string) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := kafka.DialContext(ctx, "tcp", e.brokers[0])
	if err != nil {
		return 0, err
	}
	parts, err := conn.ReadPartitions(topic)
	conn.Close()
	if err != nil {
		return 0, err
	}
	var n int64
	for _, p := range parts {
		last, err := lastOffset(ctx, e.brokers[0], topic, p.ID)
		if err != nil {
			return 0, err
		}
		n += last
	}
	return n, nil
}

func (e *env) onFinished(id uuid.UUID, st saga.State) {
	e.endedMu.Lock()
	defer e.endedMu.Unlock()
	if e.ended == nil {
		e.ended = map[uuid.UUID]saga.State{}
	}
	e.ended[id] = st
}

// endsReported waits until the engines reported the end of every terminal
// saga, with its state (the hook runs just after the commit that ended it).
func (e *env) endsReported() {
	e.t.Helper()
	testkit.Eventually(e.t, 10*time.Second, "every saga's end reported by OnFinished", func() (bool, error) {
		e.endedMu.Lock()
		defer e.endedMu.Unlock()
		for _, in := range e.instances() {
			if in.State.Terminal() && e.ended[in.ID] != in.State {
				return false, nil
			}
		}
		return true, nil
	})
}
