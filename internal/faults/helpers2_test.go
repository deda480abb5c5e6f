package faults_test

import (
	"context"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sagaflow/sagaflow/inbox"
	"github.com/sagaflow/sagaflow/internal/devbroker"
	"github.com/sagaflow/sagaflow/internal/faultproxy"
	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/internal/workload"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/participants"
	"github.com/sagaflow/sagaflow/participants/reference"
	"github.com/sagaflow/sagaflow/relay"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

// logCounter is a slog.Handler that counts warnings and errors, so a test
// can see that components retry (and do not spin) during an outage.
type logCounter struct {
	mu    sync.Mutex
	n     int
	byMsg map[string]int
}

func newLogCounter() *logCounter { return &logCounter{byMsg: map[string]int{}} }

func (l *logCounter) Enabled(_ context.Context, lvl slog.Level) bool { return lvl >= slog.LevelWarn }

func (l *logCounter) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n++
	l.byMsg[r.Message]++
	return nil
}

func (l *logCounter) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logCounter) WithGroup(string) slog.Handler      { return l }

// count is the number of warnings and errors so far.
func (l *logCounter) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

// top lists the messages seen, most frequent first (for failure messages).
func (l *logCounter) summary() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]int, len(l.byMsg))
	for k, v := range l.byMsg {
		out[k] = v
	}
	return out
}

// proxied is a test pipeline whose components reach Postgres and the broker
// only through fault proxies (the test's own assertions use a direct pool).
type proxied struct {
	*env
	pg, kafka *faultproxy.Proxy
	logs      *logCounter
	log       *slog.Logger
}

// newProxiedEnv builds an env (newEnv) and then moves its components behind
// proxies: a Postgres proxy in front of the server and an in-process broker
// that advertises a broker proxy, so that every Kafka connection, metadata
// included, goes through it. The topics are created on that broker.
func newProxiedEnv(t *testing.T, o envOpts) *proxied {
	t.Helper()
	e := newEnv(t, o)
	pg, err := faultproxy.New("127.0.0.1:0", pgHostPort(t, e.url))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	brokerAddr := ln.Addr().String()
	_ = ln.Close()
	kp, err := faultproxy.New("127.0.0.1:0", brokerAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kp.Close() })
	b, err := devbroker.Start(devbroker.Config{Addr: brokerAddr, AdvertiseAddr: kp.Addr(), Partitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)

	u, err := url.Parse(e.url)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = pg.Addr()
	e.url = u.String()
	e.brokers = []string{kp.Addr()}
	p := &proxied{env: e, pg: pg, kafka: kp, logs: newLogCounter()}
	p.log = slog.New(p.logs)
	ctx := testkit.Context(t, time.Minute)
	if err := p.service().Prepare(ctx); err != nil {
		t.Fatalf("prepare orchestrator behind the proxies: %v", err)
	}
	if err := p.participants().Prepare(ctx); err != nil {
		t.Fatalf("prepare participants behind the proxies: %v", err)
	}
	return p
}

func pgHostPort(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(u.Host, ":") {
		return u.Host + ":5432"
	}
	return u.Host
}

// service is an orchestrator service behind the proxies that logs to the
// counter. The pool's connections are checked before use, so a connection
// cut while idle is replaced rather than handed out broken.
func (p *proxied) service() *orchestrator.Service {
	p.t.Helper()
	svc, err := orchestrator.New(p.proxiedPool(), p.registry, &orchestrator.Config{
		Brokers: p.brokers, GroupID: p.group, Partitions: 4, Logger: p.log,
		Engine: orchestrator.EngineConfig{ReplyTopic: p.replies, TopicPrefix: p.prefix, Metrics: p.sm, TimerInterval: 20 * time.Millisecond},
		Inbox:  inbox.Config{Metrics: p.im, Name: "orchestrator"},
		Relay:  relay.Config{Metrics: p.rm},
	})
	if err != nil {
		p.t.Fatal(err)
	}
	return svc
}

// participants are the reference participants behind the proxies, logging
// to the counter.
func (p *proxied) participants() *reference.Set {
	p.t.Helper()
	s, err := reference.New(p.proxiedPool(), reference.Options{
		Brokers: p.brokers, TopicPrefix: p.prefix, Partitions: 4, Seed: 7, Logger: p.log, ReplyTopics: []string{p.replies},
		PaymentLimitCents: workload.LimitCentsDefault, InboxMetrics: p.im, RelayMetrics: p.rm,
	})
	if err != nil {
		p.t.Fatal(err)
	}
	return s
}

func (p *proxied) proxiedPool() *pgxpool.Pool {
	return testkit.PoolURL(p.t, p.url+"&pool_max_conns=6&connect_timeout=2")
}

// subPlan is the slice [from, to) of the env's plan, to start orders in
// waves.
func (e *env) subPlan(from, to int) workload.Plan {
	p := e.plan
	p.Orders = p.Orders[from:min(to, len(p.Orders))]
	return p
}

// terminal is the number of terminal sagas.
func (e *env) terminal() int {
	return e.count(`SELECT count(*) FROM ` + e.schemas.Orchestrator + `.sagas WHERE state IN ('completed', 'compensated', 'failed')`)
}

// startOrders starts orders [from, to) of the env's plan.
func startOrders(ctx context.Context, e *env, from, to int) ([]uuid.UUID, error) {
	return workload.StartAll(ctx, e.engine, e.subPlan(from, to), 4)
}

// flaky is a stand-in for a reference participant (same name, schema,
// command topic and consumer group) whose step handlers answer as given,
// e.g. always RetryLater: it never records an effect, so the real
// participant can take over afterwards.
func (e *env) flaky(name, step string, forward, compensate oneFunc) *participants.Participant {
	e.t.Helper()
	schema := ""
	for _, s := range []struct{ n, s string }{{orderapi.Inventory, e.schemas.Inventory}, {orderapi.Coupon, e.schemas.Coupon},
		{orderapi.Payment, e.schemas.Payment}, {orderapi.Shipping, e.schemas.Shipping}, {orderapi.Points, e.schemas.Points}} {
		if s.n == name {
			schema = s.s
		}
	}
	p, err := participants.New(e.pool(), &participants.Config{
		Name: name, Schema: schema, Brokers: e.brokers, CommandTopic: e.prefix + name + ".commands",
		InboxMetrics: e.im, RelayMetrics: e.rm, ReplyTopics: []string{e.replies},
	})
	if err != nil {
		e.t.Fatal(err)
	}
	var comp participants.Handler
	if compensate != nil {
		comp = participants.One(compensate)
	}
	if err := p.Handle(step, participants.One(forward), comp); err != nil {
		e.t.Fatal(err)
	}
	return p
}

// oneFunc is a step handler of one command (participants.One).
type oneFunc = func(context.Context, pgx.Tx, message.Command) (participants.Result, error)

// busy answers every command with a transient failure and counts them.
func busy(n *atomic.Int64) oneFunc {
	return func(context.Context, pgx.Tx, message.Command) (participants.Result, error) {
		n.Add(1)
		return participants.RetryLater("busy (test)"), nil
	}
}

// sent is one command the orchestrator enqueued. Its gaps are measured
// on cmd.SentAt, the orchestrator's clock at the decision that sent it
// (the one a backoff is added to), not on the outbox row's available_at:
// that is Postgres's clock at its transaction's start, which a timer's
// transaction takes before it reads the time it fires at, so under load
// two rows' available_at can be closer than the backoff between the two
// decisions (a transaction's BEGIN round trip closer).
type sent struct {
	cmd message.Command
}

// sentOn lists the commands enqueued for topic, oldest first.
func (e *env) sentOn(topic string) []sent {
	e.t.Helper()
	rows, err := e.check.Query(context.Background(), `SELECT value FROM `+e.schemas.Orchestrator+`.outbox WHERE topic = $1 ORDER BY id`, topic)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	var out []sent
	for rows.Next() {
		var v []byte
		var s sent
		if err := rows.Scan(&v); err != nil {
			e.t.Fatal(err)
		}
		if s.cmd, err = message.DecodeCommand(v); err != nil {
			e.t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// stepDef is the effective (overridden) definition of a place-order step.
func (e *env) stepDef(step string) saga.StepDef {
	e.t.Helper()
	def, ok := e.registry.Latest(orderapi.SagaType)
	if !ok {
		e.t.Fatal("place-order not registered")
	}
	i, ok := def.StepIndex(step)
	if !ok {
		e.t.Fatalf("no step %q", step)
	}
	return def.Steps[i]
}

// instances loads every saga of the env.
func (e *env) instances() []saga.Instance {
	e.t.Helper()
	rows, err := e.check.Query(context.Background(), `SELECT id FROM `+e.schemas.Orchestrator+`.sagas`)
	if err != nil {
		e.t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		e.t.Fatal(err)
	}
	out := make([]saga.Instance, 0, len(ids))
	for _, id := range ids {
		in, _, err := e.engine.Get(context.Background(), id)
		if err != nil {
			e.t.Fatal(err)
		}
		out = append(out, in)
	}
	return out
}

// stepOf returns the named step's state in in.
func stepOf(in saga.Instance, name string) saga.StepState {
	for _, s := range in.Steps {
		if s.Name == name {
			return s
		}
	}
	return saga.StepState{}
}
