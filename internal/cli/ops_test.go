package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sagaflow/sagaflow/api"
	"github.com/sagaflow/sagaflow/internal/cli"
	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/migrations"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

// opsServer runs the HTTP API over a real engine with a failed saga (the
// shipment refused after the pivot) and a running one.
func opsServer(t *testing.T, cfg *api.Config) (url string, failed, running uuid.UUID) {
	t.Helper()
	eng, failed, running := seedOps(t, testkit.Pool(t), "orch")
	h, err := api.New(eng, cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL, failed, running
}

// seedOps migrates schema on pool and leaves a failed saga (the shipment
// refused after the pivot) and a running one there.
func seedOps(t *testing.T, pool *pgxpool.Pool, schema string) (eng *orchestrator.Engine, failed, running uuid.UUID) {
	t.Helper()
	ctx := context.Background()
	testkit.Migrate(t, pool, testkit.MustSets(t)(migrations.Orchestrator(schema)))
	reg := saga.NewRegistry()
	if err := steps.Register(reg); err != nil {
		t.Fatal(err)
	}
	eng, err := orchestrator.NewEngine(pool, reg, &orchestrator.EngineConfig{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	start := func(key string) uuid.UUID {
		in, _, err := eng.Start(ctx, orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: key, AggregateID: key,
			Data: steps.Order{OrderID: key, Customer: "c1", SKU: "sku-1", Qty: 1, AmountCents: 1500}})
		if err != nil {
			t.Fatal(err)
		}
		return in.ID
	}
	failed = start("order-failed")
	outputs := map[string]any{
		orderapi.StepReserveInventory: orderapi.ReserveInventoryResult{ReservationID: "r1"},
		orderapi.StepLockCoupon:       orderapi.LockCouponResult{},
		orderapi.StepChargePayment:    orderapi.ChargePaymentResult{PaymentID: "p1"},
	}
	for seen := int64(0); ; {
		var id int64
		var v []byte
		if err := pool.QueryRow(ctx, `SELECT id, value FROM `+schema+`.outbox WHERE id > $1 ORDER BY id LIMIT 1`, seen).Scan(&id, &v); err != nil {
			t.Fatalf("next command: %v", err)
		}
		seen = id
		c, err := message.DecodeCommand(v)
		if err != nil {
			t.Fatal(err)
		}
		r := message.Reply{MessageID: uuid.New(), InReplyTo: c.MessageID, SagaID: c.SagaID, Step: c.Step, Action: c.Action, Outcome: message.Success}
		if c.Step == orderapi.StepCreateShipment {
			r.Outcome, r.Reason = message.Failure, "carrier refused:\naddress unknown"
		} else {
			r.Payload, _ = json.Marshal(outputs[c.Step])
		}
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return eng.ApplyReply(ctx, tx, r) }); err != nil {
			t.Fatal(err)
		}
		if c.Step == orderapi.StepCreateShipment {
			break
		}
	}
	running = start("order-running")
	return eng, failed, running
}

// opsTestToken is the admin token of the test servers (api.New refuses
// weak ones).
const opsTestToken = "2c07c06ffd1ec0b3b84e91d2ea147fb3"

func runCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := cli.Main(args, &out, &errb)
	return out.String(), errb.String(), code
}

func TestOpsStatusAndList(t *testing.T) {
	t.Parallel()
	url, failed, running := opsServer(t, &api.Config{AdminToken: opsTestToken})

	out, stderr, code := runCLI(t, "status", failed.String(), "--api", url)
	if code != 0 {
		t.Fatalf("status: exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"state    failed", "step     " + orderapi.StepCreateShipment, "type     place-order (definition v2)",
		"charge-payment [pivot]", "> " + orderapi.StepCreateShipment, "carrier refused: address unknown", "journal (", "step failed",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q:\n%s", want, out)
		}
	}
	// steps are aligned columns: every step row starts its KIND at the header's column
	lines := strings.Split(out, "\n")
	var header string
	for _, l := range lines {
		if strings.HasPrefix(l, "#  ") {
			header = l
		}
	}
	kindCol := strings.Index(header, "KIND")
	if kindCol < 0 {
		t.Fatalf("no step table header in:\n%s", out)
	}
	rows := 0
	stepRow := regexp.MustCompile(`^[1-6] `)
	for _, l := range lines {
		if stepRow.MatchString(l) {
			rows++
			if len(l) <= kindCol || l[kindCol-1] != ' ' || l[kindCol] == ' ' {
				t.Errorf("step row not aligned with KIND at column %d: %q", kindCol, l)
			}
		}
	}
	if rows != 6 {
		t.Fatalf("status shows %d step rows, want 6:\n%s", rows, out)
	}
	t.Logf("status output:\n%s", out)
	out, _, _ = runCLI(t, "status", failed.String(), "--api", url, "--journal", "2")
	if !strings.Contains(out, "journal (last 2 of ") {
		t.Errorf("--journal 2 does not cut the journal:\n%s", out)
	}

	out, stderr, code = runCLI(t, "list", "--stuck", "--api", url)
	if code != 0 || !strings.Contains(out, failed.String()) || strings.Contains(out, running.String()) {
		t.Fatalf("list --stuck (exit %d, %s):\n%s\nwant the failed saga only", code, stderr, out)
	}
	if !regexp.MustCompile(`(?m)^ID\s+TYPE\s+STATE\s+STEP\s+AGE\s+MOVED\s+FLAG$`).MatchString(out) {
		t.Errorf("list has no column header:\n%s", out)
	}
	t.Logf("list --stuck output:\n%s", out)
	out, _, _ = runCLI(t, "list", "--state", "running", "--type", orderapi.SagaType, "--api", url)
	if !strings.Contains(out, running.String()) || strings.Contains(out, failed.String()) || !strings.Contains(out, orderapi.StepReserveInventory) {
		t.Fatalf("list --state running:\n%s", out)
	}
	out, _, _ = runCLI(t, "list", "--aggregate-id", "order-failed", "--api", url)
	if !strings.Contains(out, failed.String()) || strings.Contains(out, running.String()) {
		t.Fatalf("list --aggregate-id order-failed:\n%s", out)
	}
	out, _, _ = runCLI(t, "list", "--idempotency-key", "order-running", "--api", url)
	if !strings.Contains(out, running.String()) || strings.Contains(out, failed.String()) {
		t.Fatalf("list --idempotency-key order-running:\n%s", out)
	}
	out, _, _ = runCLI(t, "list", "--limit", "1", "--api", url)
	if !strings.Contains(out, running.String()) || !strings.Contains(out, "more: --cursor ") {
		t.Fatalf("list --limit 1 shows no next page:\n%s", out)
	}
	out, _, _ = runCLI(t, "list", "--limit", "1", "--all", "--api", url)
	if !strings.Contains(out, running.String()) || !strings.Contains(out, failed.String()) || strings.Contains(out, "more:") {
		t.Fatalf("list --all does not follow the pages:\n%s", out)
	}
	out, _, _ = runCLI(t, "list", "--state", "compensated", "--api", url)
	if strings.TrimSpace(out) != "no saga matches" {
		t.Fatalf("empty list = %q", out)
	}
	out, _, _ = runCLI(t, "status", failed.String(), "--api", url, "--json")
	var v api.SagaView
	if err := json.Unmarshal([]byte(out), &v); err != nil || v.ID != failed {
		t.Fatalf("status --json: %v: %s", err, out)
	}

	// errors are the API's, readable
	_, stderr, code = runCLI(t, "status", uuid.NewString(), "--api", url)
	if code == 0 || !strings.Contains(stderr, "404") || !strings.Contains(stderr, "no saga") {
		t.Fatalf("unknown saga: exit %d: %s", code, stderr)
	}
	_, stderr, code = runCLI(t, "list", "--state", "bogus", "--api", url)
	if code == 0 || !strings.Contains(stderr, "state \"bogus\" must be one of") {
		t.Fatalf("bad state: exit %d: %s", code, stderr)
	}
	_, stderr, code = runCLI(t, "list", "--api", "not a url")
	if code == 0 || !strings.Contains(stderr, "--api") {
		t.Fatalf("bad --api: exit %d: %s", code, stderr)
	}
}

func TestOpsProtectedReadsUseTheToken(t *testing.T) {
	t.Parallel()
	url, failed, _ := opsServer(t, &api.Config{AdminToken: opsTestToken, ProtectReads: true})
	_, stderr, code := runCLI(t, "status", failed.String(), "--api", url)
	if code == 0 || !strings.Contains(stderr, "401") || !strings.Contains(stderr, "--token") {
		t.Fatalf("no token: exit %d: %s", code, stderr)
	}
	out, stderr, code := runCLI(t, "list", "--stuck", "--api", url, "--token", opsTestToken)
	if code != 0 || !strings.Contains(out, failed.String()) {
		t.Fatalf("with --token: exit %d %s\n%s", code, stderr, out)
	}
}
