package api_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sagaflow/sagaflow/api"
	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/migrations"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

// setupFourEyes is setup with four eyes on force-fail and resolve of
// place-order, and an engine clock the test moves (skew).
func setupFourEyes(t *testing.T) (*env, *atomic.Int64) {
	t.Helper()
	return setupFourEyesWith(t, &api.Config{AdminToken: adminToken})
}

// setupFourEyesWith is setupFourEyes with the API configured by cfg.
func setupFourEyesWith(t *testing.T, cfg *api.Config) (*env, *atomic.Int64) {
	t.Helper()
	pool := testkit.Pool(t)
	testkit.Migrate(t, pool, testkit.MustSets(t)(migrations.Orchestrator("orch")))
	reg := saga.NewRegistry()
	if err := steps.Register(reg); err != nil {
		t.Fatal(err)
	}
	var skew atomic.Int64
	eng, err := orchestrator.NewEngine(pool, reg, &orchestrator.EngineConfig{Schema: "orch",
		FourEyes: orchestrator.FourEyes{orderapi.SagaType: {saga.ActionForceFail, saga.ActionResolve}},
		Now:      func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(newAPI(t, eng, cfg))
	t.Cleanup(srv.Close)
	return &env{t: t, pool: pool, eng: eng, srv: srv}, &skew
}

func TestFourEyesOverHTTP(t *testing.T) {
	t.Parallel()
	e, skew := setupFourEyes(t)
	auth := []string{"Authorization", "Bearer " + adminToken}
	id := e.start("o-four-eyes")
	state := func() string {
		t.Helper()
		_, out := e.do("GET", "/sagas/"+id.String(), nil)
		return fmt.Sprint(out["state"])
	}

	// One actor's request is a proposal: 202, the saga unchanged.
	code, out := e.do("POST", "/sagas/"+id.String()+"/actions/force-fail", map[string]any{"actor": "alice", "reason": "carrier outage", "ticket": "INC-1"}, auth...)
	p, _ := out["proposal"].(map[string]any)
	if code != http.StatusAccepted || p == nil || p["state"] != "proposed" || p["proposer"] != "alice" {
		t.Fatalf("force-fail under four eyes = %d %v; want 202 with a proposal", code, out)
	}
	pid := fmt.Sprint(p["id"])
	doc := loadOpenAPI(t)
	if errs := doc.check(doc.Components.Schemas["ProposalAnswer"], out, "answer"); len(errs) > 0 {
		t.Errorf("the 202 answer does not match api/openapi.yaml: %v", errs)
	}
	if s := state(); s != "running" {
		t.Fatalf("after the proposal the saga is %s, want running", s)
	}
	code, out = e.do("GET", "/proposals?state=proposed&saga_id="+id.String(), nil, auth...)
	if list, _ := out["proposals"].([]any); code != http.StatusOK || len(list) != 1 {
		t.Fatalf("GET /proposals = %d %v; want the open proposal", code, out)
	}
	if code, _ := e.do("GET", "/proposals", nil); code != http.StatusUnauthorized {
		t.Fatalf("GET /proposals without the token = %d, want 401", code)
	}

	// The same actor cannot approve; nothing changes.
	code, out = e.do("POST", "/proposals/"+pid+"/approve", map[string]any{"actor": "alice"}, auth...)
	if code != http.StatusConflict || !strings.Contains(fmt.Sprint(out["error"]), "cannot approve") {
		t.Fatalf("approve by the proposer = %d %v; want 409", code, out)
	}
	if s := state(); s != "running" {
		t.Fatalf("after the proposer's approval the saga is %s, want running", s)
	}
	// A second actor approves: the action runs, audited with both names.
	code, out = e.do("POST", "/proposals/"+pid+"/approve", map[string]any{"actor": "bob", "reason": "outage confirmed"}, auth...)
	if p, _ := out["proposal"].(map[string]any); code != http.StatusOK || p["state"] != "approved" || p["decider"] != "bob" {
		t.Fatalf("approve by bob = %d %v", code, out)
	}
	if errs := doc.check(doc.Components.Schemas["ProposalAnswer"], out, "answer"); len(errs) > 0 {
		t.Errorf("the approval's answer does not match api/openapi.yaml: %v", errs)
	}
	if s := state(); s != "failed" {
		t.Fatalf("after approval the saga is %s, want failed", s)
	}
	_, out = e.do("GET", "/sagas/"+id.String()+"/audit", nil, auth...)
	audit, _ := out["audit"].([]any)
	if len(audit) != 1 {
		t.Fatalf("audit %v; want one entry", out)
	}
	if a := audit[0].(map[string]any); a["actor"] != "alice" || a["approver"] != "bob" || fmt.Sprint(a["proposal_id"]) != pid || a["ticket"] != "INC-1" {
		t.Fatalf("audit entry %v; want alice approved by bob", a)
	}

	// An expired proposal cannot be approved.
	other := e.start("o-expires")
	code, out = e.do("POST", "/sagas/"+other.String()+"/actions/force-fail", map[string]any{"actor": "alice", "reason": "outage"}, auth...)
	if code != http.StatusAccepted {
		t.Fatalf("second proposal = %d %v", code, out)
	}
	late := fmt.Sprint(out["proposal"].(map[string]any)["id"])
	skew.Store(int64(orchestrator.ProposalTTLDefault + time.Minute))
	code, out = e.do("POST", "/proposals/"+late+"/approve", map[string]any{"actor": "bob"}, auth...)
	if code != http.StatusConflict || !strings.Contains(fmt.Sprint(out["error"]), "expired") {
		t.Fatalf("approve an expired proposal = %d %v; want 409", code, out)
	}
	_, out = e.do("GET", "/sagas/"+other.String(), nil)
	if out["state"] != "running" {
		t.Fatalf("the expired proposal's saga is %v, want running", out["state"])
	}

	// Refusals of the decision routes.
	third := e.start("o-reject")
	_, out = e.do("POST", "/sagas/"+third.String()+"/actions/force-fail", map[string]any{"actor": "alice", "reason": "outage"}, auth...)
	rej := fmt.Sprint(out["proposal"].(map[string]any)["id"])
	for _, tc := range []struct {
		path   string
		body   any
		status int
		says   string
	}{
		{"/proposals/" + rej + "/reject", map[string]any{"actor": "bob"}, http.StatusBadRequest, "reason is required"},
		{"/proposals/" + rej + "/approve", map[string]any{"reason": "x"}, http.StatusBadRequest, "actor is required"},
		{"/proposals/x/approve", map[string]any{"actor": "bob"}, http.StatusBadRequest, "not a positive number"},
		{"/proposals/999999/approve", map[string]any{"actor": "bob"}, http.StatusNotFound, "no proposal"},
		{"/proposals/" + rej + "/reject", map[string]any{"actor": "bob", "reason": "not needed"}, http.StatusOK, ""},
		{"/proposals/" + rej + "/approve", map[string]any{"actor": "carol"}, http.StatusConflict, "rejected already"},
	} {
		code, out := e.do("POST", tc.path, tc.body, auth...)
		if code != tc.status || !strings.Contains(fmt.Sprint(out["error"]), tc.says) {
			t.Errorf("POST %s = %d %v; want %d saying %q", tc.path, code, out, tc.status, tc.says)
		}
	}
	if code, out := e.do("GET", "/proposals?state=open", nil, auth...); code != http.StatusBadRequest || out["field"] != "state" {
		t.Errorf("GET /proposals?state=open = %d %v; want 400 naming state", code, out)
	}
	_, out = e.do("GET", "/sagas/"+third.String(), nil)
	if out["state"] != "running" {
		t.Fatalf("the rejected proposal's saga is %v, want running", out["state"])
	}
}

// The page: a repair form under four eyes proposes (303 to the saga's page
// with a notice), /ui/proposals lists the open proposal with who proposed
// it, the approve form asks first and refuses the proposer, and the saga's
// page shows who proposed and who approved.
func TestFourEyesOnThePage(t *testing.T) {
	t.Parallel()
	e, _ := setupFourEyes(t)
	id := e.start("o-page")
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	post := func(path string, form url.Values) (int, string, string) {
		t.Helper()
		res, err := noRedirect.PostForm(e.srv.URL+path, form)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, res.Header.Get("Location"), string(b)
	}
	get := func(path string) string {
		t.Helper()
		res, err := http.Get(e.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("GET %s = %d %s", path, res.StatusCode, b)
		}
		return string(b)
	}
	code, loc, body := post("/ui/sagas/"+id.String()+"/actions/force-fail", url.Values{"actor": {"alice"}, "reason": {"carrier outage"}, "confirm": {"yes"}, "token": {adminToken}})
	if code != http.StatusSeeOther || !strings.Contains(loc, "?proposed=") {
		t.Fatalf("force-fail form = %d to %q %s; want 303 to the saga with a proposal", code, loc, body)
	}
	if page := get(loc); !strings.Contains(page, "Four eyes: proposal") || !strings.Contains(page, `id="saga-proposals"`) || !strings.Contains(page, ">alice<") {
		t.Fatalf("the saga's page does not show the proposal:\n%s", page)
	}
	list := get("/ui/proposals")
	m := regexp.MustCompile(`data-proposal="(\d+)"`).FindStringSubmatch(list)
	if m == nil || !strings.Contains(list, "carrier outage") || !strings.Contains(list, "Actor (not alice)") {
		t.Fatalf("/ui/proposals does not list the open proposal:\n%s", list)
	}
	approve := "/ui/proposals/" + m[1] + "/approve"
	if code, _, _ := post(approve, url.Values{"actor": {"bob"}, "token": {adminToken}}); code != http.StatusBadRequest {
		t.Fatalf("approve without the confirmation = %d, want 400", code)
	}
	if code, _, _ := post(approve, url.Values{"actor": {"bob"}, "confirm": {"yes"}, "token": {"wrong"}}); code != http.StatusUnauthorized {
		t.Fatalf("approve with a wrong token = %d, want 401", code)
	}
	if code, _, body := post(approve, url.Values{"actor": {"alice"}, "confirm": {"yes"}, "token": {adminToken}}); code != http.StatusConflict || !strings.Contains(body, "cannot approve") {
		t.Fatalf("approve by the proposer = %d; want 409 saying so:\n%s", code, body)
	}
	if _, out := e.do("GET", "/sagas/"+id.String(), nil); out["state"] != "running" {
		t.Fatalf("before approval the saga is %v, want running", out["state"])
	}
	if code, loc, body := post(approve, url.Values{"actor": {"bob"}, "confirm": {"yes"}, "token": {adminToken}}); code != http.StatusSeeOther || loc != "/ui/proposals?done=approve" {
		t.Fatalf("approve by bob = %d to %q %s", code, loc, body)
	}
	page := get("/ui/sagas/" + id.String())
	if !strings.Contains(page, `id="audit"`) || !regexp.MustCompile(`<td>alice</td><td>bob</td>`).MatchString(page) {
		t.Fatalf("the saga's audit does not show alice approved by bob:\n%s", page)
	}
	if _, out := e.do("GET", "/sagas/"+id.String(), nil); out["state"] != "failed" {
		t.Fatalf("after approval the saga is %v, want failed", out["state"])
	}
}
