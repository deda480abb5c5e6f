package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/api"
	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/orchestrator"
)

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestReadyzAnswersAGenericReason: /readyz showed the raw connection error
// to anyone (the Postgres user, database and host, the broker's address).
// Now it says which dependency, with a request id; the log has the rest
// under that id. On the real stack: a Postgres role that does not exist,
// a broker nobody listens on.
func TestReadyzAnswersAGenericReason(t *testing.T) {
	t.Parallel()
	admin, err := pgx.ParseConfig(testkit.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	badPG := testkit.PoolURL(t, fmt.Sprintf("postgres://sntl_ready_user@%s:%d/sntl_ready_db?sslmode=disable", admin.Host, admin.Port))
	deadBroker := testkit.FreeAddr(t)
	goodPG := testkit.Pool(t)
	for _, c := range []struct {
		name    string
		ready   func(context.Context) error
		reason  string
		secrets []string
	}{
		{"postgres refuses the user", orchestrator.Readiness(badPG, []string{deadBroker}, nil, nil), orchestrator.ReasonPostgres,
			[]string{"sntl_ready_user", "sntl_ready_db", admin.Host}},
		{"no broker", orchestrator.Readiness(goodPG, []string{deadBroker}, nil, nil), orchestrator.ReasonKafka, []string{deadBroker}},
		{"an error without a reason", func(context.Context) error { return errors.New("dial sntl-host-7:5432 as sntl_user") }, "not ready",
			[]string{"sntl-host-7", "sntl_user"}},
	} {
		var logs syncBuffer
		srv := newAPI(t, (*orchestrator.Engine)(nil), &api.Config{Ready: c.ready, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		rec := gateCall(srv, "GET", "/readyz", "192.0.2.1:1000", "")
		var body map[string]string
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("%s: /readyz = %d %s", c.name, rec.Code, rec.Body)
		}
		if body["status"] != "not ready" || body["error"] != c.reason || body["request_id"] == "" || rec.Header().Get("X-Request-Id") != body["request_id"] {
			t.Errorf("%s: /readyz answered %v, want not ready, %q and a request id", c.name, body, c.reason)
		}
		for _, s := range c.secrets {
			if strings.Contains(rec.Body.String(), s) {
				t.Errorf("%s: /readyz shows %q: %s", c.name, s, rec.Body)
			}
		}
		line := ""
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "request_id="+body["request_id"]) {
				line = l
			}
		}
		if !strings.Contains(line, c.secrets[0]) {
			t.Errorf("%s: the log has no line with request id %s and the details %q:\n%s", c.name, body["request_id"], c.secrets[0], logs.String())
		}
	}
}
