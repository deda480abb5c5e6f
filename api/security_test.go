package api_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sagaflow/sagaflow/api"
	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

const clientToken = "a2b12771baf17c11cf9832b8ae2bef4f"

// hardened puts the API of env (with cfg) behind the server serve runs:
// api.NewHTTPServer with lim on api.LimitListener.
func hardened(t *testing.T, env *opsEnv, cfg *api.Config, lim api.Limits) {
	t.Helper()
	env.srv.Close()
	ts := httptest.NewUnstartedServer(nil)
	ts.Config = api.NewHTTPServer(newAPI(t, env.eng, cfg), lim, nil)
	ts.Listener = api.LimitListener(ts.Listener, lim)
	ts.Start()
	t.Cleanup(ts.Close)
	env.srv = ts
	env.token = cfg.AdminToken
}

// call sends one request with headers (name, value pairs) and returns the
// answer's status, headers and body.
func call(t *testing.T, base, method, path, body string, header ...string) (int, http.Header, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, string(b)
}

func startJSON(key string) string {
	b, _ := json.Marshal(map[string]any{"type": orderapi.SagaType, "idempotency_key": key, "aggregate_id": key,
		"data": map[string]any{"order_id": key, "customer": "c", "sku": "sku-apple", "qty": 1, "amount_cents": 100}})
	return string(b)
}

const jsonCT = "application/json"

func TestTokensForStartsReadsAndActions(t *testing.T) {
	t.Parallel()
	cfg := &api.Config{AdminToken: opsToken, ClientToken: clientToken, ProtectReads: true}
	env := newOpsEnv(t, cfg)
	base := env.srv.URL
	post := func(key string, auth ...string) (int, http.Header, string) {
		h := []string{"Content-Type", jsonCT}
		if len(auth) > 0 {
			h = append(h, "Authorization", auth[0])
		}
		return call(t, base, "POST", "/sagas", startJSON(key), h...)
	}
	for _, auth := range [][]string{nil, {"Bearer wrong"}, {"Bearer " + clientToken + "x"}, {"Bearer " + clientToken[:5]},
		{"Basic " + clientToken}, {clientToken}, {"Bearer"}, {"Bearer "}} {
		st, h, body := post("order-denied", auth...)
		if st != http.StatusUnauthorized || !strings.Contains(h.Get("WWW-Authenticate"), "Bearer") || !strings.Contains(body, `"error"`) {
			t.Errorf("POST /sagas with Authorization %q = %d %q %s; want 401 with WWW-Authenticate: Bearer", auth, st, h.Get("WWW-Authenticate"), body)
		}
	}
	for i, auth := range []string{"Bearer " + clientToken, "bearer " + clientToken, "BEARER " + clientToken, "Bearer " + opsToken, "bEaReR   " + opsToken} {
		if st, _, body := post(fmt.Sprintf("order-ok-%d", i), auth); st != http.StatusCreated {
			t.Errorf("POST /sagas with Authorization %q = %d %s; want 201", auth, st, body)
		}
	}
	var l listAnswer
	st, _, body := call(t, base, "GET", "/sagas", "", "Authorization", "Bearer "+clientToken)
	if err := json.Unmarshal([]byte(body), &l); st != http.StatusOK || err != nil || len(l.Sagas) != 5 {
		t.Fatalf("GET /sagas with the client token = %d %s; want the 5 sagas", st, body)
	}
	id := l.Sagas[0].ID.String()
	for _, p := range []string{"/sagas", "/sagas/" + id, "/stats"} {
		if st, _, _ := call(t, base, "GET", p, ""); st != http.StatusUnauthorized {
			t.Errorf("GET %s without a token = %d, want 401", p, st)
		}
		if st, _, _ := call(t, base, "GET", p, "", "Authorization", "Bearer not-it"); st != http.StatusUnauthorized {
			t.Errorf("GET %s with a wrong token = %d, want 401", p, st)
		}
		for _, tok := range []string{clientToken, opsToken} {
			if st, _, body := call(t, base, "GET", p, "", "Authorization", "Bearer "+tok); st != http.StatusOK {
				t.Errorf("GET %s with token %q = %d %s", p, tok, st, body)
			}
		}
	}
	action := `{"actor": "alice", "reason": "test"}`
	for _, tok := range []string{"", "wrong", clientToken} {
		st, _, body := call(t, base, "POST", "/sagas/"+id+"/actions/compensate", action, "Content-Type", jsonCT, "Authorization", "Bearer "+tok)
		if st != http.StatusUnauthorized || !strings.Contains(body, "admin token") {
			t.Errorf("operator action with token %q = %d %s; want 401 asking for the admin token", tok, st, body)
		}
	}
	if st, _, body := call(t, base, "POST", "/sagas/"+id+"/actions/compensate", action, "Content-Type", jsonCT, "Authorization", "bearer "+opsToken); st != http.StatusOK {
		t.Errorf("compensate with the admin token = %d %s", st, body)
	}

	// A client token alone protects the starts, not the reads.
	startsOnly := newOpsEnv(t, &api.Config{ClientToken: clientToken})
	if st, _, _ := call(t, startsOnly.srv.URL, "POST", "/sagas", startJSON("o"), "Content-Type", jsonCT); st != http.StatusUnauthorized {
		t.Errorf("POST /sagas without a token when http.client_token is set = %d, want 401", st)
	}
	if st, _, _ := call(t, startsOnly.srv.URL, "POST", "/sagas", startJSON("o"), "Content-Type", jsonCT, "Authorization", "Bearer "+clientToken); st != http.StatusCreated {
		t.Errorf("POST /sagas with the client token = %d, want 201", st)
	}
	if st, _, _ := call(t, startsOnly.srv.URL, "GET", "/sagas", ""); st != http.StatusOK {
		t.Errorf("GET /sagas, reads not protected = %d, want 200", st)
	}
	if st, _, _ := call(t, startsOnly.srv.URL, "POST", "/sagas/"+uuid.NewString()+"/actions/retry", action, "Content-Type", jsonCT,
		"Authorization", "Bearer "+clientToken); st != http.StatusForbidden {
		t.Errorf("operator action without an admin token configured = %d, want 403", st)
	}
}

func TestProtectMetricsAndReadyz(t *testing.T) {
	t.Parallel()
	env := newOpsEnv(t, nil)
	srv := httptest.NewServer(newAPI(t, env.eng, &api.Config{AdminToken: opsToken, ClientToken: clientToken, ProtectMetrics: true, Gatherer: prometheus.NewRegistry()}))
	defer srv.Close()
	for _, p := range []string{"/metrics", "/readyz"} {
		if st, _, _ := call(t, srv.URL, "GET", p, ""); st != http.StatusUnauthorized {
			t.Errorf("GET %s without a token = %d, want 401", p, st)
		}
		for _, tok := range []string{clientToken, opsToken} {
			if st, _, _ := call(t, srv.URL, "GET", p, "", "Authorization", "Bearer "+tok); st != http.StatusOK {
				t.Errorf("GET %s with token %q = %d, want 200", p, tok, st)
			}
		}
	}
	if st, _, _ := call(t, srv.URL, "GET", "/healthz", ""); st != http.StatusOK {
		t.Errorf("GET /healthz = %d, want 200 without a token", st)
	}
	open := httptest.NewServer(newAPI(t, env.eng, &api.Config{Gatherer: prometheus.NewRegistry()}))
	defer open.Close()
	if st, _, _ := call(t, open.URL, "GET", "/metrics", ""); st != http.StatusOK {
		t.Errorf("GET /metrics, not protected = %d, want 200", st)
	}
}

func TestStartsAndActionsTakeJSONOnly(t *testing.T) {
	t.Parallel()
	env := newOpsEnv(t, nil)
	base := env.srv.URL
	body := startJSON("order-ct")
	for _, ct := range []string{"", "text/plain", "text/plain; charset=utf-8", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
		"application/json; charset=latin1", "application/jsonx", "application/json-seq", "json", strings.Repeat("x", 5000)} {
		h := []string{}
		if ct != "" {
			h = []string{"Content-Type", ct}
		}
		st, _, out := call(t, base, "POST", "/sagas", body, h...)
		if st != http.StatusUnsupportedMediaType || !strings.Contains(out, "application/json") || len(out) > 1500 {
			t.Errorf("POST /sagas with Content-Type %.40q = %d %.300s; want 415 naming application/json", ct, st, out)
		}
	}
	var n int
	if err := env.pool.QueryRow(context.Background(), `SELECT count(*) FROM orch.sagas`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d sagas after refused content types (%v)", n, err)
	}
	for i, ct := range []string{"application/json", "application/json; charset=utf-8", "Application/JSON; charset=UTF-8"} {
		if st, _, out := call(t, base, "POST", "/sagas", startJSON(fmt.Sprint("order-ct-", i)), "Content-Type", ct); st != http.StatusCreated {
			t.Errorf("POST /sagas with Content-Type %q = %d %s; want 201", ct, st, out)
		}
	}
	id := env.start(t, "order-action-ct")
	for _, ct := range []string{"", "text/plain", "application/x-www-form-urlencoded"} {
		st, _, out := call(t, base, "POST", "/sagas/"+id.String()+"/actions/compensate", `{"actor":"a","reason":"r"}`,
			"Content-Type", ct, "Authorization", "Bearer "+opsToken)
		if st != http.StatusUnsupportedMediaType {
			t.Errorf("operator action with Content-Type %q = %d %s; want 415", ct, st, out)
		}
	}
	if st, _, out := call(t, base, "POST", "/sagas/"+id.String()+"/actions/compensate", `{"actor":"a","reason":"r"}`,
		"Content-Type", "application/json; charset=utf-8", "Authorization", "Bearer "+opsToken); st != http.StatusOK {
		t.Errorf("operator action with JSON = %d %s; want 200", st, out)
	}
}

func TestSagaDataIsCapped(t *testing.T) {
	t.Parallel()
	env := newOpsEnv(t, nil)
	srv := httptest.NewServer(newAPI(t, env.eng, &api.Config{MaxDataBytes: 2048}))
	defer srv.Close()
	withData := func(key string, pad int) string {
		return fmt.Sprintf(`{"type": %q, "idempotency_key": %q, "aggregate_id": %q, "data": {"order_id": %q, "customer": "c%s", "sku": "s", "qty": 1, "amount_cents": 100}}`,
			orderapi.SagaType, key, key, key, strings.Repeat("n", pad))
	}
	for _, c := range []struct {
		name  string
		pad   int
		field string
		limit float64
	}{
		{"data over the cap", 3000, "data", 2048},
		{"body over the body's cap", 1 << 20, "", 2048 + 16<<10},
	} {
		st, _, body := call(t, srv.URL, "POST", "/sagas", withData("k-"+c.name, c.pad), "Content-Type", jsonCT)
		var e map[string]any
		_ = json.Unmarshal([]byte(body), &e)
		if st != http.StatusRequestEntityTooLarge || e["limit"] != c.limit || !strings.Contains(fmt.Sprint(e["error"]), "http.max_data_bytes") ||
			!strings.Contains(fmt.Sprint(e["error"]), "2048") || (c.field != "" && e["field"] != c.field) {
			t.Errorf("%s: %d %s; want 413 naming http.max_data_bytes (2048) with limit %v", c.name, st, body, c.limit)
		}
	}
	if st, _, body := call(t, srv.URL, "POST", "/sagas", withData("k-small", 1500), "Content-Type", jsonCT); st != http.StatusCreated {
		t.Errorf("data under the cap: %d %s; want 201", st, body)
	}
	// the default cap is 64 KiB
	if st, _, body := call(t, env.srv.URL, "POST", "/sagas", withData("k-default", api.DefaultMaxDataBytes), "Content-Type", jsonCT); st != http.StatusRequestEntityTooLarge || !strings.Contains(body, "65536") {
		t.Errorf("data over the default cap: %d %s; want 413 naming 65536", st, body)
	}
}

func TestServerLimitsHeaders(t *testing.T) {
	t.Parallel()
	env := newOpsEnv(t, nil)
	hardened(t, env, &api.Config{AdminToken: opsToken}, api.Limits{})
	if st, _, _ := call(t, env.srv.URL, "GET", "/healthz", "", "X-Padding", strings.Repeat("p", 60<<10)); st != http.StatusOK {
		t.Errorf("60 KiB of headers = %d, want 200", st)
	}
	for _, n := range []int{70 << 10, 200 << 10, 2 << 20} {
		st, _, body := call(t, env.srv.URL, "GET", "/healthz", "", "X-Padding", strings.Repeat("p", n))
		if st != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("%d KiB of headers = %d %.200s, want 431", n>>10, st, body)
		}
	}
	// spread over many headers too
	many := []string{}
	for i := range 200 {
		many = append(many, fmt.Sprintf("X-Pad-%d", i), strings.Repeat("q", 400))
	}
	if st, _, _ := call(t, env.srv.URL, "GET", "/healthz", "", many...); st != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("200 headers of 400 bytes = %d, want 431", st)
	}
}

func TestListItemsCarryNoDataStepsOrJournal(t *testing.T) {
	t.Parallel()
	env := newOpsEnv(t, nil)
	id := env.start(t, "order-summary")
	st, body := env.do(t, "GET", "/sagas", "", "")
	var raw struct {
		Sagas []map[string]json.RawMessage `json:"sagas"`
	}
	if err := json.Unmarshal([]byte(body), &raw); st != http.StatusOK || err != nil || len(raw.Sagas) != 1 {
		t.Fatalf("GET /sagas = %d %s (%v)", st, body, err)
	}
	item := raw.Sagas[0]
	for _, k := range []string{"data", "steps", "journal", "cursor"} {
		if _, ok := item[k]; ok {
			t.Errorf("list item has %q: %s", k, body)
		}
	}
	for _, k := range []string{"id", "type", "state", "current_step", "aggregate_id", "idempotency_key", "created_at", "updated_at", "definition_version", "version"} {
		if _, ok := item[k]; !ok {
			t.Errorf("list item lacks %q: %s", k, body)
		}
	}
	if string(item["id"]) != `"`+id.String()+`"` || string(item["current_step"]) != `"`+orderapi.StepReserveInventory+`"` {
		t.Errorf("list item %s: want saga %s at %s", body, id, orderapi.StepReserveInventory)
	}
	if strings.Contains(body, "sku-1") {
		t.Errorf("the list answer carries the saga's data: %s", body)
	}
}

// lateReplies answers saga id's first command, then sends n more answers
// to it: n late replies, journaled and ignored.
func lateReplies(t *testing.T, env *opsEnv, id uuid.UUID, n int) {
	t.Helper()
	ctx := context.Background()
	c, ok := env.nextCommand(t, id)
	if !ok {
		t.Fatal("no command")
	}
	payload, _ := json.Marshal(okOutputs[c.Step])
	var rs []message.Reply
	for range n + 1 {
		rs = append(rs, message.Reply{MessageID: uuid.New(), InReplyTo: c.MessageID, SagaID: id, Step: c.Step, Action: c.Action, Outcome: message.Success, Payload: payload})
	}
	if err := pgx.BeginFunc(ctx, env.pool, func(tx pgx.Tx) error { return env.eng.ApplyReply(ctx, tx, rs[0]) }); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(rs); i += 100 {
		batch := rs[i:min(i+100, len(rs))]
		if err := pgx.BeginFunc(ctx, env.pool, func(tx pgx.Tx) error {
			refused, err := env.eng.ApplyReplies(ctx, tx, batch)
			return errors.Join(append(refused, err)...)
		}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestJournalIsPaged(t *testing.T) {
	t.Parallel()
	env := newOpsEnv(t, nil)
	id := env.start(t, "order-late")
	lateReplies(t, env, id, 250)
	var total int
	if err := env.pool.QueryRow(context.Background(), `SELECT count(*) FROM orch.journal WHERE saga_id = $1`, id).Scan(&total); err != nil || total < 252 {
		t.Fatalf("journal has %d rows (%v); want the start, the reply and 250 late replies", total, err)
	}
	var newest int64
	if err := env.pool.QueryRow(context.Background(), `SELECT max(id) FROM orch.journal WHERE saga_id = $1`, id).Scan(&newest); err != nil {
		t.Fatal(err)
	}

	var v api.SagaView
	env.getJSON(t, "/sagas/"+id.String(), &v)
	if len(v.Journal) != api.JournalLimitDefault || v.JournalTotal != total || v.JournalNext == "" || v.Journal[len(v.Journal)-1].ID != newest {
		t.Fatalf("first page: %d entries, total %d, next %q, last id %d; want the newest %d of %d ending at %d with a cursor",
			len(v.Journal), v.JournalTotal, v.JournalNext, v.Journal[len(v.Journal)-1].ID, api.JournalLimitDefault, total, newest)
	}
	seen := map[int64]bool{}
	prev := int64(1 << 62)
	path := "/sagas/" + id.String() + "?journal_limit=70"
	for pages := 0; ; pages++ {
		var p api.SagaView
		env.getJSON(t, path, &p)
		if len(p.Journal) == 0 || len(p.Journal) > 70 {
			t.Fatalf("page %d has %d entries, limit 70", pages, len(p.Journal))
		}
		for i, j := range p.Journal {
			if seen[j.ID] || j.ID >= prev || (i > 0 && j.ID <= p.Journal[i-1].ID) {
				t.Fatalf("page %d: entry %d repeats or is out of order (previous page began at %d)", pages, j.ID, prev)
			}
			seen[j.ID] = true
		}
		prev = p.Journal[0].ID
		if p.JournalNext == "" {
			break
		}
		if p.JournalNext != fmt.Sprint(p.Journal[0].ID) || pages > 10 {
			t.Fatalf("page %d: next %q, first entry %d", pages, p.JournalNext, p.Journal[0].ID)
		}
		path = "/sagas/" + id.String() + "?journal_limit=70&journal_before=" + p.JournalNext
	}
	if len(seen) != total {
		t.Fatalf("paging saw %d entries of %d", len(seen), total)
	}
	for _, bad := range []string{"journal_limit=0", "journal_limit=1001", "journal_limit=x", "journal_before=-1", "journal_before=abc"} {
		st, body := env.do(t, "GET", "/sagas/"+id.String()+"?"+bad, "", "")
		if field, _, _ := strings.Cut(bad, "="); st != http.StatusBadRequest || !strings.Contains(body, `"field": "`+field+`"`) {
			t.Errorf("GET ?%s = %d %s; want 400 naming %s", bad, st, body, field)
		}
	}
	// the page links the older entries
	st, page := env.do(t, "GET", "/ui/sagas/"+id.String(), "", "")
	if st != http.StatusOK || !strings.Contains(page, `id="journal-older"`) || !strings.Contains(page, "?journal_before="+v.JournalNext) ||
		!strings.Contains(visible(page), fmt.Sprintf("100 of %d entries", total)) {
		t.Errorf("the saga page (%d) does not link the older journal entries", st)
	}
	if st, page := env.do(t, "GET", "/ui/sagas/"+id.String()+"?journal_before="+v.JournalNext, "", ""); st != http.StatusOK || !strings.Contains(page, "Newest entries") {
		t.Errorf("the older journal page (%d) does not link back to the newest", st)
	}
}

func TestLoginCookieHoldsASessionNotTheToken(t *testing.T) {
	t.Parallel()
	env := newOpsEnv(t, nil)
	cfg := &api.Config{AdminToken: opsToken, ClientToken: clientToken, ProtectReads: true}
	plain := httptest.NewServer(newAPI(t, env.eng, cfg))
	defer plain.Close()
	tls := httptest.NewTLSServer(newAPI(t, env.eng, cfg))
	defer tls.Close()
	login := func(srv *httptest.Server, tok string) *http.Response {
		t.Helper()
		c := srv.Client()
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		res, err := c.PostForm(srv.URL+"/ui/login", url.Values{"token": {tok}, "back": {"/ui/sagas?state=failed"}})
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res
	}
	if res := login(plain, "wrong"); res.StatusCode != http.StatusUnauthorized || len(res.Cookies()) != 0 {
		t.Fatalf("login with a wrong token = %d with cookies %v; want 401 and none", res.StatusCode, res.Cookies())
	}
	for _, c := range []struct {
		srv    *httptest.Server
		tok    string
		secure bool
	}{{plain, opsToken, false}, {plain, clientToken, false}, {tls, clientToken, true}} {
		res := login(c.srv, c.tok)
		cookies := res.Cookies()
		if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/ui/sagas?state=failed" || len(cookies) != 1 {
			t.Fatalf("login = %d to %q with %d cookies", res.StatusCode, res.Header.Get("Location"), len(cookies))
		}
		ck := cookies[0]
		sum := sha256.Sum256([]byte(c.tok))
		if !ck.HttpOnly || ck.Secure != c.secure || ck.SameSite != http.SameSiteStrictMode || ck.MaxAge != 12*3600 || ck.Path != "/ui/" {
			t.Errorf("cookie %s; want HttpOnly, Secure=%v, SameSite=Strict, Max-Age=43200, Path=/ui/", ck.String(), c.secure)
		}
		if strings.Contains(ck.Value, c.tok) || strings.Contains(ck.Value, hex.EncodeToString(sum[:])) || strings.Contains(ck.String(), c.tok) {
			t.Errorf("the cookie holds the token: %s", ck.String())
		}
		get := func(v string) int {
			req, _ := http.NewRequest("GET", c.srv.URL+"/ui/sagas", nil)
			req.AddCookie(&http.Cookie{Name: ck.Name, Value: v})
			res, err := c.srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			return res.StatusCode
		}
		if st := get(ck.Value); st != http.StatusOK {
			t.Errorf("page with the session cookie = %d, want 200", st)
		}
		parts := strings.Split(ck.Value, ".")
		if len(parts) != 3 {
			t.Fatalf("session value %q", ck.Value)
		}
		for _, forged := range []string{
			c.tok, "a." + parts[1] + "." + parts[2], parts[0] + ".9999999999." + parts[2], parts[0] + "." + parts[1] + ".AAAA" + parts[2][4:], "", "x.y.z",
		} {
			if forged == ck.Value {
				continue
			}
			if st := get(forged); st != http.StatusUnauthorized {
				t.Errorf("page with forged session %q = %d, want 401", forged, st)
			}
		}
	}
	// another server with other tokens refuses the session
	res := login(plain, clientToken)
	other := httptest.NewServer(newAPI(t, env.eng, &api.Config{AdminToken: "0ther-4dmin-9f1c2e7a5b3d8064", ClientToken: "0ther-c1ient-4e8a2f6c1b9d7035", ProtectReads: true}))
	defer other.Close()
	req, _ := http.NewRequest("GET", other.URL+"/ui/sagas", nil)
	req.AddCookie(res.Cookies()[0])
	r2, err := other.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r2.Body.Close()
	if r2.StatusCode != http.StatusUnauthorized {
		t.Errorf("a session of other tokens = %d, want 401", r2.StatusCode)
	}
}

func TestLoginRedirectsOnlyWithinUI(t *testing.T) {
	t.Parallel()
	env := newOpsEnv(t, &api.Config{AdminToken: opsToken, ProtectReads: true})
	c := env.srv.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	for back, want := range map[string]string{
		`/ui/../\evil.com`:                  "/ui/sagas",
		`//evil.com`:                        "/ui/sagas",
		`https://evil.com`:                  "/ui/sagas",
		`https://evil.com/ui/sagas`:         "/ui/sagas",
		`/ui/%2e%2e/x`:                      "/ui/sagas",
		`/ui/%2E%2e/%2e%2e/evil`:            "/ui/sagas",
		`/ui/..`:                            "/ui/sagas",
		`/ui//evil.com`:                     "/ui/sagas",
		`/ui/%2f%2fevil.com`:                "/ui/sagas",
		`/ui/\evil.com`:                     "/ui/sagas",
		`/ui/%5cevil.com`:                   "/ui/sagas",
		`/\evil.com`:                        "/ui/sagas",
		`\\evil.com`:                        "/ui/sagas",
		`javascript:alert(1)`:               "/ui/sagas",
		"/ui/\tsagas":                       "/ui/sagas",
		"/ui/sagas\r\nSet-Cookie: x=1":      "/ui/sagas",
		`/sagas`:                            "/ui/sagas",
		``:                                  "/ui/sagas",
		`/ui/sagas/abc`:                     "/ui/sagas/abc",
		`/ui/sagas?state=failed&stuck=true`: "/ui/sagas?state=failed&stuck=true",
		`/ui/sagas?next=//evil.com`:         "/ui/sagas?next=//evil.com",
	} {
		res, err := c.PostForm(env.srv.URL+"/ui/login", url.Values{"token": {opsToken}, "back": {back}})
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if loc := res.Header.Get("Location"); res.StatusCode != http.StatusSeeOther || loc != want {
			t.Errorf("back=%q: %d to %q, want 303 to %q", back, res.StatusCode, loc, want)
		}
	}
}

func TestEveryAnswerCarriesSecurityHeaders(t *testing.T) {
	t.Parallel()
	env := newOpsEnv(t, &api.Config{AdminToken: opsToken, Gatherer: prometheus.NewRegistry()})
	id := env.start(t, "order-headers")
	for _, r := range []struct{ method, path, body, ct string }{
		{"GET", "/sagas", "", ""}, {"GET", "/sagas/" + id.String(), "", ""}, {"GET", "/sagas/nope", "", ""}, {"GET", "/stats", "", ""},
		{"GET", "/healthz", "", ""}, {"GET", "/readyz", "", ""}, {"GET", "/metrics", "", ""}, {"GET", "/no-such-page", "", ""},
		{"GET", "/ui/sagas", "", ""}, {"GET", "/ui/sagas/" + id.String(), "", ""}, {"GET", "/ui/", "", ""},
		{"POST", "/sagas", "x", "text/plain"}, {"POST", "/sagas/" + id.String() + "/actions/retry", "{}", jsonCT},
		{"POST", "/ui/login", "token=x", "application/x-www-form-urlencoded"},
	} {
		_, h, _ := call(t, env.srv.URL, r.method, r.path, r.body, "Content-Type", r.ct)
		if h.Get("X-Content-Type-Options") != "nosniff" || !strings.Contains(h.Get("Content-Security-Policy"), "frame-ancestors 'none'") || h.Get("X-Frame-Options") != "DENY" {
			t.Errorf("%s %s: X-Content-Type-Options %q, CSP %q, X-Frame-Options %q", r.method, r.path,
				h.Get("X-Content-Type-Options"), h.Get("Content-Security-Policy"), h.Get("X-Frame-Options"))
		}
	}
}

func TestInternalErrorsDoNotShowTheDatabaseError(t *testing.T) {
	t.Parallel()
	env := newOpsEnv(t, nil)
	id := env.start(t, "order-500")
	var logs testkit.Output
	srv := httptest.NewServer(newAPI(t, env.eng, &api.Config{AdminToken: opsToken, Logger: slog.New(slog.NewJSONHandler(&logs, nil))}))
	defer srv.Close()
	if _, err := env.pool.Exec(context.Background(), `ALTER TABLE orch.sagas RENAME TO sagas_moved; ALTER TABLE orch.outbox RENAME TO outbox_moved`); err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct{ method, path, body string }{
		{"GET", "/sagas", ""}, {"GET", "/sagas/" + id.String(), ""}, {"GET", "/stats", ""},
		{"POST", "/sagas", startJSON("order-after")},
		{"POST", "/sagas/" + id.String() + "/actions/compensate", `{"actor":"a","reason":"r"}`},
	} {
		st, h, body := call(t, srv.URL, r.method, r.path, r.body, "Content-Type", jsonCT, "Authorization", "Bearer "+opsToken)
		var e api.Error
		_ = json.Unmarshal([]byte(body), &e)
		if st != http.StatusInternalServerError || e.Error != "internal error" || e.RequestID == "" || h.Get("X-Request-Id") != e.RequestID {
			t.Errorf("%s %s = %d %s; want 500 {error: internal error, request_id}", r.method, r.path, st, body)
		}
		for _, leak := range []string{"relation", "SQLSTATE", "does not exist", "orch."} {
			if strings.Contains(body, leak) {
				t.Errorf("%s %s: the answer shows the database error (%q): %s", r.method, r.path, leak, body)
			}
		}
		if log := logs.String(); !strings.Contains(log, e.RequestID) || !strings.Contains(log, "does not exist") {
			t.Errorf("%s %s: the log lacks request id %s with the database error", r.method, r.path, e.RequestID)
		}
	}
	for _, p := range []string{"/ui/sagas", "/ui/sagas/" + id.String()} {
		st, _, page := call(t, srv.URL, "GET", p, "")
		if st != http.StatusInternalServerError || strings.Contains(page, "relation") || strings.Contains(page, "orch.") || !strings.Contains(page, "request id") {
			t.Errorf("GET %s = %d; want 500 naming a request id without the database error:\n%s", p, st, visible(page))
		}
	}
}

func TestHandlerTimeoutAnswers503(t *testing.T) {
	t.Parallel()
	env := newOpsEnv(t, nil)
	srv := httptest.NewServer(newAPI(t, env.eng, &api.Config{HandlerTimeout: time.Nanosecond}))
	defer srv.Close()
	st, _, body := call(t, srv.URL, "GET", "/sagas", "")
	if st != http.StatusServiceUnavailable || !strings.Contains(body, "http.handler_timeout") || !strings.Contains(body, "request_id") {
		t.Fatalf("GET /sagas past the handler timeout = %d %s; want 503 naming http.handler_timeout", st, body)
	}
}

func TestErrorsEchoInputCut(t *testing.T) {
	t.Parallel()
	env := newOpsEnv(t, nil)
	long := strings.Repeat("z", 50_000)
	for _, r := range []struct{ method, path, body string }{
		{"POST", "/sagas", fmt.Sprintf(`{"type": %q, "idempotency_key": "k", "aggregate_id": "a", "data": {"order_id": "o"}}`, long)},
		{"POST", "/sagas", fmt.Sprintf(`{"type": "place-order", %q: 1}`, long)},
		{"GET", "/sagas?state=" + long[:8000], ""},
		{"GET", "/sagas?limit=" + long[:8000], ""},
		{"GET", "/sagas/" + long[:8000], ""},
		{"GET", "/stats?window=" + long[:8000], ""},
		{"POST", "/sagas/" + uuid.NewString() + "/actions/" + long[:8000], `{}`},
	} {
		st, _, body := call(t, env.srv.URL, r.method, r.path, r.body, "Content-Type", jsonCT, "Authorization", "Bearer "+opsToken)
		if st < 400 || st >= 500 || len(body) > 1500 || strings.Contains(body, long[:101]) || !strings.Contains(body, "bytes)") {
			t.Errorf("%s %.60s = %d with a %d-byte answer %.300s; want a 4xx with the input cut to 100 bytes", r.method, r.path, st, len(body), body)
		}
	}
}

// rawConn dials srv and returns the connection and a reader of it.
func rawConn(t *testing.T, srv *httptest.Server) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

// closedWithin reads c until the server closes it and returns how long
// that took; it fails the test past limit.
func closedWithin(t *testing.T, c net.Conn, rd *bufio.Reader, limit time.Duration) (time.Duration, string) {
	t.Helper()
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(limit))
	b, err := io.ReadAll(rd)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the server kept the connection open for %s (read %q)", limit, b)
	}
	return time.Since(start), string(b)
}

func TestSlowAndIdleClientsAreCutOff(t *testing.T) {
	t.Parallel()
	env := newOpsEnv(t, nil)
	hardened(t, env, &api.Config{}, api.Limits{ReadTimeout: time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: time.Second})

	// a body sent slowly: headers, 10 of 1000 bytes, then nothing
	c, rd := rawConn(t, env.srv)
	fmt.Fprintf(c, "POST /sagas HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"type\": \"")
	took, answer := closedWithin(t, c, rd, 5*time.Second)
	if took < 500*time.Millisecond {
		t.Errorf("the slow body's connection closed after %s, before the read timeout", took)
	}
	if answer != "" && !strings.HasPrefix(answer, "HTTP/1.1 400") {
		t.Errorf("the slow body got %q; want nothing or a 400", answer)
	}
	var n int
	if err := env.pool.QueryRow(context.Background(), `SELECT count(*) FROM orch.sagas`).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d sagas after a cut-off body (%v)", n, err)
	}

	// headers sent slowly
	c, rd = rawConn(t, env.srv)
	fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
	if took, _ := closedWithin(t, c, rd, 5*time.Second); took < 500*time.Millisecond {
		t.Errorf("the slow headers' connection closed after %s, before the read timeout", took)
	}

	// a keep-alive connection left idle
	c, rd = rawConn(t, env.srv)
	fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	res, err := http.ReadResponse(rd, nil)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET /healthz on the raw connection: %v", err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if took, _ := closedWithin(t, c, rd, 5*time.Second); took < 500*time.Millisecond {
		t.Errorf("the idle connection closed after %s, before the idle timeout", took)
	}
}

// A saga's awaited command id is never shown: command ids are keyed by the
// saga's secret, and showing one would let anyone who can read the API
// answer the command.
func TestSagaViewHidesCommandIDs(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	id := e.start("hide-ids")
	in, _, err := e.eng.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	awaited := in.Steps[in.Cursor].AwaitID.String()
	resp, err := http.Get(e.srv.URL + "/sagas/" + id.String())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /sagas/{id}: %d %s", resp.StatusCode, body)
	}
	if strings.Contains(string(body), awaited) || strings.Contains(string(body), "await_id") || strings.Contains(string(body), "secret") {
		t.Fatalf("GET /sagas/{id} shows the awaited command id or the secret: %s", body)
	}
}
