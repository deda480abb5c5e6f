package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"

	"github.com/sagaflow/sagaflow/api"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

// openAPIDoc is the part of an OpenAPI 3 document the test reads.
type openAPIDoc struct {
	Paths      map[string]map[string]openAPIOp `yaml:"paths"`
	Components struct {
		Schemas   map[string]*schema   `yaml:"schemas"`
		Responses map[string]*response `yaml:"responses"`
	} `yaml:"components"`
}

type openAPIOp struct {
	Responses map[string]*response `yaml:"responses"`
}

type response struct {
	Ref     string `yaml:"$ref"`
	Content map[string]struct {
		Schema *schema `yaml:"schema"`
	} `yaml:"content"`
}

type schema struct {
	Ref                  string             `yaml:"$ref"`
	Type                 string             `yaml:"type"`
	Required             []string           `yaml:"required"`
	Properties           map[string]*schema `yaml:"properties"`
	AdditionalProperties *schema            `yaml:"additionalProperties"`
	Items                *schema            `yaml:"items"`
	Enum                 []string           `yaml:"enum"`
	Nullable             bool               `yaml:"nullable"`
}

var httpMethods = []string{"get", "put", "post", "delete", "patch", "head", "options"}

func loadOpenAPI(t *testing.T) *openAPIDoc {
	t.Helper()
	var d openAPIDoc
	if err := yaml.Unmarshal(api.OpenAPI, &d); err != nil {
		t.Fatalf("api/openapi.yaml: %v", err)
	}
	return &d
}

// documented are the document's operations as "METHOD /path".
func (d *openAPIDoc) documented() []string {
	var out []string
	for p, item := range d.Paths {
		for m := range item {
			if slices.Contains(httpMethods, m) {
				out = append(out, strings.ToUpper(m)+" "+p)
			}
		}
	}
	sort.Strings(out)
	return out
}

// registeredRoutes reads the patterns the package's non-test files register
// (s.route with a literal pattern, the only way onto the mux), as
// "METHOD /path" with Go's {$} anchor dropped.
func registeredRoutes(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var out []string
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
		ast.Inspect(file, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "route" {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "s" {
				return true
			}
			// route(pattern, access, handler, listed...): the listed
			// patterns, when given, are what the route serves.
			pats := call.Args[:1]
			if len(call.Args) > 3 {
				pats = call.Args[3:]
			}
			for _, a := range pats {
				lit, ok := a.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					t.Errorf("%s: a route registered with a pattern that is not a literal; the OpenAPI test cannot read it", fset.Position(call.Pos()))
					return true
				}
				p, _ := strconv.Unquote(lit.Value)
				out = append(out, strings.ReplaceAll(p, "{$}", ""))
			}
			return true
		})
	}
	sort.Strings(out)
	return out
}

// check validates v (decoded JSON) against s, resolving references.
func (d *openAPIDoc) check(s *schema, v any, at string) []string {
	if s == nil {
		return nil
	}
	if s.Ref != "" {
		return d.check(d.Components.Schemas[strings.TrimPrefix(s.Ref, "#/components/schemas/")], v, at)
	}
	bad := func(format string, args ...any) []string { return []string{at + ": " + fmt.Sprintf(format, args...)} }
	if v == nil && s.Nullable {
		return nil
	}
	switch s.Type {
	case "object":
		m, ok := v.(map[string]any)
		if !ok {
			return bad("want an object, got %T", v)
		}
		var errs []string
		for _, r := range s.Required {
			if _, ok := m[r]; !ok {
				errs = append(errs, fmt.Sprintf("%s: required field %q missing", at, r))
			}
		}
		for k, fv := range m {
			if ps, ok := s.Properties[k]; ok {
				errs = append(errs, d.check(ps, fv, at+"."+k)...)
			} else if s.AdditionalProperties != nil {
				errs = append(errs, d.check(s.AdditionalProperties, fv, at+"."+k)...)
			} else if s.Properties != nil {
				errs = append(errs, fmt.Sprintf("%s: field %q is not in the document", at, k))
			}
		}
		return errs
	case "array":
		a, ok := v.([]any)
		if !ok {
			return bad("want an array, got %T", v)
		}
		var errs []string
		for i, e := range a {
			errs = append(errs, d.check(s.Items, e, fmt.Sprintf("%s[%d]", at, i))...)
		}
		return errs
	case "string":
		str, ok := v.(string)
		if !ok {
			return bad("want a string, got %T", v)
		}
		if len(s.Enum) > 0 && !slices.Contains(s.Enum, str) {
			return bad("%q is not one of %v", str, s.Enum)
		}
	case "integer":
		if f, ok := v.(float64); !ok || f != math.Trunc(f) {
			return bad("want an integer, got %v", v)
		}
	case "number":
		if _, ok := v.(float64); !ok {
			return bad("want a number, got %T", v)
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return bad("want a boolean, got %T", v)
		}
	}
	return nil
}

// pathOf maps a request path to the document's template ("/sagas/{id}").
func (d *openAPIDoc) pathOf(method, p string) string {
	segs := strings.Split(p, "/")
	var best string
	for tmpl, item := range d.Paths {
		if _, ok := item[strings.ToLower(method)]; !ok {
			continue
		}
		ts := strings.Split(tmpl, "/")
		if len(ts) != len(segs) {
			continue
		}
		match, literal := true, 0
		for i := range ts {
			switch {
			case strings.HasPrefix(ts[i], "{"):
			case ts[i] == segs[i]:
				literal++
			default:
				match = false
			}
		}
		// Prefer the most literal template (/sagas/actions/x over /sagas/{id}/...).
		if match && (best == "" || literal > strings.Count(best, "/")-strings.Count(best, "{")) {
			best = tmpl
		}
	}
	return best
}

func TestOpenAPIDocumentsEveryRouteAndOnlyThem(t *testing.T) {
	t.Parallel()
	d := loadOpenAPI(t)
	doc, code := d.documented(), registeredRoutes(t)
	for _, r := range code {
		if !slices.Contains(doc, r) {
			t.Errorf("route %q is registered but not in api/openapi.yaml", r)
		}
	}
	for _, r := range doc {
		if !slices.Contains(code, r) {
			t.Errorf("api/openapi.yaml documents %q, which no handler serves", r)
		}
	}
	if len(code) < 10 {
		t.Fatalf("found only %d routes in the source: %v", len(code), code)
	}
}

// Real requests against the real handlers over a real engine: every
// documented operation is called at least once, each answer's status is
// one the document lists for it, and JSON answers validate against the
// documented schema (required fields, types, enums, no undocumented field).
//
// Three servers answer: the ops env (sagas, reconciliation; no dead-letter
// store, so the dead-letter routes answer 501), setupDLQ's (a dead-letter
// store with a dead letter and a dead outbox row) and one over the ops
// env's engine with protected reads (the 401 of the pages).
func TestOpenAPIMatchesTheHandlers(t *testing.T) {
	t.Parallel()
	d := loadOpenAPI(t)
	e := newOpsEnv(t, &api.Config{AdminToken: opsToken, Gatherer: prometheus.NewRegistry()})
	completed, _, failed := e.threeSagas(t)
	running := e.start(t, "order-running")
	// A second failed saga: one discrepancy to resolve with the API, one from the page.
	failed2 := e.start(t, "order-noship-2")
	if in := e.drive(t, failed2, map[string]answer{orderapi.StepCreateShipment + "/forward": {message.Failure, "no carrier"}}); in.State != saga.Failed {
		t.Fatalf("saga %s ended %s, want failed", failed2, in.State)
	}
	de, deadLetter, deadRow := setupDLQ(t, opsToken)
	protected := httptest.NewServer(newAPI(t, e.eng, &api.Config{AdminToken: opsToken, ProtectReads: true}))
	t.Cleanup(protected.Close)
	called := map[string]bool{}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	// request sends to the server at base and returns a JSON object answer
	// (nil for any other).
	request := func(base, method, path, token, contentType, body string, wantStatus int) map[string]any {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		res, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		u, _ := url.Parse(path)
		tmpl := d.pathOf(method, u.Path)
		if tmpl == "" {
			t.Errorf("%s %s: no documented path", method, path)
			return nil
		}
		called[method+" "+tmpl] = true
		if wantStatus != 0 && res.StatusCode != wantStatus {
			t.Errorf("%s %s = %d, the test wants %d: %s", method, path, res.StatusCode, wantStatus, b)
		}
		resp := d.Paths[tmpl][strings.ToLower(method)].Responses[strconv.Itoa(res.StatusCode)]
		if resp == nil {
			t.Errorf("%s %s answered %d, not documented for %s %s", method, path, res.StatusCode, method, tmpl)
			return nil
		}
		if resp.Ref != "" {
			resp = d.Components.Responses[strings.TrimPrefix(resp.Ref, "#/components/responses/")]
		}
		if len(resp.Content) == 0 {
			return nil
		}
		ct := strings.TrimSpace(strings.Split(res.Header.Get("Content-Type"), ";")[0])
		media, ok := resp.Content[ct]
		if !ok {
			t.Errorf("%s %s %d: Content-Type %q, documented %v", method, path, res.StatusCode, ct, resp.Content)
			return nil
		}
		if ct != "application/json" {
			return nil
		}
		var v any
		if err := json.NewDecoder(bytes.NewReader(b)).Decode(&v); err != nil {
			t.Errorf("%s %s: %v", method, path, err)
			return nil
		}
		for _, msg := range d.check(media.Schema, v, method+" "+tmpl+" "+strconv.Itoa(res.StatusCode)) {
			t.Error(msg)
		}
		m, _ := v.(map[string]any)
		return m
	}
	call := func(method, path, token, contentType, body string, wantStatus int) map[string]any {
		t.Helper()
		return request(e.srv.URL, method, path, token, contentType, body, wantStatus)
	}
	dlqCall := func(method, path, token, contentType, body string, wantStatus int) map[string]any {
		t.Helper()
		return request(de.srv.URL, method, path, token, contentType, body, wantStatus)
	}
	const js, form = "application/json", "application/x-www-form-urlencoded"
	start := `{"type":"place-order","idempotency_key":"oa-1","aggregate_id":"oa-1","data":{"order_id":"oa-1","customer":"c","sku":"sku-1","qty":1,"amount_cents":100}}`
	call("POST", "/sagas", "", js, start, 201)
	call("POST", "/sagas", "", js, start, 200)
	call("POST", "/sagas", "", js, `{"type":"nope"}`, 400)
	call("POST", "/sagas", "", "text/plain", start, 415)
	call("GET", "/sagas?limit=2", "", "", "", 200)
	call("GET", "/sagas?state=bogus", "", "", "", 400)
	call("GET", "/sagas/"+completed.String(), "", "", "", 200)
	call("GET", "/sagas/"+uuid.NewString(), "", "", "", 404)
	call("GET", "/sagas/not-a-uuid", "", "", "", 400)

	// Reconciliation, while both failed sagas are failed.
	call("GET", "/reconcile", "", "", "", 200) // before a run: last_run_at is null
	call("GET", "/reconcile?limit=0", "", "", "", 400)
	call("POST", "/reconcile/run", "", js, `{}`, 401)
	call("POST", "/reconcile/run", opsToken, js, `{"since":"soon"}`, 400)
	call("POST", "/reconcile/run", opsToken, js, `{"dry_run":true}`, 200)
	if rep := call("POST", "/reconcile/run", opsToken, js, `{"since":"24h"}`, 200); rep["differences"] != 2.0 {
		t.Errorf("POST /reconcile/run found %v differences, want 2 (the failed sagas): %v", rep["differences"], rep)
	}
	open, _ := call("GET", "/reconcile", "", "", "", 200)["open"].([]any)
	var discrepancies []string
	for _, o := range open {
		if m, ok := o.(map[string]any); ok {
			discrepancies = append(discrepancies, fmt.Sprint(m["id"]))
		}
	}
	if len(discrepancies) != 2 {
		t.Fatalf("GET /reconcile has %d open discrepancies, want 2: %v", len(discrepancies), open)
	}
	dana := `{"actor":"dana","reason":"shipped by hand"}`
	call("POST", "/reconcile/discrepancies/"+discrepancies[0]+"/resolve", opsToken, js, dana, 200)
	call("POST", "/reconcile/discrepancies/"+discrepancies[0]+"/resolve", opsToken, js, dana, 404)
	call("POST", "/reconcile/discrepancies/first/resolve", opsToken, js, dana, 400)
	call("POST", "/reconcile/discrepancies/"+discrepancies[1]+"/resolve", "", js, dana, 401)
	call("GET", "/ui/reconcile", "", "", "", 200)
	request(protected.URL, "GET", "/ui/reconcile", "", "", "", 401)
	call("POST", "/ui/reconcile/run", "", form, url.Values{"token": {"wrong"}}.Encode(), 401)
	call("POST", "/ui/reconcile/run", "", form, url.Values{"token": {opsToken}, "dry_run": {"on"}}.Encode(), 200)
	resolvePage := "/ui/reconcile/" + discrepancies[1] + "/resolve"
	call("POST", resolvePage, "", form, url.Values{"token": {opsToken}, "actor": {"dana"}}.Encode(), 400)
	call("POST", resolvePage, "", form, url.Values{"token": {opsToken}, "actor": {"dana"}, "reason": {"r"}}.Encode(), 303)
	call("POST", resolvePage, "", form, url.Values{"token": {opsToken}, "actor": {"dana"}, "reason": {"r"}}.Encode(), 409)
	call("GET", "/ui/reconcile?done=resolve", "", "", "", 200)
	// Both resolved and their sagas unmoved: a run finds nothing.
	if rep := call("POST", "/reconcile/run", opsToken, js, `{}`, 200); rep["differences"] != 0.0 {
		t.Errorf("POST /reconcile/run after the resolves found %v differences, want 0: %v", rep["differences"], rep)
	}

	// Dead letters and dead outbox rows.
	call("GET", "/dlq/audit", "", "", "", 501) // the ops env has no dead-letter store
	call("GET", "/ui/dlq", "", "", "", 501)
	repair := `{"actor":"alice","reason":"reply consumer fixed"}`
	dlqCall("GET", "/dlq", "", "", "", 200)
	dlqCall("GET", "/dlq?redriven=maybe", "", "", "", 400)
	dlqCall("GET", fmt.Sprintf("/dlq/%d", deadLetter), "", "", "", 200)
	dlqCall("GET", "/dlq/999999", "", "", "", 404)
	dlqCall("GET", "/dlq/first", "", "", "", 400)
	redrive := fmt.Sprintf("/dlq/%d/redrive", deadLetter)
	dlqCall("POST", redrive, "", js, repair, 401)
	dlqCall("POST", redrive, opsToken, js, `{"actor":"alice"}`, 400)
	dlqCall("POST", redrive, opsToken, js, repair, 200)
	dlqCall("POST", redrive, opsToken, js, repair, 409)
	dlqCall("GET", "/dlq?redriven=true&limit=1", "", "", "", 200)
	dlqCall("POST", "/dlq/redrive", opsToken, js, repair, 400)
	dlqCall("POST", "/dlq/redrive", opsToken, js, `{"actor":"alice","reason":"r","all":true}`, 200)
	dlqCall("GET", "/outbox/dead", "", "", "", 200)
	dlqCall("GET", "/outbox/dead?after=-1", "", "", "", 400)
	requeue := fmt.Sprintf("/outbox/dead/%d/requeue", deadRow)
	dlqCall("POST", requeue, opsToken, js, repair, 200)
	dlqCall("POST", requeue, opsToken, js, repair, 409)
	dlqCall("POST", "/outbox/dead/999999/requeue", opsToken, js, repair, 404)
	dlqCall("POST", "/outbox/dead/requeue", opsToken, js, repair, 400)
	dlqCall("POST", "/outbox/dead/requeue", opsToken, js, `{"actor":"alice","reason":"r","all":true}`, 200)
	// Nothing to find in setupDLQ's database (no saga, no dead row now): the
	// list is empty, not null.
	dlqCall("POST", "/reconcile/run", opsToken, js, `{"dry_run":true}`, 200)
	dlqCall("POST", "/reconcile/run", opsToken, js, `{}`, 200)
	// The relay gives up on the requeued row again: the page requeues it.
	if _, err := de.pool.Exec(t.Context(), `UPDATE orch.outbox SET dead_at = now() WHERE id = $1`, deadRow); err != nil {
		t.Fatal(err)
	}
	pageForm := url.Values{"actor": {"a"}, "reason": {"r"}, "token": {opsToken}}.Encode()
	dlqCall("POST", fmt.Sprintf("/ui/dlq/requeue/%d", deadRow), "", form, url.Values{"actor": {"a"}, "reason": {"r"}, "token": {"wrong"}}.Encode(), 401)
	dlqCall("POST", fmt.Sprintf("/ui/dlq/requeue/%d", deadRow), "", form, pageForm, 303)
	dlqCall("POST", fmt.Sprintf("/ui/dlq/requeue/%d", deadRow), "", form, pageForm, 409)
	dlqCall("POST", fmt.Sprintf("/ui/dlq/redrive/%d", deadLetter), "", form, pageForm, 409)
	dlqCall("POST", fmt.Sprintf("/ui/dlq/replay/%d", deadLetter), "", form, pageForm, 404)
	dlqCall("POST", fmt.Sprintf("/ui/dlq/redrive/%dabc", deadLetter), "", form, pageForm, 400)
	dlqCall("GET", "/ui/dlq?done=requeue&redriven=true", "", "", "", 200)
	dlqCall("GET", "/ui/dlq?limit=0", "", "", "", 400)
	if audit, _ := dlqCall("GET", "/dlq/audit", "", "", "", 200)["audit"].([]any); len(audit) != 3 {
		t.Errorf("GET /dlq/audit has %d entries, want 3 (a redrive and two requeues): %v", len(audit), audit)
	}

	resolve := `{"actor":"alice","reason":"fixed by hand","outcome":"completed"}`
	call("POST", "/sagas/"+failed.String()+"/actions/resolve", opsToken, js, resolve, 200)
	call("POST", "/sagas/"+completed.String()+"/actions/compensate", opsToken, js, `{"actor":"a","reason":"r"}`, 409)
	if audit, _ := call("GET", "/sagas/"+failed.String()+"/audit", opsToken, "", "", 200)["audit"].([]any); len(audit) != 1 {
		t.Errorf("GET /sagas/{id}/audit has %d entries after one resolve, want 1: %v", len(audit), audit)
	}
	call("GET", "/sagas/nope/audit", opsToken, "", "", 400)
	call("GET", "/proposals?state=proposed", opsToken, "", "", 200)
	call("GET", "/ui/proposals", "", "", "", 200)
	call("GET", "/ui/proposals?state=open", "", "", "", 400)
	call("POST", "/ui/proposals/999999/reject", "", form, url.Values{"token": {opsToken}, "actor": {"dana"}, "reason": {"r"}}.Encode(), 404)
	call("POST", "/ui/proposals/999999/approve", "", form, url.Values{"token": {opsToken}, "actor": {"dana"}}.Encode(), 400)
	call("GET", "/proposals?state=open", opsToken, "", "", 400)
	call("GET", "/proposals", "", "", "", 401)
	call("POST", "/proposals/999999/approve", opsToken, js, `{"actor":"bob"}`, 404)
	call("POST", "/proposals/1/approve", opsToken, js, `{}`, 400)
	call("POST", "/proposals/999999/reject", opsToken, js, `{"actor":"bob","reason":"r"}`, 404)
	if res := call("POST", "/sagas/"+running.String()+"/actions/mark-done", opsToken, js, `{"actor":"a","reason":"found it","ticket":"T-1","output":{}}`, 409); res == nil || !strings.Contains(fmt.Sprint(res["error"]), "before the pivot") {
		t.Errorf("mark-done on a running step before the pivot: %v, want 409 naming the step's place", res)
	}
	call("POST", "/sagas/"+completed.String()+"/actions/force-fail", opsToken, js, `{"actor":"a","reason":"r","ticket":"INC-1"}`, 409)
	call("POST", "/sagas/"+completed.String()+"/actions/mark-done", opsToken, js, `{"actor":"a","reason":" ","output":{}}`, 400)
	call("POST", "/sagas/"+running.String()+"/actions/retry", "", js, `{"actor":"a","reason":"r"}`, 401)
	call("POST", "/sagas/"+running.String()+"/actions/retry", opsToken, js, `{"actor":"a"}`, 400)
	call("POST", "/sagas/actions/compensate", opsToken, js, `{"filter":{"state":"running"},"actor":"a","reason":"r","dry_run":true}`, 200)
	call("POST", "/sagas/actions/retry", opsToken, js, `{"filter":{"state":"running","type":"place-order"},"actor":"a","reason":"r"}`, 200)
	call("POST", "/sagas/actions/retry", opsToken, js, `{"filter":{},"actor":"a","reason":"r"}`, 400)
	call("POST", "/sagas/actions/nope", opsToken, js, `{"filter":{"state":"running"},"actor":"a","reason":"r"}`, 404)
	// Events and cancels: a book-trip waiting for its approval keeps an
	// early one; place-order waits for nothing.
	trip := call("POST", "/sagas", "", js, `{"type":"book-trip","idempotency_key":"trip-1","aggregate_id":"t-1","data":{"trip_id":"t-1","customer":"c","flight":"f","hotel":"h","amount_cents":100,"needs_approval":true}}`, 201)
	tripID, _ := trip["id"].(string)
	approval := `{"name":"approval","event_id":"ap-1","data":{"approved":true}}`
	if ans := call("POST", "/sagas/"+tripID+"/events", "", js, approval, 202); ans["taken"] != false || ans["duplicate"] != false {
		t.Errorf("an early approval: %v, want kept (not taken), not a duplicate", ans)
	}
	if ans := call("POST", "/sagas/"+tripID+"/events", "", js, approval, 202); ans["duplicate"] != true {
		t.Errorf("the same event_id again: %v, want a duplicate", ans)
	}
	call("POST", "/sagas/"+tripID+"/events", "", js, `{"name":"approval"}`, 400)
	call("POST", "/sagas/"+tripID+"/events", "", js, `{"name":"payment","event_id":"x"}`, 409)
	call("POST", "/sagas/"+uuid.NewString()+"/events", "", js, approval, 404)
	call("POST", "/sagas/"+completed.String()+"/events", "", js, approval, 409)
	call("POST", "/sagas/"+tripID+"/cancel", "", js, `{}`, 400)
	if ans := call("POST", "/sagas/"+tripID+"/cancel", "", js, `{"reason":"changed plans"}`, 202); ans["state"] != "compensating" {
		t.Errorf("a cancel before the pivot: %v, want compensating", ans)
	}
	call("POST", "/sagas/"+tripID+"/cancel", "", js, `{"reason":"again"}`, 409)
	call("POST", "/sagas/"+completed.String()+"/cancel", "", js, `{"reason":"too late"}`, 409)
	call("GET", "/stats", "", "", "", 200)
	call("GET", "/stats?window=never", "", "", "", 400)
	call("GET", "/healthz", "", "", "", 200)
	call("GET", "/readyz", "", "", "", 200)
	call("GET", "/metrics", "", "", "", 200)
	call("GET", "/openapi.yaml", "", "", "", 200)
	call("GET", "/ui/", "", "", "", 302)
	call("GET", "/ui/sagas?state=running", "", "", "", 200)
	call("GET", "/ui/sagas/"+completed.String(), "", "", "", 200)
	call("POST", "/ui/sagas/"+running.String()+"/actions/retry", "", form, url.Values{"actor": {"a"}, "reason": {"r"}, "token": {opsToken}}.Encode(), 303)
	call("POST", "/ui/sagas/actions", "", form, url.Values{"action": {"compensate"}, "state": {"running"}, "actor": {"a"}, "reason": {"r"}, "token": {opsToken}, "dry_run": {"true"}}.Encode(), 200)
	call("POST", "/ui/login", "", form, url.Values{"token": {"wrong"}}.Encode(), 401)
	for _, op := range d.documented() {
		if !called[op] {
			t.Errorf("%s is documented but the test never called it: add a request", op)
		}
	}
}

func TestOpenAPIServed(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t, nil)
	st, body := e.do(t, http.MethodGet, "/openapi.yaml", "", "")
	file, err := os.ReadFile("openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if st != http.StatusOK || body != string(file) {
		t.Fatalf("GET /openapi.yaml = %d, %d bytes; want 200 and api/openapi.yaml (%d bytes)", st, len(body), len(file))
	}
}
