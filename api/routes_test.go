package api_test

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sagaflow/sagaflow/api"
	"github.com/sagaflow/sagaflow/inbox/dlq"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

// sentinels are put in a saga's data and journal, a dead letter, a dead
// outbox row and a discrepancy; no refused answer may hold any of them.
var sentinels = []string{"sntl-order-5e2b", "sntl-reason-91ad", "sntl-deadletter-3f7c", "sntl-outbox-64d0", "sntl-discrepancy-b8e1"}

// routeCase is one route of the table: who may call it (written here,
// apart from the server's own declaration) and a path to call it with.
type routeCase struct {
	access string
	path   string
	// body is a JSON body for the API's POST routes (refused by the
	// handler's validation when the gate lets it through, so that nothing
	// changes); forms get the credential's token and form.
	body string
	form url.Values
}

// TestEveryRouteRefusesBeforeReading calls every registered route (GET
// and POST, pages and API) on servers with reads open, reads protected and
// without an admin token, with no token, a wrong one, the client and the
// admin token and a session cookie of each role. A refused request is
// answered the refusal's status and nothing of the data: before, a form
// posted with no or a wrong token rendered the saga's page with its data,
// journal, dead letters and discrepancies under its 401.
func TestEveryRouteRefusesBeforeReading(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t, nil)
	id := e.start(t, "sntl-order-5e2b")
	if in := e.drive(t, id, map[string]answer{orderapi.StepCreateShipment + "/forward": {message.Failure, "sntl-reason-91ad"}}); in.State != saga.Failed {
		t.Fatalf("saga ended %s, want failed", in.State)
	}
	ctx := context.Background()
	var dl, ob, disc int64
	if err := e.pool.QueryRow(ctx, `INSERT INTO orch.dead_letters (topic, partition, "offset", key, value, headers, message_id, reason)
VALUES ('saga.replies', 0, 7, 'k', '{"x":"sntl-deadletter-3f7c"}', '{}', 'm-1', 'sntl-deadletter-3f7c') RETURNING id`).Scan(&dl); err != nil {
		t.Fatal(err)
	}
	if err := e.pool.QueryRow(ctx, `INSERT INTO orch.outbox (topic, key, value, dead_at, attempts, last_error)
VALUES ('inventory.commands', 'k', 'v', now(), 20, 'sntl-outbox-64d0') RETURNING id`).Scan(&ob); err != nil {
		t.Fatal(err)
	}
	if err := e.pool.QueryRow(ctx, `INSERT INTO orch.reconcile_discrepancies (saga_id, saga_type, step, kind, detail)
VALUES ($1, $2, 'create-shipment', 'stuck', 'sntl-discrepancy-b8e1') RETURNING id`, id, orderapi.SagaType).Scan(&disc); err != nil {
		t.Fatal(err)
	}
	store, err := dlq.New(e.pool, "orch")
	if err != nil {
		t.Fatal(err)
	}
	sid := id.String()
	table := map[string]routeCase{
		"POST /sagas":                                {access: "start", path: "/sagas", body: `{}`},
		"GET /sagas":                                 {access: "read", path: "/sagas"},
		"GET /sagas/{id}":                            {access: "read", path: "/sagas/" + sid},
		"POST /sagas/{id}/events":                    {access: "start", path: "/sagas/" + sid + "/events", body: `{}`},
		"POST /sagas/{id}/cancel":                    {access: "start", path: "/sagas/" + sid + "/cancel", body: `{}`},
		"POST /sagas/{id}/actions/{action}":          {access: "admin", path: "/sagas/" + sid + "/actions/retry", body: `{}`},
		"GET /sagas/{id}/audit":                      {access: "admin", path: "/sagas/" + sid + "/audit"},
		"POST /sagas/actions/{action}":               {access: "admin", path: "/sagas/actions/retry", body: `{}`},
		"GET /openapi.yaml":                          {access: "open", path: "/openapi.yaml"},
		"GET /stats":                                 {access: "read", path: "/stats"},
		"GET /reconcile":                             {access: "read", path: "/reconcile"},
		"GET /proposals":                             {access: "admin", path: "/proposals"},
		"POST /proposals/{id}/approve":               {access: "admin", path: "/proposals/1/approve", body: `{}`},
		"POST /proposals/{id}/reject":                {access: "admin", path: "/proposals/1/reject", body: `{}`},
		"POST /reconcile/run":                        {access: "admin", path: "/reconcile/run", body: `{"since":"nonsense"}`},
		"POST /reconcile/discrepancies/{id}/resolve": {access: "admin", path: fmt.Sprintf("/reconcile/discrepancies/%d/resolve", disc), body: `{}`},
		"GET /dlq":                                   {access: "read", path: "/dlq"},
		"GET /dlq/audit":                             {access: "read", path: "/dlq/audit"},
		"GET /dlq/{id}":                              {access: "read", path: fmt.Sprintf("/dlq/%d", dl)},
		"POST /dlq/{id}/redrive":                     {access: "admin", path: fmt.Sprintf("/dlq/%d/redrive", dl), body: `{}`},
		"POST /dlq/redrive":                          {access: "admin", path: "/dlq/redrive", body: `{}`},
		"GET /outbox/dead":                           {access: "read", path: "/outbox/dead"},
		"POST /outbox/dead/{id}/requeue":             {access: "admin", path: fmt.Sprintf("/outbox/dead/%d/requeue", ob), body: `{}`},
		"POST /outbox/dead/requeue":                  {access: "admin", path: "/outbox/dead/requeue", body: `{}`},
		"GET /ui/{$}":                                {access: "open", path: "/ui/"},
		"GET /ui/sagas":                              {access: "page", path: "/ui/sagas"},
		"GET /ui/sagas/{id}":                         {access: "page", path: "/ui/sagas/" + sid},
		"POST /ui/sagas/{id}/actions/{action}":       {access: "admin-form", path: "/ui/sagas/" + sid + "/actions/retry", form: url.Values{}},
		"POST /ui/sagas/actions":                     {access: "admin-form", path: "/ui/sagas/actions", form: url.Values{"action": {"retry"}, "state": {"failed"}, "dry_run": {"true"}}},
		"POST /ui/login":                             {access: "login", path: "/ui/login", form: url.Values{"back": {"/ui/sagas/" + sid}}},
		"GET /ui/dlq":                                {access: "page", path: "/ui/dlq"},
		"POST /ui/dlq/{kind}/{id}":                   {access: "admin-form", path: fmt.Sprintf("/ui/dlq/redrive/%d", dl), form: url.Values{}},
		"GET /ui/reconcile":                          {access: "page", path: "/ui/reconcile"},
		"GET /ui/proposals":                          {access: "page", path: "/ui/proposals"},
		"POST /ui/proposals/{id}/{decision}":         {access: "admin-form", path: "/ui/proposals/1/reject", form: url.Values{}},
		"POST /ui/reconcile/run":                     {access: "admin-form", path: "/ui/reconcile/run", form: url.Values{"dry_run": {"1"}}},
		"POST /ui/reconcile/{id}/resolve":            {access: "admin-form", path: fmt.Sprintf("/ui/reconcile/%d/resolve", disc), form: url.Values{}},
		"GET /healthz":                               {access: "open", path: "/healthz"},
		"GET /readyz":                                {access: "ops", path: "/readyz"},
		"GET /metrics":                               {access: "ops", path: "/metrics"},
	}

	type variant struct {
		name                  string
		admin, client         string
		protect               bool
		server                *api.Server
		adminSess, clientSess string
	}
	variants := []*variant{
		{name: "reads open", admin: opsToken, client: clientToken},
		{name: "reads protected", admin: opsToken, client: clientToken, protect: true},
		{name: "no admin token", client: clientToken, protect: true},
	}
	for _, v := range variants {
		v.server = newAPI(t, e.eng, &api.Config{AdminToken: v.admin, ClientToken: v.client, ProtectReads: v.protect, ProtectMetrics: v.protect,
			DeadLetters: store, Gatherer: prometheus.NewRegistry()})
	}

	n := 0
	// send calls srv, each request from an address of its own (the budget
	// of wrong tokens is not what this test is about).
	send := func(srv *api.Server, method, path, bearer, cookie, body, contentType string) *httptest.ResponseRecorder {
		n++
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.RemoteAddr = fmt.Sprintf("10.%d.%d.%d:4000", n>>16&255, n>>8&255, n&255)
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		if cookie != "" {
			req.Header.Set("Cookie", cookie)
		}
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		return rec
	}
	login := func(srv *api.Server, tok string) string {
		rec := send(srv, "POST", "/ui/login", "", "", url.Values{"token": {tok}, "back": {"/ui/sagas"}}.Encode(), "application/x-www-form-urlencoded")
		c := rec.Result().Cookies()
		if rec.Code != http.StatusSeeOther || len(c) != 1 {
			t.Fatalf("login: %d %v", rec.Code, c)
		}
		return c[0].Name + "=" + c[0].Value
	}
	// Sessions of the server with both tokens; the server without an
	// admin token must not take the admin one.
	for _, v := range variants {
		v.adminSess, v.clientSess = login(variants[1].server, opsToken), login(variants[1].server, clientToken)
	}

	// The table and the server agree on every route, and no route is left
	// out of either.
	registered := map[string]bool{}
	for _, r := range variants[1].server.Routes() {
		registered[r.Pattern] = true
		c, ok := table[r.Pattern]
		switch {
		case !ok:
			t.Errorf("route %q (%s) is not in this test's table: add it with who may call it", r.Pattern, r.Access)
		case c.access != r.Access:
			t.Errorf("route %q is registered as %q, the table says %q", r.Pattern, r.Access, c.access)
		}
	}
	for p := range table {
		if !registered[p] {
			t.Errorf("the table has %q, which the server does not register", p)
		}
	}

	// What an admin reads holds the sentinels: their absence from a
	// refusal means something.
	shown := map[string][]string{
		"/sagas/" + sid: {"sntl-order-5e2b", "sntl-reason-91ad"}, "/ui/sagas/" + sid: {"sntl-order-5e2b", "sntl-reason-91ad"},
		"/dlq": {"sntl-deadletter-3f7c"}, "/outbox/dead": {"sntl-outbox-64d0"}, "/ui/dlq": {"sntl-deadletter-3f7c", "sntl-outbox-64d0"},
		"/reconcile": {"sntl-discrepancy-b8e1"}, "/ui/reconcile": {"sntl-discrepancy-b8e1"},
	}
	for p, wants := range shown {
		rec := send(variants[1].server, "GET", p, opsToken, "", "", "")
		for _, w := range wants {
			if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), w) {
				t.Errorf("GET %s as the admin = %d without %q", p, rec.Code, w)
			}
		}
	}

	type credential struct {
		name          string
		token         func(v *variant) string
		session       func(v *variant) string
		sessionClient bool
		sessionAdmin  bool
	}
	roleOf := func(v *variant, tok string) string {
		switch {
		case tok != "" && tok == v.admin:
			return "admin"
		case tok != "" && tok == v.client:
			return "client"
		}
		return ""
	}
	wrong := "wr0ng-7d3e91c5a2b84f06e1d9c3b7"
	creds := []credential{
		{name: "no token"},
		{name: "a wrong token", token: func(*variant) string { return wrong }},
		{name: "the client token", token: func(*variant) string { return clientToken }},
		{name: "the admin token", token: func(*variant) string { return opsToken }},
		{name: "a client session", session: func(v *variant) string { return v.clientSess }, sessionClient: true},
		{name: "an admin session", session: func(v *variant) string { return v.adminSess }, sessionAdmin: true},
	}
	// expect is the status a refusal must have, 0 when the request passes.
	expect := func(v *variant, access string, c credential) int {
		tok := ""
		if c.token != nil {
			tok = c.token(v)
		}
		role := roleOf(v, tok)
		if access == "open" {
			return 0
		}
		if (access == "admin" || access == "admin-form") && v.admin == "" {
			return http.StatusForbidden
		}
		if tok != "" && role == "" {
			return http.StatusUnauthorized
		}
		if access == "page" && tok == "" {
			switch {
			case c.sessionAdmin && v.admin != "":
				role = "admin"
			case c.sessionClient:
				role = "client"
			}
		}
		switch access {
		case "admin", "admin-form":
			if role != "admin" {
				return http.StatusUnauthorized
			}
		case "login":
			if role == "" {
				return http.StatusUnauthorized
			}
		case "start":
			if (v.protect || v.client != "") && role == "" {
				return http.StatusUnauthorized
			}
		case "read", "page", "ops":
			if v.protect && role == "" {
				return http.StatusUnauthorized
			}
		}
		return 0
	}

	refusals := 0
	for _, v := range variants {
		for _, r := range v.server.Routes() {
			c, ok := table[r.Pattern]
			if !ok {
				continue
			}
			method, _, _ := strings.Cut(r.Pattern, " ")
			for _, cr := range creds {
				tok, cookie := "", ""
				if cr.token != nil {
					tok = cr.token(v)
				}
				if cr.session != nil {
					cookie = cr.session(v)
				}
				body, ct := "", ""
				switch {
				case c.form != nil:
					f := url.Values{}
					for k, vs := range c.form {
						f[k] = vs
					}
					if tok != "" {
						f.Set("token", tok)
					}
					body, ct = f.Encode(), "application/x-www-form-urlencoded"
				case c.body != "":
					body, ct = c.body, "application/json"
				}
				rec := send(v.server, method, c.path, tok, cookie, body, ct)
				want := expect(v, c.access, cr)
				what := fmt.Sprintf("%s, %s %s with %s", v.name, method, c.path, cr.name)
				got := rec.Body.String()
				if want == 0 {
					if rec.Code == http.StatusUnauthorized || rec.Code == http.StatusForbidden || rec.Code == http.StatusTooManyRequests {
						t.Errorf("%s: %d, want it let through:\n%.300s", what, rec.Code, got)
					}
					continue
				}
				refusals++
				if rec.Code != want {
					t.Errorf("%s: %d, want %d", what, rec.Code, want)
				}
				for _, s := range sentinels {
					if strings.Contains(got, s) {
						t.Errorf("%s: refused (%d) but the answer shows %q", what, rec.Code, s)
					}
				}
				if len(rec.Result().Cookies()) > 0 {
					t.Errorf("%s: refused but sets a cookie", what)
				}
			}
		}
	}
	if refusals < 200 {
		t.Fatalf("only %d refusals checked", refusals)
	}
}

// TestRoutesOnlyThroughTheGate: no file of the package puts a handler on
// the mux except route, which puts the gate in front of it.
func TestRoutesOnlyThroughTheGate(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		file, err := parser.ParseFile(fset, f, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok || (sel.Sel.Name != "Handle" && sel.Sel.Name != "HandleFunc") {
					return true
				}
				if x, ok := sel.X.(*ast.SelectorExpr); ok && x.Sel.Name == "mux" && fn.Name.Name != "route" {
					t.Errorf("%s: %s puts a handler on the mux without the gate: register it with s.route and its access", fset.Position(sel.Pos()), fn.Name.Name)
				}
				return true
			})
		}
	}
}
