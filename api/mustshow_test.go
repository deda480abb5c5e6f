package api_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sagaflow/sagaflow/api"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

// TestFailedSagaFoundAndResolvedByOperator is the operator story end to
// end: a saga fails after its pivot (the shipment is refused), GET
// /sagas?stuck=true and the status page find it, refused actions leave no
// trace but their 4xx answer, and resolve with the bearer token settles it
// with a journal row that says who, when and why.
func TestFailedSagaFoundAndResolvedByOperator(t *testing.T) {
	t.Parallel()
	env := newOpsEnv(t, nil)
	ok := env.start(t, "order-fine")
	env.drive(t, ok, nil)
	id := env.start(t, "order-bad-address")
	if in := env.drive(t, id, map[string]answer{orderapi.StepCreateShipment + "/forward": {message.Failure, "carrier refused: address unknown"}}); in.State != saga.Failed {
		t.Fatalf("saga ended %s, want failed", in.State)
	}

	// found by the API and by the page
	var stuck listAnswer
	env.getJSON(t, "/sagas?stuck=true", &stuck)
	if got := ids(stuck); len(got) != 1 || got[0] != id {
		t.Fatalf("GET /sagas?stuck=true = %v; want only %s", got, id)
	}
	st, page := env.do(t, http.MethodGet, "/ui/sagas?stuck=true", "", "")
	if st != http.StatusOK || !strings.Contains(page, id.String()) || strings.Contains(page, ok.String()) {
		t.Fatalf("the stuck page (%d) does not list the failed saga alone", st)
	}

	// refused actions: 4xx and nothing written
	before := journalOf(t, env, id)
	beforeOK := journalOf(t, env, ok)
	good := `{"actor": "alice@ops", "reason": "shipment booked by phone, ticket OPS-42", "outcome": "completed"}`
	refused := []struct {
		path, token, body string
		status            int
		says              string
	}{
		{"/sagas/" + id.String() + "/actions/resolve", "", good, http.StatusUnauthorized, "bearer token"},
		{"/sagas/" + id.String() + "/actions/resolve", "not-the-token", good, http.StatusUnauthorized, "bearer token"},
		{"/sagas/" + id.String() + "/actions/compensate", opsToken, good, http.StatusConflict, "only a running saga can be compensated"},
		{"/sagas/" + id.String() + "/actions/retry", opsToken, good, http.StatusConflict, "the saga is failed"},
		{"/sagas/" + id.String() + "/actions/resolve", opsToken, `{"actor": "alice@ops", "reason": "r", "outcome": "running"}`, http.StatusBadRequest, "outcome must be completed or compensated"},
		{"/sagas/" + id.String() + "/actions/resolve", opsToken, `{"actor": "alice@ops", "outcome": "completed"}`, http.StatusBadRequest, "reason is required"},
		{"/sagas/" + id.String() + "/actions/resolve", opsToken, `{"reason": "r", "outcome": "completed"}`, http.StatusBadRequest, "actor is required"},
		{"/sagas/" + id.String() + "/actions/undo", opsToken, good, http.StatusNotFound, "unknown action"},
		{"/sagas/" + ok.String() + "/actions/resolve", opsToken, good, http.StatusConflict, "only a failed saga can be resolved"},
	}
	for _, r := range refused {
		st, body := env.do(t, http.MethodPost, r.path, r.token, r.body)
		if st != r.status || !strings.Contains(body, r.says) {
			t.Errorf("POST %s (token %q) = %d %s; want %d saying %q", r.path, r.token, st, body, r.status, r.says)
		}
	}
	if after := journalOf(t, env, id); after != before {
		t.Fatalf("refused actions left a trace on the failed saga:\nbefore %s\nafter  %s", before, after)
	}
	if after := journalOf(t, env, ok); after != beforeOK {
		t.Fatalf("a refused action left a trace on the completed saga")
	}

	// resolve with the token
	t0 := time.Now()
	st, body := env.do(t, http.MethodPost, "/sagas/"+id.String()+"/actions/resolve", opsToken, good)
	t1 := time.Now()
	if st != http.StatusOK {
		t.Fatalf("resolve = %d %s", st, body)
	}
	var v api.SagaView
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatal(err)
	}
	if v.State != saga.Completed || v.FinishedAt == nil || v.Flag != "" {
		t.Fatalf("after resolve: state %s finished %v flag %q; want completed", v.State, v.FinishedAt, v.Flag)
	}
	last := v.Journal[len(v.Journal)-1]
	if last.Event != saga.JournalOperator+string(saga.ActionResolve) || last.Actor != "alice@ops" || last.Reason != "shipment booked by phone, ticket OPS-42" ||
		last.From != saga.Failed || last.To != saga.Completed || last.At.Before(t0.Add(-time.Second)) || last.At.After(t1.Add(time.Second)) {
		t.Fatalf("journal's last row = %+v; want operator resolve by alice@ops, why, failed -> completed, at the time of the call", last)
	}
	var fresh api.SagaView
	env.getJSON(t, "/sagas/"+id.String(), &fresh)
	if !slices.EqualFunc(fresh.Journal, v.Journal, func(a, b saga.JournalEntry) bool { return a.ID == b.ID && a.Actor == b.Actor }) {
		t.Fatalf("GET after resolve shows another journal than the action's answer")
	}
	stuck = listAnswer{}
	env.getJSON(t, "/sagas?stuck=true", &stuck)
	if len(stuck.Sagas) != 0 {
		t.Fatalf("the resolved saga is still listed as stuck: %v", ids(stuck))
	}
	// and the page shows who and why
	st, page = env.do(t, http.MethodGet, "/ui/sagas/"+id.String(), "", "")
	if text := visible(page); st != http.StatusOK || !strings.Contains(text, "operator resolve") || !strings.Contains(text, "alice@ops") || !strings.Contains(text, "ticket OPS-42") {
		t.Fatalf("the saga page (%d) does not show the operator's journal row", st)
	}
}

// TestProtectedReadsNeedTheToken covers http.protect_reads for the JSON
// endpoints and the page's token form.
func TestProtectedReadsNeedTheToken(t *testing.T) {
	t.Parallel()
	env := newOpsEnv(t, &api.Config{AdminToken: opsToken, ProtectReads: true})
	id := env.start(t, "order-1")
	for _, p := range []string{"/sagas", "/sagas/" + id.String(), "/stats"} {
		if st, _ := env.do(t, http.MethodGet, p, "", ""); st != http.StatusUnauthorized {
			t.Errorf("GET %s without token = %d, want 401", p, st)
		}
		if st, body := env.do(t, http.MethodGet, p, opsToken, ""); st != http.StatusOK {
			t.Errorf("GET %s with token = %d %s", p, st, body)
		}
	}
	st, page := env.do(t, http.MethodGet, "/ui/sagas", "", "")
	if st != http.StatusUnauthorized || !strings.Contains(page, "Token required") || strings.Contains(page, id.String()) {
		t.Fatalf("protected page without token = %d; want the token form and no saga", st)
	}
	jar := env.srv.Client()
	res, err := jar.PostForm(env.srv.URL+"/ui/login", map[string][]string{"token": {opsToken}, "back": {"/ui/sagas/" + id.String()}})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	// the client has no cookie jar: send the cookie the login set
	var cookie *http.Cookie
	for _, c := range res.Request.Response.Cookies() {
		cookie = c
	}
	if cookie == nil || !cookie.HttpOnly {
		t.Fatalf("login set no HttpOnly cookie")
	}
	req, _ := http.NewRequest(http.MethodGet, env.srv.URL+"/ui/sagas/"+id.String(), nil)
	req.AddCookie(cookie)
	res, err = jar.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("page with the login cookie = %d, want 200", res.StatusCode)
	}
}
