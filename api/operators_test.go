package api_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/sagaflow/sagaflow/api"
)

const (
	aliceToken = "alice-token-0123456789abcdef0123"
	bobToken   = "bob-token-0123456789abcdef012345"
)

// With named operator tokens the actor is the token's name: alice's
// proposal is hers whatever the body says, bob's approval is his, alice
// cannot approve her own by typing another name, and the shared admin
// token can neither propose nor decide.
func TestNamedOperatorsMakeFourEyesTwoPeople(t *testing.T) {
	t.Parallel()
	e, _ := setupFourEyesWith(t, &api.Config{AdminToken: adminToken, Operators: map[string]string{"alice": aliceToken, "bob": bobToken}})
	as := func(tok string) []string { return []string{"Authorization", "Bearer " + tok} }
	id := e.start("o-named")

	code, out := e.do("POST", "/sagas/"+id.String()+"/actions/force-fail", map[string]any{"actor": "alice", "reason": "outage"}, as(adminToken)...)
	if code != http.StatusForbidden || !strings.Contains(fmt.Sprint(out["error"]), "named operator token") {
		t.Fatalf("force-fail with the shared admin token = %d %v; want 403 naming the named tokens", code, out)
	}
	code, out = e.do("POST", "/sagas/"+id.String()+"/actions/force-fail", map[string]any{"actor": "bob", "reason": "outage"}, as(aliceToken)...)
	if code != http.StatusForbidden || !strings.Contains(fmt.Sprint(out["error"]), "not the operator of this token") {
		t.Fatalf("alice's token acting as bob = %d %v; want 403", code, out)
	}
	code, out = e.do("POST", "/sagas/"+id.String()+"/actions/force-fail", map[string]any{"reason": "outage"}, as(aliceToken)...)
	p, _ := out["proposal"].(map[string]any)
	if code != http.StatusAccepted || p["proposer"] != "alice" {
		t.Fatalf("force-fail with alice's token and no actor = %d %v; want 202 proposed by alice", code, out)
	}
	pid := fmt.Sprint(p["id"])
	if code, out = e.do("POST", "/proposals/"+pid+"/approve", map[string]any{"actor": "bob"}, as(aliceToken)...); code != http.StatusForbidden {
		t.Fatalf("alice approving as bob = %d %v; want 403", code, out)
	}
	if code, out = e.do("POST", "/proposals/"+pid+"/approve", map[string]any{}, as(aliceToken)...); code != http.StatusConflict {
		t.Fatalf("alice approving her own proposal = %d %v; want 409", code, out)
	}
	if code, out = e.do("POST", "/proposals/"+pid+"/approve", map[string]any{"actor": "carol"}, as(adminToken)...); code != http.StatusForbidden {
		t.Fatalf("the shared admin token approving = %d %v; want 403", code, out)
	}
	code, out = e.do("POST", "/proposals/"+pid+"/approve", map[string]any{"reason": "confirmed"}, as(bobToken)...)
	if p, _ := out["proposal"].(map[string]any); code != http.StatusOK || p["decider"] != "bob" {
		t.Fatalf("bob approving = %d %v; want 200 decided by bob", code, out)
	}
	_, out = e.do("GET", "/sagas/"+id.String()+"/audit", nil, as(bobToken)...)
	if a, _ := out["audit"].([]any); len(a) != 1 || a[0].(map[string]any)["actor"] != "alice" || a[0].(map[string]any)["approver"] != "bob" {
		t.Fatalf("audit %v; want alice's action approved by bob", out)
	}
}

func TestOperatorTokensAreChecked(t *testing.T) {
	t.Parallel()
	e := setup(t, adminToken)
	for _, tc := range []struct {
		name string
		ops  map[string]string
		want string
	}{
		{"bad name", map[string]string{"Alice Smith": aliceToken}, `name "Alice Smith"`},
		{"weak token", map[string]string{"alice": "short"}, `Operators["alice"]: the token is refused`},
		{"admin's token", map[string]string{"alice": adminToken}, "equals the admin or the client token"},
		{"shared token", map[string]string{"alice": aliceToken, "bob": aliceToken}, "have the same token"},
	} {
		_, err := api.New(e.eng, &api.Config{AdminToken: adminToken, Operators: tc.ops})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New = %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

// A named operator logs in to the page with their own token: the session
// cookie names them and is keyed by their token, opens the protected
// pages, and a forged cookie for another operator is refused.
func TestNamedOperatorPageSession(t *testing.T) {
	t.Parallel()
	e, _ := setupFourEyesWith(t, &api.Config{ProtectReads: true, Operators: map[string]string{"alice": aliceToken, "bob": bobToken}})
	c := e.srv.Client()
	login, err := c.PostForm(e.srv.URL+"/ui/login", map[string][]string{"token": {aliceToken}, "back": {"/ui/sagas"}})
	if err != nil {
		t.Fatal(err)
	}
	login.Body.Close()
	var cookie *http.Cookie
	for _, ck := range login.Request.Response.Cookies() {
		cookie = ck
	}
	if cookie == nil || !strings.HasPrefix(cookie.Value, "o-alice.") {
		t.Fatalf("login with alice's token set cookie %v, want an o-alice session", cookie)
	}
	get := func(ck *http.Cookie) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, e.srv.URL+"/ui/sagas", nil)
		req.AddCookie(ck)
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if st := get(cookie); st != http.StatusOK {
		t.Fatalf("page with alice's session = %d, want 200", st)
	}
	forged := *cookie
	forged.Value = "o-bob." + strings.SplitN(cookie.Value, ".", 2)[1]
	if st := get(&forged); st != http.StatusUnauthorized {
		t.Fatalf("alice's session relabelled as bob's = %d, want 401", st)
	}
}
