package orchestrator_test

import (
	"context"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

// OnFinished hears of a saga's end after the commit of the transition that
// ended it, in the engine's own transactions; a transition in a caller's
// transaction outside an inbox handler does not call it.
func TestOnFinishedAfterCommit(t *testing.T) {
	t.Parallel()
	env := setupEngine(t)
	reg := saga.NewRegistry()
	if err := steps.Register(reg); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	ended := map[uuid.UUID]saga.State{}
	eng, err := orchestrator.NewEngine(env.pool, reg, &orchestrator.EngineConfig{Schema: "orch", Now: env.clock.now, OnFinished: func(id uuid.UUID, st saga.State) {
		mu.Lock()
		defer mu.Unlock()
		ended[id] = st
	}})
	if err != nil {
		t.Fatal(err)
	}
	env.eng = eng
	in, _, err := eng.Start(context.Background(), orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: "fin-1", AggregateID: "fin-1", Data: order("fin-1")})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		mustReply(t, env, lastCommand(t, env), message.Success, map[string]string{})
	}
	mustReply(t, env, lastCommand(t, env), message.Failure, nil)
	if st, _ := get(t, env, in.ID); st.State != saga.Failed {
		t.Fatalf("saga is %s, want failed", st.State)
	}
	mu.Lock()
	n := len(ended)
	mu.Unlock()
	if n != 0 {
		t.Fatalf("OnFinished called for a transition in the caller's transaction: %v", ended)
	}
	if _, err := eng.Operate(context.Background(), in.ID, saga.Operator{Action: saga.ActionResolve, Actor: "ops", Reason: "shipped by hand", Outcome: saga.Completed}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if ended[in.ID] != saga.Completed || len(ended) != 1 {
		t.Fatalf("OnFinished heard %v, want the resolved saga completed", ended)
	}
}
