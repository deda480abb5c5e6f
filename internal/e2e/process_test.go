package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sagaflow/sagaflow/internal/kafkaclient"
	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/steps"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

// proc is one OS process of the binary.
type proc struct {
	name   string
	cmd    *exec.Cmd
	output *testkit.Output
	done   chan struct{}
	err    error // valid once done is closed
}

// startProc starts bin with args and env. At cleanup it sends SIGTERM,
// then SIGKILL after 10s, and fails the test if the process did not stop
// by itself or exited with an error; on failure its output goes to the log.
func startProc(t *testing.T, bin, name string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, output: &testkit.Output{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout = p.output
	p.cmd.Stderr = p.output
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
			t.Errorf("%s exited before the test ended: %v", name, p.err)
		default:
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.done:
				if p.err != nil {
					t.Errorf("%s did not exit cleanly on SIGTERM: %v", name, p.err)
				}
			case <-time.After(10 * time.Second):
				_ = p.cmd.Process.Kill()
				<-p.done
				t.Errorf("%s did not stop within 10s of SIGTERM; killed", name)
			}
		}
		if t.Failed() {
			t.Logf("---- output of %s (%s) ----\n%s", name, strings.Join(args, " "), p.output.String())
		}
	})
	return p
}

// exited reports an error if p has already stopped.
func (p *proc) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited: %v", p.name, p.err)
	default:
		return nil
	}
}

type client struct {
	t    *testing.T
	base string
}

func (c client) do(method, path string, body any, out any) int {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			c.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			c.t.Fatalf("%s %s: %d %s: %v", method, path, resp.StatusCode, raw, err)
		}
	}
	return resp.StatusCode
}

type stepView struct {
	Name     string `json:"name"`
	Kind     string `json:"kind"`
	State    string `json:"state"`
	Attempts int    `json:"attempts"`
}

type sagaView struct {
	ID      string            `json:"id"`
	State   string            `json:"state"`
	Data    map[string]any    `json:"data"`
	Steps   []stepView        `json:"steps"`
	Journal []json.RawMessage `json:"journal"`
}

// TestSeparateProcesses runs the real binary as three OS processes (the
// development broker, the reference participants and the orchestrator with
// its HTTP API) that share nothing but Postgres and the broker, starts
// place-order sagas over HTTP and follows them to their end.
func TestSeparateProcesses(t *testing.T) {
	t.Parallel()
	dbURL := testkit.Database(t) // first: dropped after the processes stop
	bin := testkit.BuildBinary(t, "../..")

	brokers := os.Getenv("KAFKA_BROKERS")
	if len(kafkaclient.ParseBrokers(brokers)) == 0 {
		brokers = testkit.FreeAddr(t)
		b := startProc(t, bin, "dev-broker", nil, "dev-broker", "--addr", brokers)
		testkit.Eventually(t, 30*time.Second, "dev-broker accepting connections", func() (bool, error) {
			if err := b.exited(); err != nil {
				return false, err
			}
			c, err := net.DialTimeout("tcp", brokers, time.Second)
			if err != nil {
				return false, nil
			}
			return true, c.Close()
		})
	}
	prefix := "e2e" + testkit.RandomSuffix(4) + "."
	env := []string{
		"SAGAFLOW_DATABASE_URL=" + dbURL,
		"SAGAFLOW_KAFKA_BROKERS=" + brokers,
		"SAGAFLOW_KAFKA_TOPIC_PREFIX=" + prefix,
		"SAGAFLOW_KAFKA_REPLY_TOPIC=" + prefix + "saga.replies",
		"SAGAFLOW_ORCHESTRATOR_GROUP_ID=" + prefix + "orchestrator",
		"SAGAFLOW_KAFKA_PARTITIONS=4",
		"SAGAFLOW_DATABASE_MAX_CONNS=6",
	}
	parts := startProc(t, bin, "participants", env, "participants", "--seed-stock", "1000")
	httpAddr := testkit.FreeAddr(t)
	srv := startProc(t, bin, "serve", env, "serve", "--addr", httpAddr)
	c := client{t: t, base: "http://" + httpAddr}

	testkit.Eventually(t, 60*time.Second, "GET /readyz 200", func() (bool, error) {
		if err := errors.Join(srv.exited(), parts.exited()); err != nil {
			return false, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", c.base+"/readyz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})

	// 20 orders; every fourth is above the payment limit (100000 cents) and
	// must be declined at the pivot, hence compensated.
	const orders = 20
	skus := []string{"sku-apple", "sku-pear", "sku-plum", "sku-fig"}
	ids := map[string]bool{} // id -> declined
	for i := range orders {
		declined := i%4 == 3
		o := steps.Order{
			OrderID: fmt.Sprintf("e2e-order-%02d", i), Customer: fmt.Sprintf("cust-%d", i%3),
			SKU: skus[i%len(skus)], Qty: 1 + i%2, AmountCents: 5000 + int64(i)*100,
		}
		if declined {
			o.AmountCents = 150_000
		}
		var ans struct {
			ID      string `json:"id"`
			Created bool   `json:"created"`
		}
		body := map[string]any{"type": orderapi.SagaType, "idempotency_key": o.OrderID, "aggregate_id": o.OrderID, "data": o}
		if code := c.do("POST", "/sagas", body, &ans); code != http.StatusCreated || ans.ID == "" || !ans.Created {
			t.Fatalf("POST /sagas %s: %d %+v", o.OrderID, code, ans)
		}
		ids[ans.ID] = declined
	}

	final := map[string]sagaView{}
	testkit.Eventually(t, 60*time.Second, "every saga terminal", func() (bool, error) {
		if err := errors.Join(srv.exited(), parts.exited()); err != nil {
			return false, err
		}
		for id := range ids {
			if _, ok := final[id]; ok {
				continue
			}
			var v sagaView
			if code := c.do("GET", "/sagas/"+id, nil, &v); code != http.StatusOK {
				return false, fmt.Errorf("GET /sagas/%s: %d", id, code)
			}
			switch v.State {
			case "completed", "compensated", "failed":
				final[id] = v
			}
		}
		return len(final) == len(ids), nil
	})

	completed := 0
	for id, declined := range ids {
		v := final[id]
		if len(v.Journal) == 0 {
			t.Errorf("saga %s has no journal", id)
		}
		if len(v.Steps) != 6 {
			t.Errorf("saga %s has %d steps, want 6", id, len(v.Steps))
			continue
		}
		if !declined {
			completed++
			if v.State != "completed" {
				t.Errorf("saga %s (within the limit) is %s, want completed; steps %+v", id, v.State, v.Steps)
				continue
			}
			for _, s := range v.Steps {
				if s.State != "succeeded" || s.Attempts < 1 {
					t.Errorf("completed saga %s: step %s is %s after %d attempts, want succeeded", id, s.Name, s.State, s.Attempts)
				}
			}
			if v.Data["payment_id"] == nil || v.Data["shipment_id"] == nil {
				t.Errorf("completed saga %s: data %v lacks the step outputs", id, v.Data)
			}
			continue
		}
		if v.State != "compensated" {
			t.Errorf("saga %s (over the limit) is %s, want compensated; steps %+v", id, v.State, v.Steps)
			continue
		}
		want := map[string]string{
			orderapi.StepReserveInventory: "compensated", orderapi.StepLockCoupon: "compensated",
			orderapi.StepChargePayment: "failed", orderapi.StepCreateShipment: "pending", orderapi.StepAwardPoints: "pending",
			orderapi.StepConfirmStock: "pending",
		}
		for _, s := range v.Steps {
			if s.State != want[s.Name] {
				t.Errorf("compensated saga %s: step %s is %s, want %s", id, s.Name, s.State, want[s.Name])
			}
		}
	}

	var list struct {
		Sagas []sagaView `json:"sagas"`
	}
	if code := c.do("GET", "/sagas?state=completed&limit=100", nil, &list); code != http.StatusOK {
		t.Fatalf("GET /sagas?state=completed: %d", code)
	}
	listed := 0
	for _, s := range list.Sagas {
		if s.State != "completed" {
			t.Errorf("state=completed listed a %s saga", s.State)
		}
		if declined, ok := ids[s.ID]; ok && !declined {
			listed++
		}
	}
	if listed != completed || completed != orders-orders/4 {
		t.Errorf("GET /sagas?state=completed listed %d of our %d completed sagas (want %d)", listed, completed, orders-orders/4)
	}
}
