package orchestrator_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/saga"
)

// outcomeRows decodes the outcome records of saga id in the engine's
// outbox, oldest first.
func outcomeRows(t *testing.T, env *engineEnv, id uuid.UUID) []message.SagaOutcome {
	t.Helper()
	rows, err := env.pool.Query(context.Background(), `SELECT key, value FROM orch.outbox WHERE topic = $1 AND headers->>'saga-id' = $2 ORDER BY id`,
		orchestrator.OutcomeTopicDefault, id.String())
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []message.SagaOutcome
	for rows.Next() {
		var key string
		var v []byte
		if err := rows.Scan(&key, &v); err != nil {
			t.Fatal(err)
		}
		o, err := message.DecodeSagaOutcome(v)
		if err != nil {
			t.Fatal(err)
		}
		if key != o.AggregateID {
			t.Fatalf("outcome keyed %q, want the aggregate id %q", key, o.AggregateID)
		}
		out = append(out, o)
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	return out
}

// A step after the pivot retried past its threshold flags the saga: one
// flagged record, however many re-sends follow; the saga's end is one
// finished record.
func TestOutcomeOfAFlagAndTheEnd(t *testing.T) {
	t.Parallel()
	env := setupEngine(t)
	ctx := context.Background()
	id := startToShipment(t, env, "o-flag")
	flaggedAt := -1
	for n := 0; n < 50 && flaggedAt < 0 || n < flaggedAt+3; n++ {
		mustReply(t, env, lastCommand(t, env), message.Retry, nil)
		env.clock.advance(10 * time.Second)
		if _, err := env.eng.FireDue(ctx, 10); err != nil {
			t.Fatal(err)
		}
		if in, _ := get(t, env, id); in.Flag != "" && flaggedAt < 0 {
			flaggedAt = n
		}
	}
	if flaggedAt < 0 {
		t.Fatal("create-shipment was never flagged")
	}
	got := outcomeRows(t, env, id)
	if len(got) != 1 || got[0].Kind != message.OutcomeFlagged || got[0].State != "running" || !strings.Contains(got[0].Reason, "create-shipment") {
		t.Fatalf("outcomes after the flag and three more retries: %+v, want one flagged, running, naming the step", got)
	}
	// create-shipment, award-points and confirm-stock answer.
	for range 3 {
		mustReply(t, env, lastCommand(t, env), message.Success, nil)
	}
	if in, _ := get(t, env, id); in.State != saga.Completed {
		t.Fatalf("saga %s, want completed", in.State)
	}
	got = outcomeRows(t, env, id)
	if len(got) != 2 || got[1].Kind != message.OutcomeFinished || got[1].State != "completed" {
		t.Fatalf("outcomes %+v, want the flag then the completion", got)
	}
	if n := env.labeled("sagaflow_outcomes_written_total", map[string]string{"state": "flagged"}); n == nil || n.GetCounter().GetValue() != 1 {
		t.Fatalf("sagaflow_outcomes_written_total{flagged} = %v, want 1", n)
	}
}

// Repairs that end a saga write a record each, with the operator as actor:
// force-fail (failed), then resolve (completed); a refused repair none.
func TestOutcomeOfRepairs(t *testing.T) {
	t.Parallel()
	env := setupEngine(t)
	ctx := context.Background()
	id := startToShipment(t, env, "o-repair")
	if _, err := env.eng.Operate(ctx, id, saga.Operator{Action: saga.ActionForceFail, Actor: "bob", Reason: "carrier gone"}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.eng.Operate(ctx, id, saga.Operator{Action: saga.ActionForceFail, Actor: "bob", Reason: "again"}); err == nil {
		t.Fatal("a second force-fail of a failed saga was accepted")
	}
	if _, err := env.eng.Operate(ctx, id, saga.Operator{Action: saga.ActionResolve, Actor: "carol", Reason: "shipped by hand", Outcome: saga.Completed}); err != nil {
		t.Fatal(err)
	}
	got := outcomeRows(t, env, id)
	want := []struct{ state, actor, reason string }{{"failed", "bob", "carrier gone"}, {"completed", "carol", "shipped by hand"}}
	if len(got) != len(want) {
		t.Fatalf("outcomes %+v, want %d", got, len(want))
	}
	for i, w := range want {
		if o := got[i]; o.Kind != message.OutcomeFinished || o.State != w.state || o.Actor != w.actor || o.Reason != w.reason {
			t.Errorf("outcome %d: %+v, want finished %s by %s for %q", i, o, w.state, w.actor, w.reason)
		}
	}
}
