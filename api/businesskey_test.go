package api_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sagaflow/sagaflow/api"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

// GET /sagas?aggregate_id=X finds exactly the sagas of X, ?idempotency_key=
// the one started with that key; the status page has the search box.
func TestFindSagasByBusinessKey(t *testing.T) {
	t.Parallel()
	e := setup(t, adminToken)
	a1 := e.start("order-a-1")
	e.start("order-b")
	code, out := e.do("GET", "/sagas?aggregate_id=order-a-1", nil)
	sagas, _ := out["sagas"].([]any)
	if code != 200 || len(sagas) != 1 || sagas[0].(map[string]any)["id"] != a1.String() {
		t.Fatalf("GET /sagas?aggregate_id=order-a-1 = %d %v; want exactly saga %s", code, out, a1)
	}
	code, out = e.do("GET", "/sagas?idempotency_key=order-b&aggregate_id=order-a-1", nil)
	if sagas, _ := out["sagas"].([]any); code != 200 || len(sagas) != 0 {
		t.Fatalf("key of one saga and aggregate of another = %d %v; want none", code, out)
	}
	code, out = e.do("GET", "/sagas?idempotency_key=order-a-1", nil)
	if sagas, _ := out["sagas"].([]any); code != 200 || len(sagas) != 1 {
		t.Fatalf("GET /sagas?idempotency_key=order-a-1 = %d %v; want one saga", code, out)
	}
	res, err := http.Get(e.srv.URL + "/ui/sagas?aggregate_id=order-a-1")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	page := string(b)
	if res.StatusCode != 200 || !strings.Contains(page, `name="aggregate_id"`) || !strings.Contains(page, a1.String()) || strings.Count(page, `<tr data-id=`) != 1 {
		t.Fatalf("page search = %d:\n%s", res.StatusCode, page)
	}
}

// With orchestrator.single_live_types, a start with a fresh idempotency key
// for an aggregate that has a live saga answers 409 with that saga's id.
func TestStartRefusedWhileTheAggregateHasALiveSaga(t *testing.T) {
	t.Parallel()
	e := setup(t, adminToken)
	eng, err := orchestrator.NewEngine(e.pool, e.eng.Registry(), &orchestrator.EngineConfig{Schema: "orch", SingleLiveTypes: []string{orderapi.SagaType}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := api.New(eng, &api.Config{AdminToken: adminToken})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	e.srv = srv
	first := e.start("order-9")
	retry := startBody("order-9")
	retry["idempotency_key"] = "order-9-retry"
	code, out := e.do("POST", "/sagas", retry)
	if code != http.StatusConflict || out["saga_id"] != first.String() || out["field"] != "aggregate_id" {
		t.Fatalf("start with a fresh key = %d %v; want 409 naming %s", code, out, first)
	}
	code, out = e.do("POST", "/sagas", startBody("order-9"))
	if code != http.StatusOK || out["id"] != first.String() {
		t.Fatalf("start with the first key = %d %v; want 200 with the first saga", code, out)
	}
}
