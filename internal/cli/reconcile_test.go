package cli_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/orchestrator"
)

// orchestrator reconcile --json on a live database prints the report with
// differences; list shows the open discrepancy and resolve closes it.
func TestReconcileCommand(t *testing.T) {
	t.Parallel()
	url := testkit.Database(t)
	_, failed, _ := seedOps(t, testkit.PoolURL(t, url), orchestrator.SchemaDefault)

	out, stderr, code := runCLI(t, "reconcile", "--json", "--database-url", url, "--dry-run")
	if code != 0 {
		t.Fatalf("reconcile --dry-run: exit %d: %s", code, stderr)
	}
	var dry orchestrator.ReconcileReport
	if err := json.Unmarshal([]byte(out), &dry); err != nil {
		t.Fatalf("report is not JSON: %v\n%s", err, out)
	}
	if !dry.DryRun || dry.Differences != 1 || len(dry.List) != 1 || dry.List[0].Kind != orchestrator.KindFailed || dry.List[0].SagaID != failed {
		t.Fatalf("dry run report: %+v", dry)
	}
	out, stderr, code = runCLI(t, "reconcile", "--json", "--database-url", url)
	if code != 0 {
		t.Fatalf("reconcile: exit %d: %s", code, stderr)
	}
	var rep map[string]any
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("report is not JSON: %v\n%s", err, out)
	}
	if rep["differences"] != float64(1) || rep["open"] != float64(1) {
		t.Fatalf("report %s: want differences 1, open 1", out)
	}
	list, _ := rep["list"].([]any)
	if len(list) != 1 {
		t.Fatalf("report list %v", rep["list"])
	}
	id := list[0].(map[string]any)["id"]
	out, stderr, code = runCLI(t, "reconcile", "list", "--database-url", url)
	if code != 0 || !strings.Contains(out, failed.String()) || !strings.Contains(out, string(orchestrator.KindFailed)) {
		t.Fatalf("reconcile list: exit %d: %s%s", code, out, stderr)
	}
	if _, stderr, code = runCLI(t, "reconcile", "resolve", "1", "--database-url", url); code == 0 {
		t.Fatal("resolve without actor and reason succeeded")
	} else if !strings.Contains(stderr, "actor and a reason") {
		t.Fatalf("resolve without actor: %s", stderr)
	}
	out, stderr, code = runCLI(t, "reconcile", "resolve", jsonNumber(id), "--actor", "ops", "--reason", "shipped by hand", "--database-url", url)
	if code != 0 || !strings.Contains(out, "resolved by ops") {
		t.Fatalf("resolve: exit %d: %s%s", code, out, stderr)
	}
	out, _, _ = runCLI(t, "reconcile", "list", "--json", "--database-url", url)
	if !strings.Contains(out, `"open": []`) {
		t.Fatalf("still open after resolve: %s", out)
	}
}

func jsonNumber(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
