package api_test

import (
	"bytes"
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

const adminToken = "cfd648b735fb65bbd6051860c9478c94"

// env is one API over a real engine on a fresh database. No Kafka: the
// commands the engine sends stay in its outbox, and replies are applied
// with Engine.ApplyReply as the reply consumer would.
type env struct {
	t    *testing.T
	pool *pgxpool.Pool
	eng  *orchestrator.Engine
	srv  *httptest.Server
}

func setup(t *testing.T, token string) *env {
	t.Helper()
	pool := testkit.Pool(t)
	testkit.Migrate(t, pool, testkit.MustSets(t)(migrations.Orchestrator("orch")))
	reg := saga.NewRegistry()
	if err := steps.Register(reg); err != nil {
		t.Fatal(err)
	}
	eng, err := orchestrator.NewEngine(pool, reg, &orchestrator.EngineConfig{Schema: "orch"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(newAPI(t, eng, &api.Config{AdminToken: token}))
	t.Cleanup(srv.Close)
	return &env{t: t, pool: pool, eng: eng, srv: srv}
}

// do sends method path with body (a string sent as is, or a value encoded
// as JSON) and returns the status and the decoded JSON answer.
func (e *env) do(method, path string, body any, header ...string) (int, map[string]any) {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		buf, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		rd = bytes.NewReader(buf)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, e.srv.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		e.t.Fatalf("%s %s: Content-Type %q, want application/json; body %s", method, path, ct, raw)
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		e.t.Fatalf("%s %s: answer is not a JSON object: %v: %s", method, path, err, raw)
	}
	return resp.StatusCode, out
}

func order(id string) steps.Order {
	return steps.Order{OrderID: id, Customer: "c-1", SKU: "sku-apple", Qty: 2, AmountCents: 2500}
}

func startBody(key string) map[string]any {
	return map[string]any{"type": orderapi.SagaType, "idempotency_key": key, "aggregate_id": key, "data": order(key)}
}

// start starts a saga through the API and returns its id.
func (e *env) start(key string) uuid.UUID {
	e.t.Helper()
	code, out := e.do("POST", "/sagas", startBody(key))
	if code != http.StatusCreated {
		e.t.Fatalf("POST /sagas %s: %d %v", key, code, out)
	}
	id, err := uuid.Parse(fmt.Sprint(out["id"]))
	if err != nil {
		e.t.Fatalf("POST /sagas answered id %v: %v", out["id"], err)
	}
	return id
}

// reply applies the answer of the active step's latest command, as the
// reply consumer does in its inbox transaction.
func (e *env) reply(id uuid.UUID, outcome message.Outcome, reason string) saga.Instance {
	e.t.Helper()
	ctx := context.Background()
	in, _, err := e.eng.Get(ctx, id)
	if err != nil {
		e.t.Fatal(err)
	}
	st := in.Steps[in.Cursor]
	r := message.Reply{
		MessageID: uuid.New(), InReplyTo: st.AwaitID, SagaID: id, Step: st.Name,
		Action: message.Forward, Outcome: outcome, Reason: reason,
	}
	if outcome == message.Success {
		r.Payload = json.RawMessage(`{}`)
	}
	err = pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error { return e.eng.ApplyReply(ctx, tx, r) })
	if err != nil {
		e.t.Fatalf("apply %s reply for %s: %v", outcome, st.Name, err)
	}
	in, _, err = e.eng.Get(ctx, id)
	if err != nil {
		e.t.Fatal(err)
	}
	return in
}

func wantError(t *testing.T, what string, code int, out map[string]any, wantCode int, wantField string) {
	t.Helper()
	if code != wantCode {
		t.Errorf("%s: status %d, want %d (%v)", what, code, wantCode, out)
	}
	if msg, _ := out["error"].(string); msg == "" {
		t.Errorf("%s: no error message in %v", what, out)
	}
	if wantField != "" && out["field"] != wantField {
		t.Errorf("%s: field %v, want %q (%v)", what, out["field"], wantField, out)
	}
}

func TestStartIsIdempotent(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	code, first := e.do("POST", "/sagas", startBody("order-1"))
	if code != http.StatusCreated || first["created"] != true || first["state"] != "running" {
		t.Fatalf("first POST: %d %v, want 201 created running", code, first)
	}
	code, second := e.do("POST", "/sagas", startBody("order-1"))
	if code != http.StatusOK || second["created"] != false {
		t.Fatalf("second POST with the same key: %d %v, want 200 created=false", code, second)
	}
	if first["id"] == nil || first["id"] != second["id"] {
		t.Fatalf("same key gave ids %v and %v", first["id"], second["id"])
	}
	code, other := e.do("POST", "/sagas", startBody("order-2"))
	if code != http.StatusCreated || other["id"] == first["id"] {
		t.Fatalf("another key: %d %v, want 201 with a new id", code, other)
	}
}

func TestStartRejectsBadRequests(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	good := func(mut func(m map[string]any)) map[string]any {
		b := startBody("order-x")
		mut(b)
		return b
	}
	badOrder := order("order-x")
	badOrder.Qty = 0
	cases := []struct {
		name  string
		body  any
		field string
	}{
		{"malformed JSON", `{"type": "place-order",`, ""},
		{"not JSON at all", `hello`, ""},
		{"unknown field", good(func(m map[string]any) { m["colour"] = "blue" }), "colour"},
		{"wrong type", good(func(m map[string]any) { m["type"] = 42 }), "type"},
		{"wrong type of key", good(func(m map[string]any) { m["idempotency_key"] = []int{1} }), "idempotency_key"},
		{"missing type", good(func(m map[string]any) { delete(m, "type") }), "type"},
		{"missing idempotency_key", good(func(m map[string]any) { delete(m, "idempotency_key") }), "idempotency_key"},
		{"missing aggregate_id", good(func(m map[string]any) { delete(m, "aggregate_id") }), "aggregate_id"},
		{"missing data", good(func(m map[string]any) { delete(m, "data") }), "data"},
		{"data an array", good(func(m map[string]any) { m["data"] = []int{1, 2} }), "data"},
		{"data a string", good(func(m map[string]any) { m["data"] = "order" }), "data"},
		{"unknown saga type", good(func(m map[string]any) { m["type"] = "refund-order" }), "type"},
		{"invalid order data", good(func(m map[string]any) { m["data"] = badOrder }), "data"},
	}
	for _, c := range cases {
		code, out := e.do("POST", "/sagas", c.body)
		wantError(t, c.name, code, out, http.StatusBadRequest, c.field)
	}
	// The invalid order's message says what is wrong with it.
	_, out := e.do("POST", "/sagas", good(func(m map[string]any) { m["data"] = badOrder }))
	if msg, _ := out["error"].(string); !strings.Contains(msg, "qty") {
		t.Errorf("invalid order error %q does not name qty", msg)
	}
	// Nothing was started by any of these.
	p, err := e.eng.List(context.Background(), orchestrator.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Sagas) != 0 {
		t.Fatalf("%d sagas exist after only bad requests", len(p.Sagas))
	}
}

func TestGetShowsStateStepsAndJournal(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	id := e.start("order-get")
	e.reply(id, message.Success, "")

	code, out := e.do("GET", "/sagas/"+id.String(), nil)
	if code != http.StatusOK {
		t.Fatalf("GET: %d %v", code, out)
	}
	if out["id"] != id.String() || out["state"] != "running" || out["type"] != orderapi.SagaType {
		t.Errorf("GET: id/state/type = %v/%v/%v", out["id"], out["state"], out["type"])
	}
	if out["current_step"] != orderapi.StepLockCoupon {
		t.Errorf("current_step %v, want %s", out["current_step"], orderapi.StepLockCoupon)
	}
	data, _ := out["data"].(map[string]any)
	if data["order_id"] != "order-get" || data["sku"] != "sku-apple" {
		t.Errorf("data %v does not hold the order", data)
	}
	stepsOut, _ := out["steps"].([]any)
	want := []struct{ name, kind, state, participant string }{
		{orderapi.StepReserveInventory, "compensable", "succeeded", orderapi.Inventory},
		{orderapi.StepLockCoupon, "compensable", "running", orderapi.Coupon},
		{orderapi.StepChargePayment, "pivot", "pending", orderapi.Payment},
		{orderapi.StepCreateShipment, "retryable", "pending", orderapi.Shipping},
		{orderapi.StepAwardPoints, "retryable", "pending", orderapi.Points},
		{orderapi.StepConfirmStock, "retryable", "pending", orderapi.Inventory},
	}
	if len(stepsOut) != len(want) {
		t.Fatalf("%d steps, want %d: %v", len(stepsOut), len(want), stepsOut)
	}
	for i, w := range want {
		s, _ := stepsOut[i].(map[string]any)
		if s["name"] != w.name || s["kind"] != w.kind || s["state"] != w.state || s["participant"] != w.participant {
			t.Errorf("step %d = %v, want %+v", i, s, w)
		}
		if _, ok := s["attempts"].(float64); !ok {
			t.Errorf("step %d has no numeric attempts: %v", i, s)
		}
	}
	if a := stepsOut[0].(map[string]any)["attempts"]; a != float64(1) {
		t.Errorf("reserve-inventory attempts %v, want 1", a)
	}
	journal, _ := out["journal"].([]any)
	if len(journal) < 2 {
		t.Fatalf("journal has %d entries, want the start and the reply: %v", len(journal), journal)
	}
	sawReply := false
	for _, j := range journal {
		m, _ := j.(map[string]any)
		if m["saga_id"] != id.String() || m["event"] == "" || m["at"] == nil {
			t.Errorf("journal entry %v lacks saga_id, event or at", m)
		}
		if m["step"] == orderapi.StepReserveInventory && m["message_id"] != nil {
			sawReply = true
		}
	}
	if !sawReply {
		t.Errorf("journal %v has no entry for the reserve-inventory reply", journal)
	}

	code, out = e.do("GET", "/sagas/"+uuid.NewString(), nil)
	wantError(t, "unknown id", code, out, http.StatusNotFound, "id")
	code, out = e.do("GET", "/sagas/not-a-uuid", nil)
	wantError(t, "bad uuid", code, out, http.StatusBadRequest, "id")
}

func TestListFiltersAndPaginates(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	ids := map[string]bool{}
	for i := range 5 {
		ids[e.start(fmt.Sprintf("order-list-%d", i)).String()] = true
	}
	// Take one saga out of "running": a business failure on its first step
	// compensates it (nothing to undo, so it ends at once).
	var compensated uuid.UUID
	for s := range ids {
		compensated = uuid.MustParse(s)
		break
	}
	if in := e.reply(compensated, message.Failure, orderapi.ReasonInsufficientStock); in.State != saga.Compensated {
		t.Fatalf("saga after a failed first step is %s, want compensated", in.State)
	}

	code, out := e.do("GET", "/sagas?state=running", nil)
	if code != http.StatusOK {
		t.Fatalf("list running: %d %v", code, out)
	}
	running, _ := out["sagas"].([]any)
	if len(running) != 4 {
		t.Fatalf("state=running listed %d sagas, want 4", len(running))
	}
	for _, s := range running {
		m := s.(map[string]any)
		if m["state"] != "running" || !ids[fmt.Sprint(m["id"])] || m["id"] == compensated.String() {
			t.Errorf("state=running listed %v %v", m["id"], m["state"])
		}
	}
	code, out = e.do("GET", "/sagas?state=compensated", nil)
	if list, _ := out["sagas"].([]any); code != http.StatusOK || len(list) != 1 || list[0].(map[string]any)["id"] != compensated.String() {
		t.Fatalf("state=compensated: %d %v", code, out)
	}

	code, out = e.do("GET", "/sagas?state=sleeping", nil)
	wantError(t, "bad state", code, out, http.StatusBadRequest, "state")
	code, out = e.do("GET", "/sagas?limit=0", nil)
	wantError(t, "bad limit", code, out, http.StatusBadRequest, "limit")
	code, out = e.do("GET", "/sagas?cursor=%21%21", nil)
	wantError(t, "bad cursor", code, out, http.StatusBadRequest, "cursor")

	seen := map[string]int{}
	path := "/sagas?limit=2"
	pages := 0
	for {
		code, out := e.do("GET", path, nil)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d %v", path, code, out)
		}
		pages++
		list, _ := out["sagas"].([]any)
		if len(list) > 2 {
			t.Fatalf("page %d has %d sagas, limit 2", pages, len(list))
		}
		for _, s := range list {
			seen[fmt.Sprint(s.(map[string]any)["id"])]++
		}
		next, _ := out["next"].(string)
		if next == "" {
			break
		}
		if pages > 5 {
			t.Fatal("pagination does not end")
		}
		path = "/sagas?limit=2&cursor=" + next
	}
	if pages != 3 {
		t.Errorf("5 sagas at limit 2 took %d pages, want 3", pages)
	}
	if len(seen) != 5 {
		t.Errorf("pagination saw %d distinct sagas, want 5: %v", len(seen), seen)
	}
	for id, n := range seen {
		if n != 1 || !ids[id] {
			t.Errorf("saga %s seen %d times (known: %v)", id, n, ids[id])
		}
	}
}

func TestOperatorActions(t *testing.T) {
	t.Parallel()
	e := setup(t, adminToken)
	bearer := func(tok string) []string { return []string{"Authorization", "Bearer " + tok} }
	act := map[string]any{"actor": "alice", "reason": "customer called"}

	// Past the pivot: reserve and lock succeeded, the charge is sent.
	id := e.start("order-op")
	e.reply(id, message.Success, "")
	if in := e.reply(id, message.Success, ""); in.CurrentStep() != orderapi.StepChargePayment {
		t.Fatalf("active step %q, want the pivot", in.CurrentStep())
	}

	code, out := e.do("POST", "/sagas/"+id.String()+"/actions/compensate", act)
	wantError(t, "no token", code, out, http.StatusUnauthorized, "")
	code, out = e.do("POST", "/sagas/"+id.String()+"/actions/compensate", act, bearer("wrong")...)
	wantError(t, "wrong token", code, out, http.StatusUnauthorized, "")
	code, out = e.do("POST", "/sagas/"+id.String()+"/actions/compensate", act, bearer(adminToken)...)
	wantError(t, "compensate after the pivot", code, out, http.StatusConflict, "action")
	if msg, _ := out["error"].(string); !strings.Contains(msg, "pivot") {
		t.Errorf("refusal %q does not say why (the pivot)", msg)
	}
	code, out = e.do("POST", "/sagas/"+id.String()+"/actions/resolve", map[string]any{"actor": "alice", "reason": "r", "outcome": "completed"}, bearer(adminToken)...)
	wantError(t, "resolve a running saga", code, out, http.StatusConflict, "action")
	code, out = e.do("POST", "/sagas/"+id.String()+"/actions/retry", map[string]any{"reason": "r"}, bearer(adminToken)...)
	wantError(t, "missing actor", code, out, http.StatusBadRequest, "actor")
	code, out = e.do("POST", "/sagas/"+uuid.NewString()+"/actions/retry", act, bearer(adminToken)...)
	wantError(t, "unknown saga", code, out, http.StatusNotFound, "id")

	// The charge succeeds, then shipping answers a business failure: after
	// the pivot that is a definition error and the saga needs an operator.
	e.reply(id, message.Success, "")
	if in := e.reply(id, message.Failure, "address unknown"); in.State != saga.Failed {
		t.Fatalf("saga after a post-pivot failure is %s, want failed", in.State)
	}
	resolve := map[string]any{"actor": "bob", "reason": "shipped by hand, ticket 42", "outcome": "completed"}
	code, out = e.do("POST", "/sagas/"+id.String()+"/actions/resolve", resolve, bearer(adminToken)...)
	if code != http.StatusOK || out["state"] != "completed" {
		t.Fatalf("resolve failed saga: %d %v, want 200 completed", code, out)
	}
	found := false
	for _, j := range out["journal"].([]any) {
		m := j.(map[string]any)
		if m["actor"] == "bob" && m["reason"] == "shipped by hand, ticket 42" && m["from"] == "failed" && m["to"] == "completed" {
			found = true
		}
	}
	if !found {
		t.Errorf("journal %v has no entry with the operator's actor and reason", out["journal"])
	}
	code, out = e.do("GET", "/sagas/"+id.String(), nil)
	if code != http.StatusOK || out["state"] != "completed" {
		t.Fatalf("GET after resolve: %d %v", code, out["state"])
	}
}

func TestOperatorActionsDisabledWithoutToken(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	id := e.start("order-noop")
	code, out := e.do("POST", "/sagas/"+id.String()+"/actions/compensate", map[string]any{"actor": "a", "reason": "r"},
		"Authorization", "Bearer anything")
	wantError(t, "operator action without configured token", code, out, http.StatusForbidden, "")
	in, _, err := e.eng.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if in.State != saga.Running {
		t.Fatalf("refused action changed the saga to %s", in.State)
	}
}

// newAPI is api.New for a config the test expects to be accepted.
func newAPI(tb testing.TB, eng api.Engine, cfg *api.Config) *api.Server {
	tb.Helper()
	s, err := api.New(eng, cfg)
	if err != nil {
		tb.Fatalf("api.New: %v", err)
	}
	return s
}
