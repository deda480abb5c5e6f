package orchestrator_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/internal/kafkaclient"
	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

type keptData struct {
	Order string `json:"order"`
}

// keptEnv is a service consuming its reply topic, whose replies the test
// writes itself (no participant runs: the commands go unanswered but for
// those replies).
type keptEnv struct {
	svc        *orchestrator.Service
	pool       *pgxpool.Pool
	w          *kafka.Writer
	preg       *prometheus.Registry
	reg        *saga.Registry
	prefix     string
	replyTopic string
}

func setupKept(t *testing.T) keptEnv {
	t.Helper()
	pool := testkit.Pool(t)
	brokers := testkit.Brokers(t)
	prefix := "kp" + strings.ToLower(testkit.RandomSuffix(6)) + "."
	replyTopic := prefix + "saga.replies"
	cmd := func(d keptData) (any, error) { return map[string]string{"order": d.Order}, nil }
	def, err := saga.Definition[keptData]{Name: "kept", Steps: []saga.Step[keptData]{
		{Name: "a", Participant: "p", Kind: saga.Pivot, Timeout: time.Minute, Command: cmd},
		{Name: "b", Participant: "p", Kind: saga.Retryable, Timeout: time.Minute, Command: cmd},
		{Name: "c", Participant: "p", Kind: saga.Retryable, Timeout: time.Minute, Command: cmd},
	}}.Build()
	if err != nil {
		t.Fatal(err)
	}
	reg := saga.NewRegistry()
	if err := reg.Register(def); err != nil {
		t.Fatal(err)
	}
	preg := prometheus.NewRegistry()
	m, err := orchestrator.NewMetrics(preg, "sagaflow")
	if err != nil {
		t.Fatal(err)
	}
	svc, err := orchestrator.New(pool, reg, &orchestrator.Config{
		Brokers: brokers, Partitions: 1, GroupID: prefix + "orchestrator",
		Engine: orchestrator.EngineConfig{TopicPrefix: prefix, ReplyTopic: replyTopic, Metrics: m},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testkit.Context(t, time.Minute)
	if err := svc.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- svc.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("run: %v", err)
		}
	})
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: replyTopic, Balancer: kafkaclient.Balancer(), BatchTimeout: time.Millisecond}
	t.Cleanup(func() { _ = w.Close() })
	return keptEnv{svc: svc, pool: pool, w: w, preg: preg, reg: reg, prefix: prefix, replyTopic: replyTopic}
}

// answer writes a success reply to the command step's latest command of
// saga in, as its row is now.
func answer(t *testing.T, ctx context.Context, svc *orchestrator.Service, w *kafka.Writer, id uuid.UUID, step string) message.Reply {
	t.Helper()
	in, _, err := svc.Engine().Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var await uuid.UUID
	for _, s := range in.Steps {
		if s.Name == step {
			await = s.AwaitID
		}
	}
	r := message.Reply{MessageID: uuid.New(), InReplyTo: await, SagaID: id, Step: step, Action: message.Forward,
		Outcome: message.Success, Payload: json.RawMessage(`{}`)}
	send(t, ctx, w, r)
	return r
}

// send writes r, after the records before (if any), in one write.
func send(t *testing.T, ctx context.Context, w *kafka.Writer, r message.Reply, before ...kafka.Message) {
	t.Helper()
	value, err := message.EncodeReply(r)
	if err != nil {
		t.Fatal(err)
	}
	var hdrs []kafka.Header
	for k, v := range message.Headers(r.MessageID, r.SagaID) {
		hdrs = append(hdrs, kafka.Header{Key: k, Value: []byte(v)})
	}
	ms := append(before, kafka.Message{Key: []byte(r.SagaID.String()), Value: value, Headers: hdrs})
	if err := w.WriteMessages(ctx, ms...); err != nil {
		t.Fatal(err)
	}
}

func cacheCount(t *testing.T, preg *prometheus.Registry, result string) int {
	t.Helper()
	mfs, err := preg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sagaflow_reply_saga_cache_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return int(m.GetCounter().GetValue())
				}
			}
		}
	}
	return 0
}

// sameAsLoaded fails unless kept is what loading the saga gives: the same
// fields, times at the same instant, the same data.
func sameAsLoaded(t *testing.T, kept, loaded saga.Instance) {
	t.Helper()
	eqTime := func(a, b *time.Time) bool { return (a == nil) == (b == nil) && (a == nil || a.Equal(*b)) }
	var kd, ld any
	if err := json.Unmarshal(kept.Data, &kd); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(loaded.Data, &ld); err != nil {
		t.Fatal(err)
	}
	kj, _ := json.Marshal(kd)
	lj, _ := json.Marshal(ld)
	ks, _ := json.Marshal(kept.Steps)
	ls, _ := json.Marshal(loaded.Steps)
	switch {
	case kept.ID != loaded.ID || kept.Type != loaded.Type || kept.DefVersion != loaded.DefVersion || kept.AggregateID != loaded.AggregateID ||
		kept.IdempotencyKey != loaded.IdempotencyKey || kept.State != loaded.State || kept.Cursor != loaded.Cursor ||
		kept.Version != loaded.Version || kept.Flag != loaded.Flag || string(kept.Secret) != string(loaded.Secret) ||
		kept.TraceParent != loaded.TraceParent || kept.TraceState != loaded.TraceState:
		t.Fatalf("kept saga differs from its row:\nkept   %+v\nloaded %+v", kept, loaded)
	case !kept.CreatedAt.Equal(loaded.CreatedAt) || !kept.UpdatedAt.Equal(loaded.UpdatedAt) ||
		!eqTime(kept.DeadlineAt, loaded.DeadlineAt) || !eqTime(kept.FinishedAt, loaded.FinishedAt):
		t.Fatalf("kept saga's times differ from its row's: kept %v %v %v %v, loaded %v %v %v %v", kept.CreatedAt, kept.UpdatedAt, kept.DeadlineAt, kept.FinishedAt,
			loaded.CreatedAt, loaded.UpdatedAt, loaded.DeadlineAt, loaded.FinishedAt)
	case string(kj) != string(lj):
		t.Fatalf("kept data %s, row's %s", kept.Data, loaded.Data)
	case string(ks) != string(ls):
		t.Fatalf("kept steps %s\nrow's steps %s", ks, ls)
	}
}

// The service keeps each saga as its last write left it: a reply batch
// whose sagas are all kept is decided without loading them (counted hit),
// and the kept copy is what loading the row gives back. A kept copy is a
// guess its update checks: a saga another writer moved meanwhile fails the
// deferred update, and the batch runs again loading it (the reply applied
// once, on top of the other write); a reply that the kept copy would
// refuse or ignore (it answers a command sent by another engine since) is
// decided again from the loaded row (counted discarded) and applied, not
// dead-lettered; a late copy is journaled as ignored from the row too.
func TestRepliesToKeptSagas(t *testing.T) {
	t.Parallel()
	env := setupKept(t)
	svc, w, preg := env.svc, env.w, env.preg
	ctx := testkit.Context(t, 2*time.Minute)
	eng := svc.Engine()
	start := func(key string) uuid.UUID {
		t.Helper()
		in, _, err := eng.Start(ctx, orchestrator.StartRequest{Type: "kept", IdempotencyKey: key, AggregateID: key, Data: keptData{Order: key}})
		if err != nil {
			t.Fatal(err)
		}
		return in.ID
	}
	at := func(id uuid.UUID, state saga.State, step string, version int64) func() (bool, error) {
		return func() (bool, error) {
			in, _, err := eng.Get(ctx, id)
			return err == nil && in.State == state && in.CurrentStep() == step && in.Version == version, err
		}
	}
	journaled := func(id uuid.UUID, event string) int {
		t.Helper()
		_, journal, err := eng.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, j := range journal {
			if j.Event == event {
				n++
			}
		}
		return n
	}

	// Kept all along: three hits, no load.
	s1 := start("s1")
	kept, ok := eng.Kept(s1)
	if !ok {
		t.Fatal("a started saga is not kept")
	}
	loaded, _, err := eng.Get(ctx, s1)
	if err != nil {
		t.Fatal(err)
	}
	sameAsLoaded(t, kept, loaded)
	answer(t, ctx, svc, w, s1, "a")
	testkit.Eventually(t, time.Minute, "s1 at step b", at(s1, saga.Running, "b", 2))
	testkit.Eventually(t, time.Minute, "s1 kept at version 2", func() (bool, error) {
		k, ok := eng.Kept(s1)
		return ok && k.Version == 2, nil
	})
	kept, _ = eng.Kept(s1)
	loaded, _, _ = eng.Get(ctx, s1)
	sameAsLoaded(t, kept, loaded)
	answer(t, ctx, svc, w, s1, "b")
	testkit.Eventually(t, time.Minute, "s1 at step c", at(s1, saga.Running, "c", 3))
	answer(t, ctx, svc, w, s1, "c")
	testkit.Eventually(t, time.Minute, "s1 completed", at(s1, saga.Completed, "", 4))
	if hit, miss := cacheCount(t, preg, "hit"), cacheCount(t, preg, "miss"); hit != 3 || miss != 0 {
		t.Fatalf("s1: %d hits, %d misses; want its three replies decided from the kept saga", hit, miss)
	}
	if _, ok := eng.Kept(s1); ok {
		t.Fatal("a completed saga is still kept")
	}

	// Moved by another writer after it was kept: the deferred update
	// fails its version check, the batch runs again on the loaded row.
	s2 := start("s2")
	if _, err := env.pool.Exec(ctx, `UPDATE sagaflow.sagas SET version = version + 1 WHERE id = $1`, s2); err != nil {
		t.Fatal(err)
	}
	answer(t, ctx, svc, w, s2, "a")
	testkit.Eventually(t, time.Minute, "s2 at step b", at(s2, saga.Running, "b", 3))
	if n := journaled(s2, saga.JournalStepSucceeded); n != 1 {
		t.Fatalf("s2: %d step-succeeded rows, want 1", n)
	}
	if hit, miss := cacheCount(t, preg, "hit"), cacheCount(t, preg, "miss"); hit != 4 || miss != 1 {
		t.Fatalf("after s2: %d hits, %d misses; want 4 and 1 (kept, stale, loaded)", hit, miss)
	}

	// A late copy (another message id) of s2's answer to a: ignored, from
	// the loaded row.
	answer(t, ctx, svc, w, s2, "a")
	testkit.Eventually(t, time.Minute, "the late copy journaled as ignored", func() (bool, error) {
		return journaled(s2, saga.JournalLate) == 1, nil
	})
	if d := cacheCount(t, preg, "discarded"); d != 1 {
		t.Fatalf("after the late copy: %d kept sagas discarded, want 1", d)
	}

	// Moved by another engine (not sharing what this one keeps): the reply
	// to the command that engine sent is refused by the kept copy, then
	// decided from the row and applied.
	s3 := start("s3")
	other, err := orchestrator.NewEngine(env.pool, env.reg, &orchestrator.EngineConfig{TopicPrefix: env.prefix, ReplyTopic: env.replyTopic})
	if err != nil {
		t.Fatal(err)
	}
	in3, _, _ := eng.Get(ctx, s3)
	if err := pgx.BeginFunc(ctx, env.pool, func(tx pgx.Tx) error {
		return other.ApplyReply(ctx, tx, message.Reply{MessageID: uuid.New(), InReplyTo: in3.Steps[0].AwaitID, SagaID: s3, Step: "a",
			Action: message.Forward, Outcome: message.Success, Payload: json.RawMessage(`{}`)})
	}); err != nil {
		t.Fatal(err)
	}
	// With a malformed record ahead of it in the same write (so most
	// likely in the same batch, which then cannot begin lazily: the kept
	// copy's refusal is not undone by the inbox's own rerun).
	in3, _, _ = eng.Get(ctx, s3)
	r3 := message.Reply{MessageID: uuid.New(), InReplyTo: in3.Steps[1].AwaitID, SagaID: s3, Step: "b", Action: message.Forward,
		Outcome: message.Success, Payload: json.RawMessage(`{}`)}
	send(t, ctx, w, r3, kafka.Message{Key: []byte(s3.String()), Value: []byte("not json")})
	testkit.Eventually(t, time.Minute, "s3 at step c", at(s3, saga.Running, "c", 3))
	if d := cacheCount(t, preg, "discarded"); d != 2 {
		t.Fatalf("after s3: %d kept sagas discarded, want 2", d)
	}
	if n := journaled(s3, saga.JournalStepSucceeded); n != 2 {
		t.Fatalf("s3: %d step-succeeded rows, want 2", n)
	}
}

// An engine that shares another's kept sagas keeps what it starts where the
// other's reply consumer looks; one of another schema keeps its own.
func TestShareSagaCache(t *testing.T) {
	t.Parallel()
	env := setupEngine(t)
	ctx := testkit.Context(t, time.Minute)
	api, err := orchestrator.NewEngine(env.pool, env.eng.Registry(), &orchestrator.EngineConfig{Schema: "orch", Now: env.clock.now})
	if err != nil {
		t.Fatal(err)
	}
	api.ShareSagaCache(env.eng)
	in, _, err := api.Start(ctx, orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: "share-1", AggregateID: "o-s1", Data: order("o-s1")})
	if err != nil {
		t.Fatal(err)
	}
	if k, ok := env.eng.Kept(in.ID); !ok || k.Version != in.Version {
		t.Fatalf("a saga started by the sharing engine: kept %v (version %d), want it kept at version %d", ok, k.Version, in.Version)
	}
	other, err := orchestrator.NewEngine(env.pool, env.eng.Registry(), &orchestrator.EngineConfig{Schema: "elsewhere"})
	if err != nil {
		t.Fatal(err)
	}
	other.ShareSagaCache(env.eng)
	if _, ok := other.Kept(in.ID); ok {
		t.Fatal("an engine of another schema reads this one's kept sagas")
	}
}
