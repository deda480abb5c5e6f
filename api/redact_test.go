package api_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/api"
	"github.com/sagaflow/sagaflow/inbox/dlq"
	"github.com/sagaflow/sagaflow/message"
)

// getRaw GETs path with the given Authorization (none when empty) or
// session cookie and returns the status and the body, with every base64
// "value" of a JSON answer decoded and appended, so that an id inside a
// record's value is seen too.
func getRaw(t *testing.T, srv *httptest.Server, path, auth string, cookie *http.Cookie) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", "Bearer "+auth)
	}
	if cookie != nil {
		req.AddCookie(cookie)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := string(raw)
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if s, ok := e.(string); ok && k == "value" {
					if b, err := base64.StdEncoding.DecodeString(s); err == nil {
						out += "\n" + string(b)
					}
				}
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	var v any
	if json.Unmarshal(raw, &v) == nil {
		walk(v)
	}
	return resp.StatusCode, out
}

// Command ids leave the read role's answers: a client (token or session)
// sees in their place their hash, in GET /dlq, /dlq/{id}, /dlq/audit,
// /outbox/dead and the /ui/dlq page; the admin sees them. The saga id
// stays visible.
func TestCommandIDsOnlyForTheAdminRole(t *testing.T) {
	t.Parallel()
	e := setup(t, adminToken)
	st, err := dlq.New(e.pool, "orch")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(newAPI(t, e.eng, &api.Config{AdminToken: adminToken, ClientToken: clientToken, ProtectReads: true, DeadLetters: st}))
	t.Cleanup(srv.Close)
	ctx := context.Background()
	sagaID, cmdID, replyID, deadCmd, doneCmd := uuid.New(), uuid.New(), uuid.New(), uuid.New(), uuid.New()
	reply, err := json.Marshal(map[string]any{"message_id": replyID, "in_reply_to": cmdID, "saga_id": sagaID, "step": "reserve-inventory",
		"action": "forward", "outcome": "success"})
	if err != nil {
		t.Fatal(err)
	}
	hdr := fmt.Sprintf(`{"message-id":%q,"saga-id":%q}`, replyID, sagaID)
	var dl int64
	if err := e.pool.QueryRow(ctx, `INSERT INTO orch.dead_letters (topic, partition, "offset", key, value, headers, message_id, reason)
VALUES ('saga.replies', 0, 7, $1, $2, $3, $4, $5) RETURNING id`, sagaID.String(), reply, hdr, replyID.String(),
		fmt.Sprintf("reply %s: in_reply_to %s is invalid", replyID, cmdID)).Scan(&dl); err != nil {
		t.Fatal(err)
	}
	cmd, err := json.Marshal(map[string]any{"message_id": deadCmd, "saga_id": sagaID, "step": "reserve-inventory", "action": "forward", "attempt": 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `INSERT INTO orch.outbox (topic, key, value, headers, dead_at, attempts, last_error)
VALUES ('inventory.commands', 'order-1', $1, $2, now(), 20, $3)`, cmd, fmt.Sprintf(`{"message-id":%q,"saga-id":%q}`, deadCmd, sagaID),
		"refused: message "+deadCmd.String()+" too large"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `INSERT INTO orch.ops_audit (actor, reason, action, target, detail) VALUES ('alice', 'fixed', 'dlq.redrive', 'dead_letters/1', $1)`,
		fmt.Sprintf(`{"message_id":%q}`, doneCmd)); err != nil {
		t.Fatal(err)
	}
	secrets := []uuid.UUID{cmdID, replyID, deadCmd, doneCmd}

	// The client's page session.
	jar := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := jar.PostForm(srv.URL+"/ui/login", url.Values{"token": {clientToken}, "back": {"/ui/dlq"}})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	var session *http.Cookie
	for _, c := range res.Cookies() {
		session = c
	}
	if session == nil {
		t.Fatal("client login set no session cookie")
	}

	paths := []string{"/dlq", fmt.Sprintf("/dlq/%d", dl), "/dlq/audit", "/outbox/dead", "/ui/dlq"}
	for _, p := range paths {
		for _, who := range []struct {
			name   string
			auth   string
			cookie *http.Cookie
		}{{"client token", clientToken, nil}, {"client session", "", session}} {
			if who.cookie != nil && !strings.HasPrefix(p, "/ui/") {
				continue // the session is the pages' only
			}
			code, body := getRaw(t, srv, p, who.auth, who.cookie)
			if code != http.StatusOK {
				t.Fatalf("GET %s as %s = %d: %s", p, who.name, code, body)
			}
			for _, id := range secrets {
				if strings.Contains(strings.ToLower(body), id.String()) {
					t.Fatalf("GET %s as %s shows the id %s: %s", p, who.name, id, body)
				}
			}
			if !strings.Contains(body, api.RedactedIDPrefix) {
				t.Fatalf("GET %s as %s has no redacted id: %s", p, who.name, body)
			}
		}
		code, body := getRaw(t, srv, p, adminToken, nil)
		if code != http.StatusOK || strings.Contains(body, api.RedactedIDPrefix) {
			t.Fatalf("GET %s as admin = %d, redacted: %s", p, code, body)
		}
	}
	// What the client sees instead: the hash logs carry; the saga id stays.
	_, body := getRaw(t, srv, fmt.Sprintf("/dlq/%d", dl), clientToken, nil)
	if !strings.Contains(body, api.RedactedIDPrefix+message.IDHash(cmdID)) || !strings.Contains(body, sagaID.String()) {
		t.Fatalf("client's dead letter lacks the command id's hash or the saga id: %s", body)
	}
	_, body = getRaw(t, srv, fmt.Sprintf("/dlq/%d", dl), adminToken, nil)
	if !strings.Contains(body, cmdID.String()) {
		t.Fatalf("admin's dead letter lacks the command id: %s", body)
	}
	_, body = getRaw(t, srv, "/outbox/dead", adminToken, nil)
	if !strings.Contains(body, deadCmd.String()) || !bytes.Contains([]byte(body), []byte(sagaID.String())) {
		t.Fatalf("admin's dead outbox rows lack the command id: %s", body)
	}
}
