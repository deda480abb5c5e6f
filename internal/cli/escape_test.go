package cli_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sagaflow/sagaflow/api"
	"github.com/sagaflow/sagaflow/inbox/dlq"
	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/orchestrator"
)

// hostile rewrites the terminal's title, clears the screen, rings the bell,
// sends a C1 CSI (U+009B) and reverses the text (U+202E).
const hostile = "o-1\x1b]0;owned\x07\x1b[2J\r\u009b31m\u202eevil\x7f"

// requireInert fails if out holds a byte or character a terminal acts on:
// a control character other than newline, DEL, a C1 control or a bidi
// control.
func requireInert(t *testing.T, what, out string) {
	t.Helper()
	for i, r := range out {
		if r == '\n' {
			continue
		}
		if r < 0x20 || (r >= 0x7f && r <= 0x9f) || r == 0x202e || (r == utf8.RuneError && !strings.HasPrefix(out[i:], "\uFFFD")) {
			t.Fatalf("%s prints %U raw at byte %d:\n%q", what, r, i, out)
		}
	}
}

// TestCLIEscapesControlCharacters: keys, reasons, aggregate ids, topics,
// headers and values holding terminal escapes are printed escaped by every
// command that shows them (status, list, dlq list/show/outbox/audit,
// reconcile list, in text and JSON; an API error), on the real stack; the
// JSON stays the same JSON.
func TestCLIEscapesControlCharacters(t *testing.T) {
	t.Parallel()
	url := testkit.Database(t)
	pool := testkit.PoolURL(t, url)
	eng, failed, _ := seedOps(t, pool, orchestrator.SchemaDefault)
	ctx := context.Background()
	schema := orchestrator.SchemaDefault
	if _, err := pool.Exec(ctx, `UPDATE `+schema+`.sagas SET aggregate_id = $1, idempotency_key = $1, flag = $1 WHERE id = $2`, hostile, failed); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE `+schema+`.journal SET reason = $1, actor = $1 WHERE saga_id = $2`, hostile, failed); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO `+schema+`.dead_letters (topic, partition, "offset", key, value, headers, message_id, reason)
VALUES ('saga.replies', 0, 1, $1, convert_to($1, 'UTF8'), jsonb_build_object('trace', $1), $1, $1)`, hostile); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO `+schema+`.outbox (topic, key, value, dead_at, attempts, last_error) VALUES ('saga.replies', $1, 'v', now(), 20, $1)`, hostile); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO `+schema+`.reconcile_discrepancies (saga_id, step, kind, detail) VALUES ($1, $2, $2, $2)`, failed, hostile); err != nil {
		t.Fatal(err)
	}
	h, err := api.New(eng, &api.Config{AdminToken: "escape-test-admin-9f3c1a7e5b2d4068"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	db := "--database-url=" + url

	// The redrive's audit row carries the hostile actor and reason.
	var dl int64
	if err := pool.QueryRow(ctx, `SELECT id FROM `+schema+`.dead_letters`).Scan(&dl); err != nil {
		t.Fatal(err)
	}
	st, err := dlq.New(pool, schema, "saga.replies")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Redrive(ctx, []int64{dl}, dlq.Audit{Actor: "alice" + hostile, Reason: hostile}); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		args   []string
		json   bool
		escape string // the escaped form the text shows
	}{
		{args: []string{"status", failed.String(), "--api", srv.URL}, escape: `o-1\x1b]0;owned\x07\x1b[2J\r\u009b31m\u202eevil\x7f`},
		{args: []string{"status", failed.String(), "--api", srv.URL, "--json"}, json: true},
		{args: []string{"list", "--api", srv.URL}, escape: `\x1b`},
		{args: []string{"list", "--api", srv.URL, "--json"}, json: true},
		{args: []string{"list", "--api", srv.URL, "--json", "--all"}, json: true},
		{args: []string{"dlq", "list", "--redriven", db}, escape: `\x1b]0;owned\x07`},
		{args: []string{"dlq", "list", "--redriven", "--json", db}, json: true},
		{args: []string{"dlq", "show", "1", db}, escape: `key      o-1\x1b]0;owned\x07`},
		{args: []string{"dlq", "show", "1", "--json", db}, json: true},
		{args: []string{"dlq", "outbox", db}, escape: `\x1b[2J`},
		{args: []string{"dlq", "audit", db}, escape: `alice` + `o-1\x1b`},
		{args: []string{"reconcile", "list", db}, escape: `\u202eevil`},
		{args: []string{"reconcile", "list", "--json", db}, json: true},
	} {
		out, stderr, code := runCLI(t, c.args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", c.args, code, stderr)
		}
		requireInert(t, strings.Join(c.args[:2], " "), out)
		if c.json {
			var v any
			if err := json.Unmarshal([]byte(out), &v); err != nil {
				t.Fatalf("%v: not JSON any more: %v\n%s", c.args, err, out)
			}
			if b, _ := json.Marshal(v); !strings.Contains(string(b), `\u001b]0;owned\u0007`) {
				t.Errorf("%v: the JSON lost the value it carries:\n%s", c.args, out)
			}
		} else if !strings.Contains(out, c.escape) {
			t.Errorf("%v: output lacks the escaped %s:\n%s", c.args, c.escape, out)
		}
	}

	// A server answering raw control characters (not JSON's escapes) is
	// made inert too, and so is an error message the API sends.
	raw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/sagas/") {
			w.WriteHeader(http.StatusNotFound)
			b, _ := json.Marshal(map[string]string{"error": "no saga " + hostile})
			_, _ = w.Write(b)
			return
		}
		_, _ = w.Write([]byte(`{"sagas":[{"id":"x","type":"` + hostile + `"}]}`))
	}))
	t.Cleanup(raw.Close)
	out, _, code := runCLI(t, "list", "--json", "--api", raw.URL)
	if code != 0 {
		t.Fatalf("list --json from a raw server: exit %d", code)
	}
	requireInert(t, "list --json (raw server)", out)
	_, stderr, code := runCLI(t, "status", failed.String(), "--api", raw.URL)
	if code == 0 || !strings.Contains(stderr, `no saga o-1\x1b]0;owned`) {
		t.Fatalf("status against a raw 404: exit %d, stderr %q; want the API's error, escaped", code, stderr)
	}
	requireInert(t, "status error", stderr)
}
