package cli_test

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/participants/holds"
)

// TestParticipantsServeHoldsBehindTheMetricsTokens runs the built binary's
// `participants --http-addr` with http.protect_metrics: GET /holds (like
// /metrics) answers 401 without a token or with a wrong one, and with the
// client or the admin token lists the holds, filtered by saga and by
// resource; it is read-only.
func TestParticipantsServeHoldsBehindTheMetricsTokens(t *testing.T) {
	t.Parallel()
	const admin, client = "7d1e3f5a7c9e1b3d5f7a9c1e3b5d7f9a", "e2c4a6f8b0d2e4c6a8f0b2d4c6e8a0f2"
	bin := testkit.BuildBinary(t, "../..")
	dbURL := testkit.Database(t)
	bs := testkit.Brokers(t)
	addr := testkit.FreeAddr(t)
	cmd := exec.Command(bin, "participants", "--http-addr", addr, "--brokers", bs[0], "--database-url", dbURL)
	cmd.Env = append(os.Environ(), "SAGAFLOW_SHUTDOWN_TIMEOUT=20s", "SAGAFLOW_KAFKA_PARTITIONS=2",
		"SAGAFLOW_HTTP_PROTECT_METRICS=true", "SAGAFLOW_HTTP_ADMIN_TOKEN="+admin, "SAGAFLOW_HTTP_CLIENT_TOKEN="+client)
	p := &serveProc{cmd: cmd, logs: &testkit.Output{}, done: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = p.logs, p.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("participants logs:\n%s", p.logs.String())
		}
	})
	do := func(method, path, token string) (int, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+addr+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, nil
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, body
	}
	testkit.Eventually(t, 60*time.Second, "participants /readyz answers 200 with the client token", func() (bool, error) {
		select {
		case err := <-p.done:
			t.Fatalf("participants exited: %v", err)
		default:
		}
		code, _ := do(http.MethodGet, "/readyz", client)
		return code == http.StatusOK, nil
	})

	pool := testkit.PoolURL(t, dbURL)
	ctx := testkit.Context(t, 30*time.Second)
	held, other := uuid.New(), uuid.New()
	inv := holds.For("inventory")
	if _, _, err := inv.Take(ctx, pool, held, "reserve-inventory", "sku-apple", 2); err != nil {
		t.Fatal(err)
	}
	if _, _, err := inv.Take(ctx, pool, other, "reserve-inventory", "sku-pear", 1); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		method, path, token string
		want                int
	}{
		{http.MethodGet, "/holds", "", http.StatusUnauthorized},
		{http.MethodGet, "/holds", "wrong-token-wrong-token-wrong-token", http.StatusUnauthorized},
		{http.MethodGet, "/metrics", "", http.StatusUnauthorized},
		{http.MethodGet, "/healthz", "", http.StatusOK},
		{http.MethodPost, "/holds", admin, http.StatusMethodNotAllowed},
		{http.MethodDelete, "/holds", admin, http.StatusMethodNotAllowed},
		{http.MethodGet, "/holds?saga=nope", client, http.StatusBadRequest},
	} {
		if code, body := do(c.method, c.path, c.token); code != c.want {
			t.Errorf("%s %s (token %v) = %d %s; want %d", c.method, c.path, c.token != "", code, body, c.want)
		}
	}
	for _, c := range []struct {
		query, token string
		want         []uuid.UUID
	}{
		{"", client, []uuid.UUID{held, other}},
		{"?saga=" + held.String(), admin, []uuid.UUID{held}},
		{"?resource=sku-pear", client, []uuid.UUID{other}},
		{"?resource=sku-plum", client, nil},
	} {
		code, body := do(http.MethodGet, "/holds"+c.query, c.token)
		var out holds.ListResponse
		if err := json.Unmarshal(body, &out); err != nil || code != http.StatusOK {
			t.Fatalf("GET /holds%s = %d %s (%v)", c.query, code, body, err)
		}
		got := map[uuid.UUID]bool{}
		for _, h := range out.Holds {
			if h.Participant != "inventory" || h.State != holds.Held {
				t.Errorf("GET /holds%s: %+v; want inventory's held holds", c.query, h)
			}
			got[h.SagaID] = true
		}
		if len(got) != len(c.want) {
			t.Errorf("GET /holds%s = %s; want the holds of %v", c.query, body, c.want)
		}
		for _, id := range c.want {
			if !got[id] {
				t.Errorf("GET /holds%s lacks saga %s: %s", c.query, id, body)
			}
		}
	}
	p.stop(t, 20*time.Second)
}
