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
	st, err := dlq.New(e.pool, "orch", "saga.replies")
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
	// A requeue that finds nothing to do says why, as a redrive does: 409
	// for a row that is not dead (live again, or sent), 404 for none.
	code, out = e.do("POST", fmt.Sprintf("/outbox/dead/%d/requeue", ob), body, auth...)
	wantError(t, "second requeue", code, out, 409, "id")
	if msg, _ := out["error"].(string); !strings.Contains(msg, "live") {
		t.Fatalf("second requeue says %q; want that the row is live", msg)
	}
	if _, err := e.pool.Exec(context.Background(), `UPDATE orch.outbox SET sent_at = '2026-12-02T10:00:00Z' WHERE id = $1`, ob); err != nil {
		t.Fatal(err)
	}
	code, out = e.do("POST", fmt.Sprintf("/outbox/dead/%d/requeue", ob), body, auth...)
	wantError(t, "requeue of a sent row", code, out, 409, "id")
	if msg, _ := out["error"].(string); !strings.Contains(msg, "sent at 2026-12-02T10:00:00Z") {
		t.Fatalf("requeue of a sent row says %q; want when it was sent", msg)
	}
	code, out = e.do("POST", "/outbox/dead/999999/requeue", body, auth...)
	wantError(t, "requeue of no row", code, out, 404, "id")

	code, out = e.do("GET", "/dlq/audit", nil)
	if code != 200 || len(out["audit"].([]any)) != 2 {
		t.Fatalf("GET /dlq/audit = %d %v; want the redrive and the requeue", code, out)
	}
}

// TestRedriveRefusesTopicsTheSchemaDoesNotConsume: a dead letter naming a
// topic the orchestrator does not consume (its reply topic only) is not
// redriven: 409 by id and in bulk, 400 for a bulk filter on that topic, the
// error naming the topic and the allowed one; nothing is enqueued.
func TestRedriveRefusesTopicsTheSchemaDoesNotConsume(t *testing.T) {
	t.Parallel()
	e, _, _ := setupDLQ(t, adminToken)
	auth := []string{"Authorization", "Bearer " + adminToken}
	ctx := context.Background()
	var foreign int64
	if err := e.pool.QueryRow(ctx, `INSERT INTO orch.dead_letters (topic, partition, "offset", key, value, headers, message_id, reason)
VALUES ('payments.ledger', 0, 7, 'k', '{}', '{}', 'm-7', 'r') RETURNING id`).Scan(&foreign); err != nil {
		t.Fatal(err)
	}
	named := func(what string, out map[string]any) {
		t.Helper()
		msg, _ := out["error"].(string)
		if !strings.Contains(msg, `"payments.ledger"`) || !strings.Contains(msg, "saga.replies") {
			t.Fatalf("%s: error %q; want the topic and the allowed one named", what, msg)
		}
	}
	body := map[string]any{"actor": "alice", "reason": "fixed"}
	code, out := e.do("POST", fmt.Sprintf("/dlq/%d/redrive", foreign), body, auth...)
	wantError(t, "redrive of a foreign topic", code, out, 409, "topic")
	named("redrive of a foreign topic", out)
	code, out = e.do("POST", "/dlq/redrive", map[string]any{"actor": "alice", "reason": "r", "all": true}, auth...)
	wantError(t, "bulk redrive over a foreign topic", code, out, 409, "topic")
	named("bulk redrive over a foreign topic", out)
	code, out = e.do("POST", "/dlq/redrive", map[string]any{"actor": "alice", "reason": "r", "topic": "payments.ledger"}, auth...)
	wantError(t, "bulk redrive filtered to a foreign topic", code, out, 400, "topic")
	named("bulk redrive filtered to a foreign topic", out)
	var n int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM orch.outbox WHERE topic = 'payments.ledger'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d outbox rows to payments.ledger (%v), want none", n, err)
	}
	code, out = e.do("POST", "/dlq/redrive", map[string]any{"actor": "alice", "reason": "r", "topic": "saga.replies"}, auth...)
	if code != 200 || len(out["ids"].([]any)) != 1 {
		t.Fatalf("bulk redrive filtered to the reply topic = %d %v; want the one dead letter", code, out)
	}
}

// TestBulkRedriveNamesWhatItDidBeforeAFailure: a bulk redrive commits a
// batch at a time; when a later batch fails, the answer is a 500 that
// lists the dead letters already redriven, and the same request again
// redrives the rest once the cause is gone.
func TestBulkRedriveNamesWhatItDidBeforeAFailure(t *testing.T) {
	t.Parallel()
	e, first, _ := setupDLQ(t, adminToken)
	auth := []string{"Authorization", "Bearer " + adminToken}
	ctx := context.Background()
	// dlq.BatchSize more, so the last one is in the second batch, and a
	// trigger that refuses its copy in the outbox.
	if _, err := e.pool.Exec(ctx, `INSERT INTO orch.dead_letters (topic, partition, "offset", key, value, headers, message_id, reason)
SELECT 'saga.replies', 0, i, CASE WHEN i = $1 THEN 'poison' ELSE 'k' || i END, '{}', '{}', 'm-' || i, 'r'
FROM generate_series(1, $1) AS i`, dlq.BatchSize); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `CREATE FUNCTION orch.refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.key = 'poison' THEN
    RAISE EXCEPTION 'poison refused';
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER refuse_poison BEFORE INSERT ON orch.outbox FOR EACH ROW EXECUTE FUNCTION orch.refuse_poison();`); err != nil {
		t.Fatal(err)
	}
	body := map[string]any{"actor": "alice", "reason": "replies fixed", "all": true}
	code, out := e.do("POST", "/dlq/redrive", body, auth...)
	if code != 500 {
		t.Fatalf("bulk redrive with a failing second batch = %d %v; want 500", code, out)
	}
	done, _ := out["done"].([]any)
	if len(done) != dlq.BatchSize || done[0] != float64(first) {
		t.Fatalf("bulk redrive's answer lists %d done (first %v); want the first batch, %d from id %d: %v", len(done), done[:min(len(done), 1)], dlq.BatchSize, first, out)
	}
	if msg, _ := out["error"].(string); !strings.Contains(msg, fmt.Sprintf("after %d rows were repaired", dlq.BatchSize)) || out["request_id"] == "" {
		t.Fatalf("bulk redrive's error = %v; want what was done and a request id", out)
	}
	var redriven, open int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE redriven_at IS NOT NULL), count(*) FILTER (WHERE redriven_at IS NULL) FROM orch.dead_letters`).Scan(&redriven, &open); err != nil {
		t.Fatal(err)
	}
	if redriven != dlq.BatchSize || open != 1 {
		t.Fatalf("after the failure %d dead letters are redriven and %d open; want %d and 1", redriven, open, dlq.BatchSize)
	}
	if _, err := e.pool.Exec(ctx, `DROP TRIGGER refuse_poison ON orch.outbox`); err != nil {
		t.Fatal(err)
	}
	code, out = e.do("POST", "/dlq/redrive", body, auth...)
	if ids, _ := out["ids"].([]any); code != 200 || len(ids) != 1 {
		t.Fatalf("bulk redrive again = %d %v; want the one left", code, out)
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
