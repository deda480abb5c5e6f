package orchestrator_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/inbox"
	"github.com/sagaflow/sagaflow/internal/kafkaclient"
	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/internal/txhooks"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

// Inside an inbox handler the service's reply handler defers its writes to
// the batch transaction's commit. A saga moved by someone else after the load (here:
// once, between the handler's return and the commit) fails the deferred,
// self-checking update: the commit rolls back, nothing of the batch is
// written, and the batch runs again at once with nothing deferred (the
// engine then checks the versions in its own calls), moving the saga once,
// on top of the other writer's change.
func TestDeferredApplyConflictRollsBackAndRetries(t *testing.T) {
	t.Parallel()
	env := setupEngine(t)
	ctx := testkit.Context(t, time.Minute)
	in, _, err := env.eng.Start(ctx, orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: "d1", AggregateID: "o-d1", Data: order("o-d1")})
	if err != nil {
		t.Fatal(err)
	}
	c := lastCommand(t, env)
	brokers := testkit.Brokers(t)
	topic := testkit.Topic(t, brokers, "replies", 1)
	svc, err := orchestrator.New(env.pool, env.eng.Registry(), &orchestrator.Config{Run: orchestrator.RunSet{Timers: true},
		Engine: orchestrator.EngineConfig{Schema: "orch", Now: env.clock.now}})
	if err != nil {
		t.Fatal(err)
	}
	var calls, deferred atomic.Int32
	handler := func(ctx context.Context, tx pgx.Tx, recs []message.Record) ([]inbox.Result, error) {
		if h, ok := txhooks.Of(tx); ok && h.CanDefer() {
			deferred.Add(1)
		}
		out, err := svc.HandleReplies(ctx, tx, recs)
		if err != nil {
			return nil, err
		}
		if calls.Add(1) == 1 {
			// Another writer moves the saga before the commit.
			if _, err := env.pool.Exec(ctx, `UPDATE orch.sagas SET version = version + 1 WHERE id = $1`, in.ID); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	cons, err := inbox.New(env.pool, handler, &inbox.Config{Brokers: brokers, GroupID: topic + "-g", Topics: []string{topic}, Schema: "orch", Name: "deferred",
		Advanced: inbox.Advanced{BackoffInitial: 5 * time.Millisecond, BackoffMax: 20 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cons.Run(rctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("consumer: %v", err)
		}
	})
	r := successReply(c)
	value, err := message.EncodeReply(r)
	if err != nil {
		t.Fatal(err)
	}
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, Balancer: kafkaclient.Balancer(), BatchTimeout: time.Millisecond}
	defer w.Close()
	var hdrs []kafka.Header
	for k, v := range message.Headers(r.MessageID, r.SagaID) {
		hdrs = append(hdrs, kafka.Header{Key: k, Value: []byte(v)})
	}
	if err := w.WriteMessages(ctx, kafka.Message{Key: []byte(r.SagaID.String()), Value: value, Headers: hdrs}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "the reply applied after the conflict", func() (bool, error) {
		got, _, err := env.eng.Get(ctx, in.ID)
		return err == nil && got.CurrentStep() == orderapi.StepLockCoupon, err
	})
	got, journal := get(t, env, in.ID)
	if got.Version != 3 {
		t.Fatalf("version %d, want 3 (started 1, the other writer's bump, one move)", got.Version)
	}
	succeeded := 0
	for _, j := range journal {
		if j.Event == saga.JournalStepSucceeded {
			succeeded++
		}
	}
	if succeeded != 1 || calls.Load() != 2 || deferred.Load() != 1 {
		t.Fatalf("%d step-succeeded rows, %d handler calls (%d deferring); want 1 row, 2 calls, the first deferring", succeeded, calls.Load(), deferred.Load())
	}
}
