package api_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/sagaflow/sagaflow/api"
	"github.com/sagaflow/sagaflow/orchestrator"
)

// gateServer is an API whose gate is all a test calls: no route it calls
// reaches the engine.
func gateServer(t *testing.T, cfg *api.Config) *api.Server {
	t.Helper()
	return newAPI(t, (*orchestrator.Engine)(nil), cfg)
}

// gateCall sends one request from the address remote (host:port) with the
// headers (name, value pairs).
func gateCall(srv http.Handler, method, path, remote, body string, header ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.RemoteAddr = remote
	if body != "" {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, req)
	return rec
}

func loginForm(tok string) string {
	return url.Values{"token": {tok}, "back": {"/ui/sagas"}}.Encode()
}

// retryAfter checks that rec is a 429 with a Retry-After of 1 to
// api.AuthFailureRefill seconds.
func retryAfter(t *testing.T, what string, rec *httptest.ResponseRecorder) {
	t.Helper()
	if rec.Code != http.StatusTooManyRequests {
		t.Fatalf("%s: %d, want 429:\n%s", what, rec.Code, rec.Body)
	}
	secs, err := strconv.Atoi(rec.Header().Get("Retry-After"))
	if err != nil || secs < 1 || secs > int(api.AuthFailureRefill.Seconds()) {
		t.Fatalf("%s: Retry-After %q, want 1 to %.0f seconds", what, rec.Header().Get("Retry-After"), api.AuthFailureRefill.Seconds())
	}
	if len(rec.Result().Cookies()) > 0 {
		t.Fatalf("%s: a 429 sets a cookie", what)
	}
}

// TestWrongLoginsAreRateLimited: the review sent 40 wrong logins in a row
// and each was answered at once. Now a client has AuthFailureBurst wrong
// tokens, then 429 with Retry-After, even for the right token; another
// client still logs in.
func TestWrongLoginsAreRateLimited(t *testing.T) {
	t.Parallel()
	srv := gateServer(t, &api.Config{AdminToken: opsToken, ClientToken: clientToken, ProtectReads: true})
	const attacker, colleague = "198.51.100.7:40000", "198.51.100.8:40000"
	for i := range api.AuthFailureBurst {
		if rec := gateCall(srv, "POST", "/ui/login", attacker, loginForm("wrong-token-"+strconv.Itoa(i)+"-5c8e1f0a9d3b72c4")); rec.Code != http.StatusUnauthorized {
			t.Fatalf("wrong login %d: %d, want 401", i+1, rec.Code)
		}
	}
	for i := range 30 {
		retryAfter(t, "wrong login "+strconv.Itoa(api.AuthFailureBurst+i+1), gateCall(srv, "POST", "/ui/login", attacker, loginForm("wrong-token-again-5c8e1f0a9d3b72c4")))
	}
	rec := gateCall(srv, "POST", "/ui/login", attacker, loginForm(opsToken))
	retryAfter(t, "the right token from the limited client", rec)
	if !strings.Contains(rec.Body.String(), "Too many wrong tokens") {
		t.Errorf("the 429 login page does not say why:\n%s", rec.Body)
	}
	// The same client's bearer checks share the budget.
	retryAfter(t, "a bearer token from the limited client", gateCall(srv, "GET", "/sagas", attacker, "", "Authorization", "Bearer "+clientToken))
	// A request without a token is checked as before (it guesses nothing).
	if rec := gateCall(srv, "GET", "/sagas", attacker, ""); rec.Code != http.StatusUnauthorized {
		t.Errorf("no token from the limited client: %d, want 401", rec.Code)
	}
	rec = gateCall(srv, "POST", "/ui/login", colleague, loginForm(opsToken))
	if rec.Code != http.StatusSeeOther || len(rec.Result().Cookies()) != 1 {
		t.Fatalf("the right login from another client: %d %v, want 303 with the session", rec.Code, rec.Result().Cookies())
	}
}

// TestWrongBearerTokensAreRateLimited: failed bearer checks on the JSON
// API count as failed logins do, the 429 is JSON with Retry-After, and
// an IPv6 client is one client across its /64.
func TestWrongBearerTokensAreRateLimited(t *testing.T) {
	t.Parallel()
	srv := gateServer(t, &api.Config{AdminToken: opsToken, ClientToken: clientToken})
	for i := range api.AuthFailureBurst {
		remote := "[2001:db8:1:2::" + strconv.Itoa(i+1) + "]:5000" // one /64, many addresses
		if rec := gateCall(srv, "POST", "/sagas/actions/retry", remote, "", "Authorization", "Bearer wrong-"+strconv.Itoa(i)+"-token-0f9e8d7c6b5a"); rec.Code != http.StatusUnauthorized {
			t.Fatalf("wrong bearer %d: %d, want 401", i+1, rec.Code)
		}
	}
	rec := gateCall(srv, "GET", "/sagas", "[2001:db8:1:2::99]:5000", "", "Authorization", "Bearer "+opsToken)
	retryAfter(t, "the admin token from the limited /64", rec)
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/json") || !strings.Contains(rec.Body.String(), `"error"`) {
		t.Errorf("the 429 of the API is %q:\n%s", ct, rec.Body)
	}
	// Another /64 is another client.
	if rec := gateCall(srv, "POST", "/sagas/x/actions/retry", "[2001:db8:1:3::1]:5000", "{}", "Authorization", "Bearer "+opsToken); rec.Code == http.StatusTooManyRequests || rec.Code == http.StatusUnauthorized {
		t.Errorf("the admin token from another /64: %d", rec.Code)
	}
}

// TestRateLimitBehindAProxy: with trust_proxy the client is the last
// X-Forwarded-For address (what the proxy saw), so clients behind one
// proxy have budgets of their own and what a client writes in the header
// itself does not buy it a new one. Without trust_proxy the header is
// ignored.
func TestRateLimitBehindAProxy(t *testing.T) {
	t.Parallel()
	const proxy = "10.0.0.2:3456"
	srv := gateServer(t, &api.Config{AdminToken: opsToken, ClientToken: clientToken, TrustProxy: true})
	for i := range api.AuthFailureBurst {
		spoofed := "192.0.2." + strconv.Itoa(i+1) + ", 203.0.113.9"
		if rec := gateCall(srv, "POST", "/ui/login", proxy, loginForm("wrong-token-f1e2d3c4b5a69788"), "X-Forwarded-For", spoofed); rec.Code != http.StatusUnauthorized {
			t.Fatalf("wrong login %d behind the proxy: %d", i+1, rec.Code)
		}
	}
	retryAfter(t, "203.0.113.9 with yet another spoofed hop", gateCall(srv, "POST", "/ui/login", proxy, loginForm(opsToken), "X-Forwarded-For", "192.0.2.200, 203.0.113.9"))
	if rec := gateCall(srv, "POST", "/ui/login", proxy, loginForm(opsToken), "X-Forwarded-For", "203.0.113.10"); rec.Code != http.StatusSeeOther {
		t.Fatalf("another client behind the same proxy: %d, want 303", rec.Code)
	}

	direct := gateServer(t, &api.Config{AdminToken: opsToken, ClientToken: clientToken})
	for i := range api.AuthFailureBurst {
		gateCall(direct, "POST", "/ui/login", proxy, loginForm("wrong-token-f1e2d3c4b5a69788"), "X-Forwarded-For", "203.0.113."+strconv.Itoa(i+1))
	}
	retryAfter(t, "a new X-Forwarded-For without trust_proxy", gateCall(direct, "POST", "/ui/login", proxy, loginForm(opsToken), "X-Forwarded-For", "203.0.113.77"))
}

// TestSessionCookieSecure: the session cookie is Secure over TLS, with
// secure_cookie, and with trust_proxy when the proxy says the request came
// over HTTPS; not otherwise (a plain-HTTP development server).
func TestSessionCookieSecure(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		cfg    api.Config
		tls    bool
		header []string
		secure bool
	}{
		{name: "plain HTTP", secure: false},
		{name: "X-Forwarded-Proto without trust_proxy", header: []string{"X-Forwarded-Proto", "https"}, secure: false},
		{name: "trust_proxy, X-Forwarded-Proto https", cfg: api.Config{TrustProxy: true}, header: []string{"X-Forwarded-Proto", "https"}, secure: true},
		{name: "trust_proxy, X-Forwarded-Proto HTTPS", cfg: api.Config{TrustProxy: true}, header: []string{"X-Forwarded-Proto", "HTTPS"}, secure: true},
		{name: "trust_proxy, X-Forwarded-Proto http", cfg: api.Config{TrustProxy: true}, header: []string{"X-Forwarded-Proto", "http"}, secure: false},
		{name: "trust_proxy, no X-Forwarded-Proto", cfg: api.Config{TrustProxy: true}, secure: false},
		{name: "secure_cookie", cfg: api.Config{SecureCookie: true}, secure: true},
		{name: "TLS", tls: true, secure: true},
	} {
		cfg := tc.cfg
		cfg.AdminToken, cfg.ClientToken, cfg.ProtectReads = opsToken, clientToken, true
		srv := gateServer(t, &cfg)
		req := httptest.NewRequest("POST", "/ui/login", strings.NewReader(loginForm(clientToken)))
		if tc.tls {
			req = httptest.NewRequest("POST", "https://example.test/ui/login", strings.NewReader(loginForm(clientToken)))
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for i := 0; i+1 < len(tc.header); i += 2 {
			req.Header.Set(tc.header[i], tc.header[i+1])
		}
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		c := rec.Result().Cookies()
		if rec.Code != http.StatusSeeOther || len(c) != 1 {
			t.Fatalf("%s: login %d %v", tc.name, rec.Code, c)
		}
		if c[0].Secure != tc.secure || !c[0].HttpOnly || c[0].SameSite != http.SameSiteStrictMode {
			t.Errorf("%s: cookie Secure=%v HttpOnly=%v SameSite=%v, want Secure=%v, HttpOnly, SameSite=Strict", tc.name, c[0].Secure, c[0].HttpOnly, c[0].SameSite, tc.secure)
		}
	}
}

// TestWeakTokensRefused: api.New refuses a short token, a placeholder, a
// repeated character or pattern, and well-known words, naming the field;
// random ones pass.
func TestWeakTokensRefused(t *testing.T) {
	t.Parallel()
	for _, weak := range []string{
		"change-me", "changeme", "secret", "password", "admin", "token", "test", "choose-one", "s3cret-operator-token",
		strings.Repeat("a", 40), strings.Repeat("ab12", 8), "change-me-change-me-change-me", "please-replace-me-before-going-live",
		"abcdefghijklmnopqrstuvwxyz", "0123456789012345678901234567", "sagaflow-admin-token-2024-01-01", "my-secret-password-123456",
		"this is a token with spaces", "token-\u00e9\u00e9\u00e9-0f9e8d7c6b5a4f3e2d1c",
	} {
		if _, err := api.New((*orchestrator.Engine)(nil), &api.Config{AdminToken: weak}); err == nil || !strings.Contains(err.Error(), "Config.AdminToken") {
			t.Errorf("admin token %q: %v, want it refused naming Config.AdminToken", weak, err)
		}
		if _, err := api.New((*orchestrator.Engine)(nil), &api.Config{ClientToken: weak}); err == nil || !strings.Contains(err.Error(), "Config.ClientToken") {
			t.Errorf("client token %q: %v, want it refused naming Config.ClientToken", weak, err)
		}
	}
	for _, strong := range []string{opsToken, clientToken, adminToken, "Jq7_vR2mXk9-Lp4sWz8tYb3n", "3f1c9a7e-5b2d-4e8f-a6c0-d9b7e1f3a5c2"} {
		if why := api.WeakToken(strong); why != "" {
			t.Errorf("WeakToken(%q) = %q, want it accepted", strong, why)
		}
	}
}
