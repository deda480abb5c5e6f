package cli_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/internal/workload"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/participants/reference"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps"
)

type serveProc struct {
	cmd  *exec.Cmd
	logs *testkit.Output
	done chan error
}

func startServe(t *testing.T, bin, dbURL, brokers, addr string, grace time.Duration) *serveProc {
	t.Helper()
	cmd := exec.Command(bin, "serve", "--addr", addr, "--brokers", brokers, "--database-url", dbURL, "--log-format", "json")
	cmd.Env = append(os.Environ(), "SAGAFLOW_SHUTDOWN_TIMEOUT="+grace.String(), "SAGAFLOW_KAFKA_PARTITIONS=4",
		"SAGAFLOW_ORCHESTRATOR_TIMER_INTERVAL=50ms")
	p := &serveProc{cmd: cmd, logs: &testkit.Output{}, done: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = p.logs, p.logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start serve: %v", err)
	}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("serve logs:\n%s", p.logs.String())
		}
	})
	testkit.Eventually(t, 60*time.Second, "serve /readyz answers 200", func() (bool, error) {
		select {
		case err := <-p.done:
			return false, fmt.Errorf("serve exited before ready: %v\n%s", err, p.logs.String())
		default:
		}
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	return p
}

// stop sends SIGTERM and returns how long the process took to exit; it
// fails the test unless the exit code is 0 within grace (plus a margin for
// a loaded machine).
func (p *serveProc) stop(t *testing.T, grace time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	select {
	case err := <-p.done:
		took := time.Since(start)
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("%s exited with code %d after SIGTERM, want 0\n%s", p.cmd.Args[1], ee.ExitCode(), p.logs.String())
		} else if err != nil {
			t.Fatalf("%s after SIGTERM: %v", p.cmd.Args[1], err)
		}
		if took > grace {
			t.Errorf("%s took %s to exit after SIGTERM, want within shutdown.timeout %s", p.cmd.Args[1], took, grace)
		}
		return took
	case <-time.After(grace + 10*time.Second):
		t.Fatalf("%s still running %s after SIGTERM (shutdown.timeout %s)", p.cmd.Args[1], grace+10*time.Second, grace)
	}
	return 0
}

func terminal(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM sagaflow.sagas WHERE state IN ('completed', 'compensated', 'failed')`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestServeSIGTERMDrainsAndLosesNothing runs the built binary's `serve`
// with sagas flowing, sends SIGTERM mid-workload, expects exit code 0
// within shutdown.timeout, restarts serve and expects every saga to finish
// with the invariants intact.
func TestServeSIGTERMDrainsAndLosesNothing(t *testing.T) {
	t.Parallel()
	bin := testkit.BuildBinary(t, "../..")
	dbURL := testkit.Database(t)
	pool := testkit.PoolURL(t, dbURL)
	bs := testkit.Brokers(t)
	ctx := testkit.Context(t, 4*time.Minute)
	const grace = 20 * time.Second

	// The participants run in the test process, all the time.
	parts, err := reference.New(pool, reference.Options{Brokers: bs, Partitions: 4, ShippingFailRate: 0.2, PointsFailRate: 0.2, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	if err := parts.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	addr := testkit.FreeAddr(t)
	first := startServe(t, bin, dbURL, bs[0], addr, grace)

	schemas := workload.SchemasOf(orchestrator.SchemaDefault, parts)
	plan := workload.NewPlan(workload.Mix{Orders: 150, Seed: 5, OutOfStockRate: 0.1, CouponTakenRate: 0.1, DeclineRate: 0.1, LimitCents: 100_000})
	if err := workload.Seed(ctx, pool, schemas, plan); err != nil {
		t.Fatal(err)
	}
	pctx, stopParts := context.WithCancel(ctx)
	partsDone := make(chan error, 1)
	go func() { partsDone <- parts.Run(pctx) }()
	t.Cleanup(func() {
		stopParts()
		if err := <-partsDone; err != nil {
			t.Errorf("participants Run: %v", err)
		}
	})

	// Sagas are started through an engine on the same database: the rows
	// and the first commands are committed in the orchestrator's tables and
	// serve's relay publishes them.
	reg := saga.NewRegistry()
	if err := steps.Register(reg); err != nil {
		t.Fatal(err)
	}
	eng, err := orchestrator.NewEngine(pool, reg, &orchestrator.EngineConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := workload.StartAll(ctx, eng, plan, 8); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 2*time.Minute, "some sagas finished before SIGTERM", func() (bool, error) {
		return terminal(t, pool) >= 10, nil
	})
	took := first.stop(t, grace)
	done := terminal(t, pool)
	t.Logf("serve exited 0 %s after SIGTERM with %d of %d sagas terminal", took.Round(time.Millisecond), done, len(plan.Orders))
	if done >= len(plan.Orders) {
		t.Errorf("every saga was already terminal at SIGTERM: the test did not stop serve mid-workload")
	}
	if !bytes.Contains([]byte(first.logs.String()), []byte("shutting down")) {
		t.Errorf("serve did not log its shutdown:\n%s", first.logs.String())
	}

	second := startServe(t, bin, dbURL, bs[0], addr, grace)
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	left, err := workload.WaitTerminal(wctx, pool, orchestrator.SchemaDefault, 25*time.Millisecond)
	if err != nil || left != 0 {
		t.Fatalf("after restart: %d sagas not terminal (%v)", left, err)
	}
	rep, err := workload.Check(ctx, pool, schemas, plan.Stock, false)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.Sagas != len(plan.Orders) {
		t.Errorf("after SIGTERM and restart: %d sagas for %d orders, violations %v", rep.Sagas, len(plan.Orders), rep.Violations)
	}
	second.stop(t, grace)
}

// TestParticipantsHTTPAndSIGTERM runs the built binary's `participants
// --http-addr`: /healthz and /readyz answer, /metrics passes promtool and
// has the relay and outbox gauges of all eight outboxes (place-order's five
// participants and book-trip's three, participants.trips being on by
// default), and SIGTERM exits 0.
func TestParticipantsHTTPAndSIGTERM(t *testing.T) {
	t.Parallel()
	bin := testkit.BuildBinary(t, "../..")
	dbURL := testkit.Database(t)
	bs := testkit.Brokers(t)
	addr := testkit.FreeAddr(t)
	cmd := exec.Command(bin, "participants", "--http-addr", addr, "--brokers", bs[0], "--database-url", dbURL, "--seed-stock", "10")
	cmd.Env = append(os.Environ(), "SAGAFLOW_SHUTDOWN_TIMEOUT=20s", "SAGAFLOW_KAFKA_PARTITIONS=2")
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
	get := func(path string) (int, string, error) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		_, err = b.ReadFrom(resp.Body)
		return resp.StatusCode, b.String(), err
	}
	testkit.Eventually(t, 60*time.Second, "participants /readyz answers 200", func() (bool, error) {
		select {
		case err := <-p.done:
			return false, fmt.Errorf("participants exited: %v", err)
		default:
		}
		code, _, err := get("/readyz")
		return err == nil && code == http.StatusOK, nil
	})
	if code, body, err := get("/healthz"); err != nil || code != http.StatusOK {
		t.Errorf("/healthz = %d %q %v", code, body, err)
	}
	var scrape string
	testkit.Eventually(t, 30*time.Second, "outbox gauges of the eight participants", func() (bool, error) {
		_, body, err := get("/metrics")
		scrape = body
		return err == nil && strings.Count(body, "sagaflow_outbox_pending{") == len(reference.AllNames), nil
	})
	for _, name := range reference.TripNames {
		if !strings.Contains(scrape, `sagaflow_outbox_pending{outbox="`+name+`"}`) {
			t.Errorf("/metrics has no outbox gauge of %s:\n%s", name, scrape)
		}
	}
	if !strings.Contains(scrape, `sagaflow_inbox_messages_total{consumer=`) {
		t.Errorf("/metrics has no inbox counters:\n%s", scrape)
	}
	for _, want := range []string{"\nprocess_cpu_seconds_total ", "\ngo_goroutines ", "\nsagaflow_build_info{goversion="} {
		if !strings.Contains(scrape, want) {
			t.Errorf("/metrics has no %q (standard names, build info)", strings.TrimSpace(want))
		}
	}
	if strings.Contains(scrape, "sagaflow_process_") || strings.Contains(scrape, "sagaflow_go_") {
		t.Errorf("/metrics still has renamed standard metrics (sagaflow_process_*, sagaflow_go_*)")
	}
	pt := exec.Command("promtool", "check", "metrics")
	pt.Stdin = strings.NewReader(scrape)
	if out, err := pt.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics (install: apt-get install -y prometheus): %v\n%s", err, out)
	}
	p.stop(t, 20*time.Second)
}
