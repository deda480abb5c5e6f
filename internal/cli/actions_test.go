package cli_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/migrations"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

// `orchestrator retry|compensate|resolve`: on one saga by id, and on every
// saga of a --filter with a --dry-run that changes nothing, each action
// journaled with the actor and reason; bad invocations are refused before
// anything is touched.
func TestOperatorActionsFromTheCLI(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := testkit.Database(t)
	pool := testkit.PoolURL(t, dbURL)
	testkit.Migrate(t, pool, testkit.MustSets(t)(migrations.Orchestrator(orchestrator.SchemaDefault)))
	reg := saga.NewRegistry()
	if err := steps.Register(reg); err != nil {
		t.Fatal(err)
	}
	eng, err := orchestrator.NewEngine(pool, reg, &orchestrator.EngineConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []uuid.UUID
	for _, k := range []string{"cli-a", "cli-b", "cli-c"} {
		in, _, err := eng.Start(ctx, orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: k, AggregateID: k,
			Data: steps.Order{OrderID: k, Customer: "c", SKU: "sku-1", Qty: 1, AmountCents: 100}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, in.ID)
	}
	journaled := func(actor string) int {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM sagaflow.journal WHERE actor = $1`, actor).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	db := "--database-url=" + dbURL

	out, errOut, code := runCLI(t, "compensate", "--filter", "status=running,type=place-order", "--dry-run", "--actor", "erin", "--reason", "recall", db)
	if code != 0 || !strings.Contains(out, "dry run: compensate would touch 3 of 3 sagas") {
		t.Fatalf("dry run: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, id := range ids {
		if !strings.Contains(out, id.String()) {
			t.Errorf("dry run does not list saga %s:\n%s", id, out)
		}
	}
	if n := journaled("erin"); n != 0 {
		t.Fatalf("the dry run journaled %d actions", n)
	}

	out, errOut, code = runCLI(t, "compensate", ids[0].String(), "--actor", "erin", "--reason", "customer called", db)
	if code != 0 || !strings.Contains(out, "compensate applied to saga "+ids[0].String()+": now compensating") {
		t.Fatalf("single action: exit %d\n%s\n%s", code, out, errOut)
	}
	out, errOut, code = runCLI(t, "compensate", "--filter", "state=running", "--actor", "erin", "--reason", "recall", "--json", db)
	var res orchestrator.BulkResult
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res.Counts.Applied != 2 || res.DryRun {
		t.Fatalf("filter action: exit %d\n%s\n%s", code, out, errOut)
	}
	if n := journaled("erin"); n != 3 {
		t.Fatalf("%d journal entries by erin, want 3 (one per saga)", n)
	}
	out, _, code = runCLI(t, "resolve", "--filter", "state=compensating", "--outcome", "completed", "--actor", "erin", "--reason", "r", db)
	if code != 0 || !strings.Contains(out, "0 of 3 sagas touched, 3 refused") {
		t.Fatalf("resolve of open sagas: exit %d\n%s", code, out)
	}

	out, errOut, code = runCLI(t, "force-fail", ids[1].String(), "--actor", "frank", "--reason", "participant gone", "--ticket", "INC-3", db)
	if code != 0 || !strings.Contains(out, "force-fail applied to saga "+ids[1].String()+": now failed") {
		t.Fatalf("force-fail: exit %d\n%s\n%s", code, out, errOut)
	}
	var ticket string
	if err := pool.QueryRow(ctx, `SELECT ticket FROM sagaflow.journal WHERE actor = 'frank'`).Scan(&ticket); err != nil || ticket != "INC-3" {
		t.Fatalf("force-fail journal ticket %q (%v)", ticket, err)
	}
	// Resume of a saga that compensated is refused, with the reason.
	if _, errOut, code = runCLI(t, "resume", ids[1].String(), "--step", orderapi.StepReserveInventory, "--actor", "a", "--reason", "r", db); code == 0 || !strings.Contains(errOut, "refused") {
		t.Fatalf("resume of a compensated-from saga: exit %d\n%s", code, errOut)
	}

	for _, bad := range [][]string{
		{"resume", ids[1].String(), "--actor", "a", "--reason", "r"},                         // no step
		{"mark-done", ids[1].String(), "--output", "{nope", "--actor", "a", "--reason", "r"}, // not JSON
		{"retry", ids[1].String(), "--reason", "r"},                                          // no actor
		{"retry", "--actor", "a", "--reason", "r"},                                           // neither id nor filter
		{"retry", ids[1].String(), "--filter", "state=running", "--actor", "a", "--reason", "r"},
		{"retry", ids[1].String(), "--dry-run", "--actor", "a", "--reason", "r"}, // dry run without filter
		{"retry", "--filter", "colour=red", "--actor", "a", "--reason", "r"},
		{"retry", "--filter", "", "--actor", "a", "--reason", "r"},
		{"resolve", ids[1].String(), "--actor", "a", "--reason", "r"}, // no outcome
		{"retry", "not-a-uuid", "--actor", "a", "--reason", "r"},
	} {
		if _, _, code := runCLI(t, append(bad, db)...); code == 0 {
			t.Errorf("%v: exit 0, want an error", bad)
		}
	}
	if n := journaled("a"); n != 0 {
		t.Fatalf("refused invocations journaled %d actions", n)
	}
}
