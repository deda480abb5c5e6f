package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sagaflow/sagaflow/api"
	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/migrations"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

// opsEnv is a real engine on a fresh database behind the HTTP API. Sagas are
// driven by answering the commands the engine puts in its outbox, as the
// participants would.
type opsEnv struct {
	pool  *pgxpool.Pool
	eng   *orchestrator.Engine
	srv   *httptest.Server
	token string
	done  map[int64]bool
}

const opsToken = "169db81251968505a795de4b2361b081"

func newOpsEnv(t *testing.T, cfg *api.Config) *opsEnv {
	t.Helper()
	return newOpsEnvEngine(t, cfg, orchestrator.EngineConfig{})
}

// newOpsEnvEngine is newOpsEnv with an engine configured by ec (its
// schema is set).
func newOpsEnvEngine(t *testing.T, cfg *api.Config, ec orchestrator.EngineConfig) *opsEnv {
	t.Helper()
	pool := testkit.Pool(t)
	testkit.Migrate(t, pool, testkit.MustSets(t)(migrations.Orchestrator("orch")))
	reg := saga.NewRegistry()
	if err := steps.Register(reg); err != nil {
		t.Fatal(err)
	}
	ec.Schema = "orch"
	eng, err := orchestrator.NewEngine(pool, reg, &ec)
	if err != nil {
		t.Fatal(err)
	}
	if cfg == nil {
		cfg = &api.Config{AdminToken: opsToken}
	}
	srv := httptest.NewServer(newAPI(t, eng, cfg))
	t.Cleanup(srv.Close)
	return &opsEnv{pool: pool, eng: eng, srv: srv, token: cfg.AdminToken, done: map[int64]bool{}}
}

func (e *opsEnv) start(t *testing.T, orderID string) uuid.UUID {
	t.Helper()
	o := steps.Order{OrderID: orderID, Customer: "c-" + orderID, SKU: "sku-1", Qty: 2, AmountCents: 4200}
	in, _, err := e.eng.Start(context.Background(), orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: orderID, AggregateID: orderID, Data: o})
	if err != nil {
		t.Fatalf("start saga for %s: %v", orderID, err)
	}
	return in.ID
}

// answer says how a participant answers one command.
type answer struct {
	outcome message.Outcome
	reason  string
}

var okOutputs = map[string]any{
	orderapi.StepReserveInventory: orderapi.ReserveInventoryResult{ReservationID: "res-1"},
	orderapi.StepLockCoupon:       orderapi.LockCouponResult{},
	orderapi.StepChargePayment:    orderapi.ChargePaymentResult{PaymentID: "pay-1"},
	orderapi.StepCreateShipment:   orderapi.CreateShipmentResult{ShipmentID: "ship-1"},
	orderapi.StepAwardPoints:      orderapi.AwardPointsResult{Balance: 42},
	orderapi.StepConfirmStock:     orderapi.ConfirmStockResult{Sold: 1},
}

// drive answers saga id's commands with script (success when it has no
// entry for "step/action") until the saga is terminal.
func (e *opsEnv) drive(t *testing.T, id uuid.UUID, script map[string]answer) saga.Instance {
	t.Helper()
	ctx := context.Background()
	for range 40 {
		in, _, err := e.eng.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if in.State.Terminal() {
			return in
		}
		c, ok := e.nextCommand(t, id)
		if !ok {
			// waiting for a backoff: let the timer re-send when due
			testkit.Eventually(t, 5*time.Second, "the timer to re-send a command of saga "+id.String(), func() (bool, error) {
				if _, err := e.eng.FireDue(ctx, 10); err != nil {
					return false, err
				}
				c, ok = e.nextCommand(t, id)
				return ok, nil
			})
		}
		a, ok := script[fmt.Sprintf("%s/%s/%d", c.Step, c.Action, c.Attempt)]
		if !ok {
			a, ok = script[c.Step+"/"+string(c.Action)]
		}
		if !ok {
			a = answer{outcome: message.Success}
		}
		var payload json.RawMessage
		if a.outcome == message.Success && c.Action == message.Forward {
			payload, _ = json.Marshal(okOutputs[c.Step])
		}
		r := message.Reply{MessageID: uuid.New(), InReplyTo: c.MessageID, SagaID: id, Step: c.Step, Action: c.Action,
			Outcome: a.outcome, Reason: a.reason, Payload: payload}
		if err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error { return e.eng.ApplyReply(ctx, tx, r) }); err != nil {
			t.Fatalf("reply %s to %s/%s: %v", a.outcome, c.Step, c.Action, err)
		}
	}
	t.Fatalf("saga %s did not settle within 40 replies", id)
	return saga.Instance{}
}

// nextCommand returns the oldest command for saga id not answered yet
// (outcome records are not commands).
func (e *opsEnv) nextCommand(t *testing.T, id uuid.UUID) (message.Command, bool) {
	t.Helper()
	rows, err := e.pool.Query(context.Background(), `SELECT id, value FROM orch.outbox WHERE topic <> $1 ORDER BY id`, orchestrator.OutcomeTopicDefault)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var rid int64
		var v []byte
		if err := rows.Scan(&rid, &v); err != nil {
			t.Fatal(err)
		}
		if e.done[rid] {
			continue
		}
		c, err := message.DecodeCommand(v)
		if err != nil {
			t.Fatalf("outbox row %d: %v", rid, err)
		}
		if c.SagaID == id {
			e.done[rid] = true
			return c, true
		}
	}
	return message.Command{}, false
}

// do sends a request and returns the status and body.
func (e *opsEnv) do(t *testing.T, method, path, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

func (e *opsEnv) getJSON(t *testing.T, path string, v any) {
	t.Helper()
	st, body := e.do(t, http.MethodGet, path, "", "")
	if st != http.StatusOK {
		t.Fatalf("GET %s = %d %s", path, st, body)
	}
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("GET %s: %v in %s", path, err, body)
	}
}

// threeSagas makes a completed, a compensated (payment declined) and a
// failed (shipment refused after the pivot) saga.
func (e *opsEnv) threeSagas(t *testing.T) (completed, compensated, failed uuid.UUID) {
	t.Helper()
	completed = e.start(t, "order-ok")
	compensated = e.start(t, "order-declined")
	failed = e.start(t, "order-noship")
	want := map[uuid.UUID]saga.State{completed: saga.Completed, compensated: saga.Compensated, failed: saga.Failed}
	scripts := map[uuid.UUID]map[string]answer{
		completed:   {orderapi.StepCreateShipment + "/forward/1": {message.Retry, "carrier API busy"}},
		compensated: {orderapi.StepChargePayment + "/forward": {message.Failure, "card declined: insufficient funds"}},
		failed:      {orderapi.StepCreateShipment + "/forward": {message.Failure, "carrier refused: address unknown"}},
	}
	for _, id := range []uuid.UUID{completed, compensated, failed} {
		if in := e.drive(t, id, scripts[id]); in.State != want[id] {
			t.Fatalf("saga %s ended %s, want %s", id, in.State, want[id])
		}
	}
	return completed, compensated, failed
}
