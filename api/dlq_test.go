package api_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/sagaflow/sagaflow/api"
	"github.com/sagaflow/sagaflow/inbox/dlq"
)

// setupDLQ is setup with the orchestrator schema's dead-letter store and
// one dead letter and one dead outbox row in it.
func setupDLQ(t *testing.T, token string) (*env, int64, int64) {
	t.Helper()
	e := setup(t, token)
	st, err := dlq.New(e.pool, "orch")
	if err != nil {
		t.Fatal(err)
	}
	h, err := api.New(e.eng, &api.Config{AdminToken: token, DeadLetters: st})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	e.srv = srv
	ctx := context.Background()
	var dl, ob int64
	if err := e.pool.QueryRow(ctx, `INSERT INTO orch.dead_letters (topic, partition, "offset", key, value, headers, message_id, reason)
VALUES ('saga.replies', 2, 41, 'k', '{"x":1}', '{"message-id":"m-9"}', 'm-9', 'stray reply: not a command the saga sent') RETURNING id`).Scan(&dl); err != nil {
		t.Fatal(err)
	}
	if err := e.pool.QueryRow(ctx, `INSERT INTO orch.outbox (topic, key, value, dead_at, attempts, last_error)
VALUES ('inventory.commands', 'order-1', 'v', now(), 20, 'unknown topic') RETURNING id`).Scan(&ob); err != nil {
		t.Fatal(err)
	}
	return e, dl, ob
}

func TestDeadLetterEndpoints(t *testing.T) {
	t.Parallel()
	e, dl, ob := setupDLQ(t, adminToken)
	auth := []string{"Authorization", "Bearer " + adminToken}

	code, out := e.do("GET", "/dlq", nil)
	if code != 200 || len(out["dead_letters"].([]any)) != 1 || out["counts"].(map[string]any)["dead_outbox"] != 1.0 {
		t.Fatalf("GET /dlq = %d %v; want the dead letter and counts", code, out)
	}
	code, out = e.do("GET", fmt.Sprintf("/dlq/%d", dl), nil)
	if code != 200 || out["topic"] != "saga.replies" || out["value"] == nil {
		t.Fatalf("GET /dlq/%d = %d %v", dl, code, out)
	}
	code, out = e.do("GET", "/dlq/999999", nil)
	wantError(t, "unknown dead letter", code, out, 404, "id")
	code, out = e.do("GET", "/dlq?limit=0", nil)
	wantError(t, "bad limit", code, out, 400, "limit")

	body := map[string]any{"actor": "alice", "reason": "reply consumer fixed"}
	code, out = e.do("POST", fmt.Sprintf("/dlq/%d/redrive", dl), body)
	wantError(t, "redrive without token", code, out, 401, "")
	code, out = e.do("POST", fmt.Sprintf("/dlq/%d/redrive", dl), map[string]any{"actor": "alice"}, auth...)
	wantError(t, "redrive without reason", code, out, 400, "reason")
	code, out = e.do("POST", fmt.Sprintf("/dlq/%d/redrive", dl), body, auth...)
	if code != 200 || len(out["ids"].([]any)) != 1 {
		t.Fatalf("redrive = %d %v", code, out)
	}
	code, out = e.do("POST", fmt.Sprintf("/dlq/%d/redrive", dl), body, auth...)
	wantError(t, "second redrive", code, out, 409, "id")
	code, out = e.do("POST", "/dlq/redrive", body, auth...)
	wantError(t, "bulk redrive without all or filter", code, out, 400, "all")
	code, out = e.do("POST", "/dlq/redrive", map[string]any{"actor": "alice", "reason": "r", "all": true}, auth...)
	if code != 200 || len(out["ids"].([]any)) != 0 {
		t.Fatalf("bulk redrive with nothing open = %d %v; want no ids", code, out)
	}

	code, out = e.do("GET", "/outbox/dead", nil)
	if code != 200 || len(out["rows"].([]any)) != 1 {
		t.Fatalf("GET /outbox/dead = %d %v", code, out)
	}
	code, out = e.do("POST", fmt.Sprintf("/outbox/dead/%d/requeue", ob), body, auth...)
	if code != 200 || len(out["ids"].([]any)) != 1 {
		t.Fatalf("requeue = %d %v", code, out)
	}
	code, out = e.do("POST", fmt.Sprintf("/outbox/dead/%d/requeue", ob), body, auth...)
	wantError(t, "second requeue", code, out, 404, "id")

	code, out = e.do("GET", "/dlq/audit", nil)
	if code != 200 || len(out["audit"].([]any)) != 2 {
		t.Fatalf("GET /dlq/audit = %d %v; want the redrive and the requeue", code, out)
	}
}

func TestDeadLetterActionsDisabledWithoutToken(t *testing.T) {
	t.Parallel()
	e, dl, _ := setupDLQ(t, "")
	code, out := e.do("POST", fmt.Sprintf("/dlq/%d/redrive", dl), map[string]any{"actor": "a", "reason": "r"})
	wantError(t, "redrive without admin token configured", code, out, 403, "")
}

func TestDeadLetterPage(t *testing.T) {
	t.Parallel()
	e, dl, ob := setupDLQ(t, adminToken)
	get := func(path string) (int, string) {
		res, err := http.Get(e.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	code, page := get("/ui/dlq")
	if code != 200 || !strings.Contains(page, "stray reply: not a command the saga sent") || !strings.Contains(page, "unknown topic") {
		t.Fatalf("GET /ui/dlq = %d:\n%s", code, page)
	}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	post := func(path string, form url.Values) (int, string, string) {
		res, err := noRedirect.PostForm(e.srv.URL+path, form)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, res.Header.Get("Location"), string(b)
	}
	code, _, page = post(fmt.Sprintf("/ui/dlq/redrive/%d", dl), url.Values{"actor": {"a"}, "reason": {"r"}, "token": {"wrong"}})
	if code != 401 || !strings.Contains(page, "Nothing was changed") {
		t.Fatalf("redrive with a wrong token = %d:\n%s", code, page)
	}
	code, loc, _ := post(fmt.Sprintf("/ui/dlq/redrive/%d", dl), url.Values{"actor": {"a"}, "reason": {"r"}, "token": {adminToken}})
	if code != 303 || loc != "/ui/dlq?done=redrive" {
		t.Fatalf("redrive = %d to %q", code, loc)
	}
	code, loc, _ = post(fmt.Sprintf("/ui/dlq/requeue/%d", ob), url.Values{"actor": {"a"}, "reason": {"r"}, "token": {adminToken}})
	if code != 303 || loc != "/ui/dlq?done=requeue" {
		t.Fatalf("requeue = %d to %q", code, loc)
	}
	code, page = get("/ui/dlq?done=requeue&redriven=true")
	if code != 200 || !strings.Contains(page, "requeued") || !strings.Contains(page, "dlq.redrive") || !strings.Contains(page, "outbox.requeue") {
		t.Fatalf("page after the repairs = %d:\n%s", code, page)
	}
}
