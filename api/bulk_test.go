package api_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/sagaflow/sagaflow/api"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/saga"
)

// The filter action over HTTP: a dry run lists what it would touch and
// changes nothing; the real run touches each saga, journaled with actor
// and reason; without the admin token nothing happens. The status page's
// form does the same and lists the sagas.
func TestFilterActionDryRunThenApply(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t, nil)
	a, b := e.start(t, "bulk-a"), e.start(t, "bulk-b")
	body := `{"filter":{"state":"running","type":"place-order"},"actor":"carol","reason":"provider outage over","dry_run":true}`
	st, out := e.do(t, http.MethodPost, "/sagas/actions/retry", opsToken, body)
	var res orchestrator.BulkResult
	if err := json.Unmarshal([]byte(out), &res); err != nil || st != http.StatusOK {
		t.Fatalf("dry run = %d %s (%v)", st, out, err)
	}
	if !res.DryRun || res.Matched != 2 || res.Counts.WouldApply != 2 {
		t.Fatalf("dry run = %+v, want 2 would_apply", res)
	}
	journaled := func() int {
		var n int
		if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM orch.journal WHERE actor = 'carol' AND reason = 'provider outage over' AND saga_id = ANY($1)`,
			[]string{a.String(), b.String()}).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := journaled(); n != 0 {
		t.Fatalf("the dry run journaled %d actions", n)
	}
	if st, _ := e.do(t, http.MethodPost, "/sagas/actions/retry", "", strings.Replace(body, `"dry_run":true`, `"dry_run":false`, 1)); st != http.StatusUnauthorized {
		t.Fatalf("without the token: %d, want 401", st)
	}
	st, out = e.do(t, http.MethodPost, "/sagas/actions/retry", opsToken, strings.Replace(body, `"dry_run":true`, `"dry_run":false`, 1))
	if err := json.Unmarshal([]byte(out), &res); err != nil || st != http.StatusOK || res.Counts.Applied != 2 {
		t.Fatalf("apply = %d %s", st, out)
	}
	if n := journaled(); n != 2 {
		t.Fatalf("%d journal entries with the actor and reason, want 2", n)
	}

	form := url.Values{"action": {"compensate"}, "state": {"running"}, "actor": {"dave"}, "reason": {"recall"}, "token": {opsToken}, "dry_run": {"true"}}
	st, page := e.postForm(t, "/ui/sagas/actions", form)
	if st != http.StatusOK || !strings.Contains(page, a.String()) || !strings.Contains(page, b.String()) ||
		!strings.Contains(page, "Dry run: nothing was changed") || !strings.Contains(page, `id="apply"`) {
		t.Fatalf("page dry run = %d:\n%s", st, page)
	}
	form.Set("token", "wrong")
	if st, page := e.postForm(t, "/ui/sagas/actions", form); st != http.StatusUnauthorized || !strings.Contains(page, "Nothing was changed") {
		t.Fatalf("page with a wrong token = %d:\n%s", st, page)
	}
	form.Set("token", opsToken)
	form.Set("dry_run", "false")
	if st, page := e.postForm(t, "/ui/sagas/actions", form); st != http.StatusOK || !strings.Contains(page, "2 of 2 sagas touched") {
		t.Fatalf("page apply = %d:\n%s", st, page)
	}
	for _, id := range []string{a.String(), b.String()} {
		var v api.SagaView
		e.getJSON(t, "/sagas/"+id, &v)
		if v.State != saga.Compensating && v.State != saga.Compensated {
			t.Errorf("saga %s is %s after the page's compensate, want compensating", id, v.State)
		}
	}
}

func (e *opsEnv) postForm(t *testing.T, path string, form url.Values) (int, string) {
	t.Helper()
	res, err := e.srv.Client().PostForm(e.srv.URL+path, form)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, string(b)
}
