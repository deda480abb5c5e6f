package api_test

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/saga"
)

func TestReconcileEndpoints(t *testing.T) {
	t.Parallel()
	e := setup(t, adminToken)
	admin := []string{"Authorization", "Bearer " + adminToken}
	// A saga failed after its pivot: a business failure of create-shipment.
	id := e.start("rec-1")
	for range 3 {
		e.reply(id, message.Success, "")
	}
	if in := e.reply(id, message.Failure, "no carrier"); in.State != saga.Failed {
		t.Fatalf("saga is %s, want failed", in.State)
	}
	if code, out := e.do("POST", "/reconcile/run", map[string]any{"dry_run": true}); code != http.StatusUnauthorized && code != http.StatusForbidden {
		t.Fatalf("run without the admin token: %d %v", code, out)
	}
	code, out := e.do("POST", "/reconcile/run", map[string]any{"since": "nonsense"}, admin...)
	wantError(t, "bad since", code, out, http.StatusBadRequest, "since")
	code, out = e.do("POST", "/reconcile/run", map[string]any{}, admin...)
	if code != http.StatusOK || out["differences"] != float64(1) {
		t.Fatalf("run: %d %v, want 200 with 1 difference", code, out)
	}
	code, out = e.do("GET", "/reconcile", nil)
	open, _ := out["open"].([]any)
	if code != http.StatusOK || len(open) != 1 || out["last_run_at"] == nil {
		t.Fatalf("GET /reconcile: %d %v, want the one open discrepancy and a last run", code, out)
	}
	d := open[0].(map[string]any)
	if d["kind"] != string(orchestrator.KindFailed) || d["saga_id"] != id.String() || d["step"] != "create-shipment" {
		t.Fatalf("discrepancy %v", d)
	}
	path := fmt.Sprintf("/reconcile/discrepancies/%v/resolve", d["id"])
	code, out = e.do("POST", path, map[string]any{"actor": "dana"}, admin...)
	wantError(t, "resolve without reason", code, out, http.StatusBadRequest, "reason")
	if code, out = e.do("POST", path, map[string]any{"actor": "dana", "reason": "shipped by hand"}, admin...); code != http.StatusOK {
		t.Fatalf("resolve: %d %v", code, out)
	}
	code, out = e.do("POST", path, map[string]any{"actor": "dana", "reason": "again"}, admin...)
	wantError(t, "resolve twice", code, out, http.StatusNotFound, "id")
	if _, out = e.do("GET", "/reconcile", nil); len(out["open"].([]any)) != 0 {
		t.Fatalf("still open after the resolve: %v", out)
	}
	// A resolved discrepancy of a saga that has not moved is not reopened.
	if code, out = e.do("POST", "/reconcile/run", map[string]any{}, admin...); code != http.StatusOK || out["differences"] != float64(0) {
		t.Fatalf("run after the resolve: %d %v, want no difference", code, out)
	}
}

func TestOperatorQueryAction(t *testing.T) {
	t.Parallel()
	e := setup(t, adminToken)
	admin := []string{"Authorization", "Bearer " + adminToken}
	id := e.start("q-1")
	code, out := e.do("POST", "/sagas/"+id.String()+"/actions/query", map[string]any{"actor": "erin", "reason": "inventory says it reserved"}, admin...)
	if code != http.StatusOK {
		t.Fatalf("query action: %d %v", code, out)
	}
	in, _, err := e.eng.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if st := in.Steps[0]; st.State != saga.StepQuerying || st.QueryAttempts != 1 {
		t.Fatalf("step %+v, want querying after 1 query", st)
	}
	code, out = e.do("POST", "/sagas/"+id.String()+"/actions/check", map[string]any{"actor": "erin", "reason": "x"}, admin...)
	wantError(t, "check of a running saga", code, out, http.StatusConflict, "action")
	code, out = e.do("POST", "/sagas/"+id.String()+"/actions/peek", map[string]any{"actor": "erin", "reason": "x"}, admin...)
	wantError(t, "unknown action", code, out, http.StatusNotFound, "action")
}

func TestReconcilePage(t *testing.T) {
	t.Parallel()
	e := setup(t, adminToken)
	id := e.start("rec-page")
	for range 3 {
		e.reply(id, message.Success, "")
	}
	e.reply(id, message.Failure, "no carrier")
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	page := func(method, path string, form url.Values) (int, string, string) {
		t.Helper()
		var res *http.Response
		var err error
		if method == "GET" {
			res, err = noRedirect.Get(e.srv.URL + path)
		} else {
			res, err = noRedirect.PostForm(e.srv.URL+path, form)
		}
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, res.Header.Get("Location"), string(b)
	}
	if code, _, body := page("GET", "/ui/reconcile", nil); code != 200 || !strings.Contains(body, "Nothing open.") || !strings.Contains(body, "never") {
		t.Fatalf("GET /ui/reconcile before a run = %d:\n%s", code, body)
	}
	if code, _, body := page("POST", "/ui/reconcile/run", url.Values{"token": {"wrong"}}); code != 401 || !strings.Contains(body, "Nothing was changed") {
		t.Fatalf("run with a wrong token = %d:\n%s", code, body)
	}
	code, _, body := page("POST", "/ui/reconcile/run", url.Values{"token": {adminToken}})
	if code != 200 || !strings.Contains(body, "Reconciled: 1 differences") || !strings.Contains(body, id.String()) || !strings.Contains(body, string(orchestrator.KindFailed)) {
		t.Fatalf("run = %d:\n%s", code, body)
	}
	open, err := e.eng.OpenDiscrepancies(t.Context(), 10)
	if err != nil || len(open) != 1 {
		t.Fatalf("open %v %v", open, err)
	}
	path := fmt.Sprintf("/ui/reconcile/%d/resolve", open[0].ID)
	if code, _, body := page("POST", path, url.Values{"token": {adminToken}, "actor": {"dana"}}); code != 400 || !strings.Contains(body, "reason") {
		t.Fatalf("resolve without reason = %d:\n%s", code, body)
	}
	if code, loc, _ := page("POST", path, url.Values{"token": {adminToken}, "actor": {"dana"}, "reason": {"shipped by hand"}}); code != 303 || loc != "/ui/reconcile?done=resolve" {
		t.Fatalf("resolve = %d %q", code, loc)
	}
	if code, _, body := page("GET", "/ui/reconcile?done=resolve", nil); code != 200 || !strings.Contains(body, "Nothing open.") || !strings.Contains(body, "Discrepancy resolved") {
		t.Fatalf("after resolve = %d:\n%s", code, body)
	}
}
