package api_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sagaflow/sagaflow/api"
)

func TestOpsGate(t *testing.T) {
	t.Parallel()
	const admin, client = "3f9c1a7e5b2d4c6e8a0b1d3f5e7c9a2b", "c4e6a8b0d2f4e6a8c0b2d4f6e8a0c2e4"
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "payload") })
	cases := []struct {
		name    string
		protect bool
		token   string
		want    int
	}{
		{"open, no token", false, "", http.StatusOK},
		{"open, client token", false, client, http.StatusOK},
		{"open, wrong token", false, "not-the-token-at-all-0000000000", http.StatusUnauthorized},
		{"protected, no token", true, "", http.StatusUnauthorized},
		{"protected, wrong token", true, "not-the-token-at-all-0000000000", http.StatusUnauthorized},
		{"protected, client token", true, client, http.StatusOK},
		{"protected, admin token", true, admin, http.StatusOK},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			g, err := api.NewOpsGate(api.OpsGateConfig{AdminToken: admin, ClientToken: client, Protect: c.protect})
			if err != nil {
				t.Fatal(err)
			}
			req := httptest.NewRequest(http.MethodGet, "/holds", nil)
			if c.token != "" {
				req.Header.Set("Authorization", "Bearer "+c.token)
			}
			rec := httptest.NewRecorder()
			g.Wrap(ok).ServeHTTP(rec, req)
			leaked := strings.Contains(rec.Body.String(), "payload")
			if rec.Code != c.want || leaked != (c.want == http.StatusOK) {
				t.Fatalf("%d %q; want %d and the payload only on 200", rec.Code, rec.Body, c.want)
			}
			if c.want == http.StatusUnauthorized && !strings.HasPrefix(rec.Header().Get("WWW-Authenticate"), "Bearer") {
				t.Fatalf("401 without a Bearer challenge: %v", rec.Header())
			}
		})
	}
}

func TestOpsGateCountsWrongTokens(t *testing.T) {
	t.Parallel()
	g, err := api.NewOpsGate(api.OpsGateConfig{ClientToken: "c4e6a8b0d2f4e6a8c0b2d4f6e8a0c2e4", Protect: true})
	if err != nil {
		t.Fatal(err)
	}
	h := g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	codes := map[int]int{}
	for range api.AuthFailureBurst + 2 {
		req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		req.Header.Set("Authorization", "Bearer guess-guess-guess-guess-guess")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		codes[rec.Code]++
		if rec.Code == http.StatusTooManyRequests && rec.Header().Get("Retry-After") == "" {
			t.Fatal("429 without Retry-After")
		}
	}
	if codes[http.StatusTooManyRequests] == 0 || codes[http.StatusUnauthorized] == 0 {
		t.Fatalf("answers to repeated wrong tokens: %v; want 401s, then 429s", codes)
	}
	if _, err := api.NewOpsGate(api.OpsGateConfig{Protect: true}); err == nil {
		t.Fatal("a protected gate without tokens: err = nil, want an error (nobody could pass)")
	}
}
