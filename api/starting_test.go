package api_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sagaflow/sagaflow/api"
	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/migrations"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps"
)

// TestStartWhilePreparingAnswers503: a start (or a read, a page, an
// operator action) sent while serve is still preparing its schema and
// topics answers 503 "starting" with Retry-After, which a client can act
// on, not a 500 "internal error"; /healthz and /readyz answer as before;
// once prepared the same start is taken.
func TestStartWhilePreparingAnswers503(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t) // no schema yet: as serve before its migrations
	reg := saga.NewRegistry()
	if err := steps.Register(reg); err != nil {
		t.Fatal(err)
	}
	eng, err := orchestrator.NewEngine(pool, reg, &orchestrator.EngineConfig{Schema: "orch"})
	if err != nil {
		t.Fatal(err)
	}
	var prepared atomic.Bool
	srv := httptest.NewServer(newAPI(t, eng, &api.Config{Prepared: prepared.Load}))
	t.Cleanup(srv.Close)
	e := &env{t: t, pool: pool, eng: eng, srv: srv}

	for _, c := range []struct {
		method, path string
		body         any
	}{
		{"POST", "/sagas", startBody("starting-1")},
		{"GET", "/sagas", nil},
		{"GET", "/stats", nil},
	} {
		status, body := e.do(c.method, c.path, c.body)
		if status != http.StatusServiceUnavailable || !strings.Contains(body["error"].(string), "starting") {
			t.Errorf("%s %s while preparing: %d %v, want 503 starting", c.method, c.path, status, body)
		}
	}
	resp, err := http.Post(srv.URL+"/sagas", "application/json", strings.NewReader(`{"type":"place-order"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "2" {
		t.Errorf("POST /sagas while preparing: %d Retry-After %q, want 503 with Retry-After 2", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	page, err := http.Get(srv.URL + "/ui/")
	if err != nil {
		t.Fatal(err)
	}
	page.Body.Close()
	if page.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("GET /ui/ while preparing: %d, want 503", page.StatusCode)
	}
	if status, _ := e.do("GET", "/healthz", nil); status != http.StatusOK {
		t.Errorf("/healthz while preparing: %d, want 200", status)
	}

	testkit.Migrate(t, pool, testkit.MustSets(t)(migrations.Orchestrator("orch")))
	prepared.Store(true)
	if status, body := e.do("POST", "/sagas", startBody("starting-1")); status != http.StatusCreated {
		t.Fatalf("POST /sagas once prepared: %d %v, want 201", status, body)
	}
}
