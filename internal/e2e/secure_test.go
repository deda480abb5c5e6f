package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/steps"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

// readyz returns /readyz's status code and its error text.
func readyz(base string) (int, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/readyz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var body struct {
		Error string `json:"error"`
	}
	_ = json.Unmarshal(raw, &body)
	return resp.StatusCode, body.Error, nil
}

// TestSecuredBrokerProcesses runs the dev broker with SASL/SCRAM over TLS
// as its own process. A `serve` without credentials stays not ready and
// says why; `participants` and `serve` with the CA and credentials (from
// the environment, as an operator would set them) become ready and run
// sagas to their end.
func TestSecuredBrokerProcesses(t *testing.T) {
	t.Parallel()
	dbURL := testkit.Database(t)
	bin := testkit.BuildBinary(t, "../..")
	files := testkit.MakeTLSFiles(t)
	brokers := testkit.FreeAddr(t)
	b := startProc(t, bin, "dev-broker", nil, "dev-broker", "--addr", brokers,
		"--sasl-mechanism", "SCRAM-SHA-512", "--sasl-user", "saga", "--sasl-password", "pa55-word",
		"--tls-cert", files.Cert, "--tls-key", files.Key)
	testkit.Eventually(t, 30*time.Second, "dev-broker listening", func() (bool, error) {
		if err := b.exited(); err != nil {
			return false, err
		}
		return strings.Contains(b.output.String(), "listening"), nil
	})
	prefix := "sec" + testkit.RandomSuffix(4) + "."
	base := []string{
		"SAGAFLOW_DATABASE_URL=" + dbURL,
		"SAGAFLOW_KAFKA_BROKERS=" + brokers,
		"SAGAFLOW_KAFKA_TOPIC_PREFIX=" + prefix,
		"SAGAFLOW_KAFKA_REPLY_TOPIC=" + prefix + "saga.replies",
		"SAGAFLOW_ORCHESTRATOR_GROUP_ID=" + prefix + "orchestrator",
		"SAGAFLOW_KAFKA_PARTITIONS=2",
		"SAGAFLOW_DATABASE_MAX_CONNS=6",
		"SAGAFLOW_KAFKA_TLS_ENABLED=true",
		"SAGAFLOW_KAFKA_TLS_CA_FILE=" + files.CA,
	}
	creds := append(append([]string(nil), base...),
		"SAGAFLOW_KAFKA_SASL_MECHANISM=SCRAM-SHA-512",
		"SAGAFLOW_KAFKA_SASL_USERNAME=saga",
		"SAGAFLOW_KAFKA_SASL_PASSWORD=pa55-word",
	)

	// Without credentials: the process runs, but is not ready, and says so.
	// (It cannot create its topics either; it keeps retrying.)
	anonAddr := testkit.FreeAddr(t)
	anon := startProc(t, bin, "serve without credentials", append(base, "SAGAFLOW_ORCHESTRATOR_GROUP_ID="+prefix+"anon"), "serve", "--addr", anonAddr)
	var reason string
	testkit.Eventually(t, 60*time.Second, "GET /readyz of the serve without credentials answering 503 with a reason", func() (bool, error) {
		if err := anon.exited(); err != nil {
			return false, err
		}
		code, why, err := readyz("http://" + anonAddr)
		if err != nil || code == 0 {
			return false, nil
		}
		if code == http.StatusOK {
			return false, errors.New("a serve without SASL credentials reports ready")
		}
		if code != http.StatusServiceUnavailable || why == "" {
			return false, fmt.Errorf("GET /readyz answered %d %q, want 503 with a reason", code, why)
		}
		reason = why
		// First "starting", then "... keeps failing" once a prepare attempt
		// has failed; the broker's refusal itself goes to the log only.
		return strings.Contains(why, "keeps failing"), nil
	})
	if strings.Contains(reason, brokers) || strings.Contains(reason, "SASL") || strings.Contains(reason, "127.0.0.1") {
		t.Errorf("the not-ready reason %q shows the details: they belong in the log", reason)
	}
	testkit.Eventually(t, 10*time.Second, "the log of the serve without credentials to say why it is not ready", func() (bool, error) {
		return strings.Contains(anon.output.String(), "TLS or SASL"), nil
	})
	if strings.Contains(anon.output.String(), "pa55-word") {
		t.Error("the password appears in a log")
	}
	t.Logf("not ready without credentials: %s", reason)

	parts := startProc(t, bin, "participants", creds, "participants", "--seed-stock", "1000")
	httpAddr := testkit.FreeAddr(t)
	srv := startProc(t, bin, "serve", creds, "serve", "--addr", httpAddr)
	c := client{t: t, base: "http://" + httpAddr}
	testkit.Eventually(t, 60*time.Second, "GET /readyz 200 with credentials", func() (bool, error) {
		if err := errors.Join(srv.exited(), parts.exited()); err != nil {
			return false, err
		}
		code, _, err := readyz(c.base)
		return err == nil && code == http.StatusOK, nil
	})
	ids := map[string]bool{}
	for i := range 6 {
		o := steps.Order{OrderID: fmt.Sprintf("sec-order-%d", i), Customer: "cust", SKU: "sku-apple", Qty: 1, AmountCents: 1000}
		var ans struct {
			ID string `json:"id"`
		}
		body := map[string]any{"type": orderapi.SagaType, "idempotency_key": o.OrderID, "aggregate_id": o.OrderID, "data": o}
		if code := c.do("POST", "/sagas", body, &ans); code != http.StatusCreated || ans.ID == "" {
			t.Fatalf("POST /sagas: %d %+v", code, ans)
		}
		ids[ans.ID] = true
	}
	testkit.Eventually(t, 90*time.Second, "every saga completed over the secured broker", func() (bool, error) {
		if err := errors.Join(srv.exited(), parts.exited()); err != nil {
			return false, err
		}
		for id := range ids {
			var v sagaView
			if code := c.do("GET", "/sagas/"+id, nil, &v); code != http.StatusOK {
				return false, fmt.Errorf("GET /sagas/%s: %d", id, code)
			}
			switch v.State {
			case "completed":
			case "compensated", "failed":
				return false, fmt.Errorf("saga %s is %s, want completed", id, v.State)
			default:
				return false, nil
			}
		}
		return true, nil
	})
	for _, p := range []*proc{srv, parts} {
		if strings.Contains(p.output.String(), "pa55-word") {
			t.Errorf("the password appears in the log of %s", p.name)
		}
	}
}
