package orchestrator_test

import (
	"context"
	"strings"
	"testing"

	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

// TestSendBoundOnTheEngine: a saga whose participant never answers (as one
// that dead-letters every command it is sent: the orchestrator hears
// nothing) writes at most its bound of commands to the outbox through the
// engine's timers, then is failed, flagged with the bound, and has no
// timer left; an operator's retry sends one more.
func TestSendBoundOnTheEngine(t *testing.T) {
	t.Parallel()
	env := setupEngine(t)
	ctx := context.Background()
	env.eng.Registry().SetMaxSends(6)
	in, _, err := env.eng.Start(ctx, orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: "b1", AggregateID: "b1", Data: order("b1")})
	if err != nil {
		t.Fatal(err)
	}
	for range 200 {
		cur, _ := get(t, env, in.ID)
		if cur.State.Terminal() {
			break
		}
		if w := cur.NextWakeup(); w != nil && w.After(env.clock.now()) {
			env.clock.advance(w.Sub(env.clock.now()))
		}
		if _, err := env.eng.FireDue(ctx, 10); err != nil {
			t.Fatal(err)
		}
	}
	got, _ := get(t, env, in.ID)
	if got.State != saga.Failed || !strings.Contains(got.Flag, "max sends 6") {
		t.Fatalf("saga %s, flag %q; want failed, flagged with the bound", got.State, got.Flag)
	}
	if n := len(commandHeaders(t, env, in.ID.String())); n != 6 {
		t.Fatalf("%d commands in the outbox, want the bound 6", n)
	}
	if due := timerOf(t, env, in.ID); due != nil {
		t.Fatalf("a stopped saga keeps a timer at %v", due)
	}
	if _, err := env.eng.Operate(ctx, in.ID, saga.Operator{Action: saga.ActionRetry, Actor: "alice", Reason: "participant fixed"}); err != nil {
		t.Fatalf("operator retry of the stopped saga: %v", err)
	}
	if n := len(commandHeaders(t, env, in.ID.String())); n != 7 {
		t.Fatalf("%d commands after the operator's retry, want 7", n)
	}
}
