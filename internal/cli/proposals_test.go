package cli_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/migrations"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

// With sagas.place-order.four_eyes: [force-fail], `force-fail` records a
// proposal and changes nothing; `approve` by the proposer is refused, by
// another actor it runs the action; `proposals` lists them.
func TestFourEyesFromTheCLI(t *testing.T) {
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
	in, _, err := eng.Start(ctx, orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: "fe", AggregateID: "fe",
		Data: steps.Order{OrderID: "fe", Customer: "c", SKU: "sku-1", Qty: 1, AmountCents: 100}})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "sagaflow.yaml")
	if err := os.WriteFile(file, []byte("sagas:\n  place-order:\n    four_eyes: [force-fail]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	common := []string{"--database-url=" + dbURL, "--config", file}
	state := func() saga.State {
		got, _, err := eng.Get(ctx, in.ID)
		if err != nil {
			t.Fatal(err)
		}
		return got.State
	}

	out, errOut, code := runCLI(t, append([]string{"force-fail", in.ID.String(), "--actor", "alice", "--reason", "carrier outage"}, common...)...)
	m := regexp.MustCompile(`proposal (\d+) recorded, nothing changed`).FindStringSubmatch(out)
	if code != 0 || m == nil {
		t.Fatalf("force-fail under four eyes: exit %d\n%s\n%s", code, out, errOut)
	}
	if s := state(); s != saga.Running {
		t.Fatalf("after the proposal the saga is %s, want running", s)
	}
	out, errOut, code = runCLI(t, append([]string{"proposals"}, common...)...)
	if code != 0 || !strings.Contains(out, in.ID.String()) || !strings.Contains(out, "alice") || !strings.Contains(out, "force-fail") {
		t.Fatalf("proposals: exit %d\n%s\n%s", code, out, errOut)
	}
	_, errOut, code = runCLI(t, append([]string{"approve", m[1], "--actor", "alice"}, common...)...)
	if code == 0 || !strings.Contains(errOut, "cannot approve") {
		t.Fatalf("approve by the proposer: exit %d, stderr %s; want a refusal", code, errOut)
	}
	_, errOut, code = runCLI(t, append([]string{"reject", m[1], "--actor", "bob"}, common...)...)
	if code == 0 || !strings.Contains(errOut, "--reason is required") {
		t.Fatalf("reject without a reason: exit %d, stderr %s", code, errOut)
	}
	if s := state(); s != saga.Running {
		t.Fatalf("after refused decisions the saga is %s, want running", s)
	}
	out, errOut, code = runCLI(t, append([]string{"approve", m[1], "--actor", "bob", "--reason", "outage confirmed"}, common...)...)
	if code != 0 || !strings.Contains(out, "approved by bob") || !strings.Contains(out, "proposed by alice") {
		t.Fatalf("approve by bob: exit %d\n%s\n%s", code, out, errOut)
	}
	if s := state(); s != saga.Failed {
		t.Fatalf("after approval the saga is %s, want failed", s)
	}
	out, _, code = runCLI(t, append([]string{"proposals", "--state", "approved", "--json"}, common...)...)
	if code != 0 || !strings.Contains(out, `"decider": "bob"`) && !strings.Contains(out, `"decider":"bob"`) {
		t.Fatalf("proposals --state approved: exit %d\n%s", code, out)
	}
}
