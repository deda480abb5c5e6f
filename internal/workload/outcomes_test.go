package workload_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/internal/workload"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/migrations"
	"github.com/sagaflow/sagaflow/orchestrator"
)

// TestCheckOutcomesFindsEveryMismatch: a saga that ended needs exactly one
// finished record naming its state; a running saga none; a record for a
// saga that does not exist is reported. A flag record beside the end is
// fine.
func TestCheckOutcomesFindsEveryMismatch(t *testing.T) {
	ctx := testkit.Context(t, 60*time.Second)
	pool := testkit.Pool(t)
	testkit.Migrate(t, pool, testkit.MustSets(t)(migrations.Orchestrator(orchestrator.SchemaDefault)))
	ids := map[string]uuid.UUID{}
	for _, s := range []struct{ name, state string }{
		{"good", "completed"}, {"flagged-then-done", "completed"}, {"missing", "compensated"},
		{"twice", "failed"}, {"wrong-state", "compensated"}, {"running-with-end", "running"}, {"running", "running"},
	} {
		id := uuid.New()
		ids[s.name] = id
		if _, err := pool.Exec(ctx, `INSERT INTO sagaflow.sagas (id, type, definition_version, aggregate_id, idempotency_key, state, data, steps, version, created_at, updated_at)
VALUES ($1, 'place-order', 1, $2, $2, $3, '{}', '[]', 1, now(), now())`, id, "order-"+s.name, s.state); err != nil {
			t.Fatal(err)
		}
	}
	rec := func(name, kind, state string) message.SagaOutcome {
		return message.SagaOutcome{SagaID: ids[name], Type: "place-order", AggregateID: "order-" + name, Kind: kind, State: state}
	}
	stray := uuid.New()
	outcomes := map[uuid.UUID][]message.SagaOutcome{
		ids["good"]:              {rec("good", message.OutcomeFinished, "completed")},
		ids["flagged-then-done"]: {rec("flagged-then-done", message.OutcomeFlagged, "running"), rec("flagged-then-done", message.OutcomeFinished, "completed")},
		ids["twice"]:             {rec("twice", message.OutcomeFinished, "failed"), rec("twice", message.OutcomeFinished, "failed")},
		ids["wrong-state"]:       {rec("wrong-state", message.OutcomeFinished, "completed")},
		ids["running-with-end"]:  {rec("running-with-end", message.OutcomeFinished, "completed")},
		stray:                    {{SagaID: stray, Type: "place-order", AggregateID: "order-x", Kind: message.OutcomeFinished, State: "completed"}},
	}
	bad, err := workload.CheckOutcomes(ctx, pool, orchestrator.SchemaDefault, outcomes)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"missing":          ids["missing"].String() + " (place-order) ended compensated with 0 finished",
		"twice":            ids["twice"].String() + " (place-order) ended failed with 2 finished",
		"wrong-state":      ids["wrong-state"].String() + " (place-order) ended compensated but its outcome record says completed",
		"running-with-end": ids["running-with-end"].String() + " (place-order) is running but has 1 finished",
		"stray":            "outcome records for saga " + stray.String() + ", which does not exist",
	}
	for name, w := range want {
		if !slices.ContainsFunc(bad, func(b string) bool { return strings.Contains(b, w) }) {
			t.Errorf("%s: no violation containing %q in:\n%s", name, w, strings.Join(bad, "\n"))
		}
	}
	if len(bad) != len(want) {
		t.Errorf("%d violations, want %d:\n%s", len(bad), len(want), strings.Join(bad, "\n"))
	}
	if n := workload.FinishedOutcomes(outcomes); n != 7 {
		t.Errorf("FinishedOutcomes = %d, want 7", n)
	}
}
