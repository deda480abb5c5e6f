package chaos_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/sagaflow/sagaflow/chaos"
	"github.com/sagaflow/sagaflow/cli"
	"github.com/sagaflow/sagaflow/testkit"
)

// TestMain lets the test binary stand in for the orchestrator binary: the
// harness re-executes it with chaos.ChildEnv set and a subcommand (serve,
// participants), which runs the command line instead of the tests.
func TestMain(m *testing.M) {
	if os.Getenv(chaos.ChildEnv) == "1" {
		os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// TestHarnessTiny runs a small harness: two replicas and two participant
// processes of this binary under duplicates, SIGSTOPs past the step
// timeout, Postgres cuts and latency, then checks every invariant.
func TestHarnessTiny(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	db := fmt.Sprintf("sagaflow_chaos_test_%d", os.Getpid())
	t.Cleanup(func() { testkit.DropDatabase(t, db) })
	res, err := chaos.Run(ctx, chaos.Config{
		Seed: 7, Sagas: 40, Duration: 12 * time.Second, FaultEvery: 400 * time.Millisecond,
		DatabaseURL: testkit.AdminURL(), Database: db,
		Faults:         []string{"duplicate", "stop", "cut-postgres", "slow"},
		QuiesceTimeout: 90 * time.Second,
		Logger:         slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	t.Log(res.Line())
	if !res.OK() {
		t.Fatalf("violations (logs in %s):\n%v", res.WorkDir, res.Violations)
	}
	if got := res.Completed + res.Compensated; got != 40 {
		t.Errorf("completed %d + compensated %d = %d sagas, want 40", res.Completed, res.Compensated, got)
	}
	if res.Duplicates == 0 && res.Stops == 0 && res.Cuts == 0 {
		t.Errorf("no fault was injected: %s", res.Line())
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
