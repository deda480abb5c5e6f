package cli_test

import (
	"strings"
	"testing"
)

// strongA and strongC are tokens serve accepts.
const (
	strongA = "9b1e4f7a2c8d05e3b6a1f9c4d7e2a8b5"
	strongC = "e5c2a9f1b7d4083c6e1a5f9b2d8c4a7e"
)

// TestServeRefusesNonLoopbackWithoutTokens: serve listened on every
// interface with anonymous starts and reads, and only logged a warning.
// Now an address beyond loopback needs both tokens, and the error names
// the keys to set; nothing is connected to first.
func TestServeRefusesNonLoopbackWithoutTokens(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		addr, yaml string
		says       []string
	}{
		{"0.0.0.0:0", "", []string{`http.addr "0.0.0.0:0" is not a loopback address`, "http.admin_token (SAGAFLOW_HTTP_ADMIN_TOKEN)", "http.client_token (SAGAFLOW_HTTP_CLIENT_TOKEN)"}},
		{":0", "", []string{`http.addr ":0" is not a loopback address`, "http.admin_token", "http.client_token"}},
		{"[::]:0", "http:\n  admin_token: " + strongA + "\n", []string{"set http.client_token (SAGAFLOW_HTTP_CLIENT_TOKEN)"}},
		{"192.0.2.10:8080", "http:\n  client_token: " + strongC + "\n", []string{"set http.admin_token (SAGAFLOW_HTTP_ADMIN_TOKEN)"}},
		{"example.com:8080", "", []string{`"example.com:8080" is not a loopback address`}},
	} {
		args := []string{"serve", "--brokers", "127.0.0.1:1", "--addr", c.addr}
		if c.yaml != "" {
			args = append(args, "--config", writeConfig(t, c.yaml))
		}
		_, stderr, code := runCLI(t, args...)
		if code != 1 {
			t.Errorf("serve --addr %s: exit %d, want 1; stderr %q", c.addr, code, stderr)
		}
		for _, s := range c.says {
			if !strings.Contains(stderr, s) {
				t.Errorf("serve --addr %s: stderr %q does not say %q", c.addr, stderr, s)
			}
		}
	}
}

// TestServeRefusesWeakTokens: a short token, a placeholder (the docs'
// example values among them) or a repeated character is refused at start,
// naming the key.
func TestServeRefusesWeakTokens(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ yaml, says string }{
		{"http:\n  admin_token: change-me\n", "config: http.admin_token: refused: it is 9 characters long; at least 24"},
		{"http:\n  admin_token: choose-one\n", "config: http.admin_token: refused"},
		{"http:\n  client_token: " + strings.Repeat("x", 32) + "\n", "config: http.client_token: refused: it is one character repeated"},
		{"http:\n  admin_token: " + strongA + "\n  client_token: change-me-please-change-me-now\n", "config: http.client_token: refused: it holds the placeholder"},
		{"http:\n  admin_token: my-secret-admin-password-2024\n", "config: http.admin_token: refused: it is made of well-known words"},
	} {
		_, stderr, code := runCLI(t, "serve", "--config", writeConfig(t, c.yaml), "--brokers", "127.0.0.1:1", "--addr", "127.0.0.1:0")
		if code != 1 || !strings.Contains(stderr, c.says) {
			t.Errorf("serve with %q: exit %d, stderr %q; want 1 saying %q", c.yaml, code, stderr, c.says)
		}
	}
}
