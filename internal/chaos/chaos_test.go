package chaos_test

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sagaflow/sagaflow/internal/chaos"
	"github.com/sagaflow/sagaflow/internal/cli"
	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/steps/orderapi"
	"github.com/sagaflow/sagaflow/steps/tripapi"
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
// timeout, Postgres cuts and latency, then checks every invariant. Its
// twin's count is given (about what a fault-free run of this seed
// completes), to keep the test short: TestHarnessTwin runs a real twin.
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
		TwinCompleted:  tinyTwinCompleted,
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
	// A quarter of them (chaos.TripShareDefault) are trips.
	if o, tr := res.ByType[orderapi.SagaType], res.ByType[tripapi.SagaType]; o == nil || tr == nil || o.Sagas != 30 || tr.Sagas != 10 {
		t.Errorf("by type %+v, want 30 place-order and 10 book-trip sagas", res.ByType)
	}
	if res.Duplicates == 0 && res.Stops == 0 && res.Cuts == 0 {
		t.Errorf("no fault was injected: %s", res.Line())
	}
	// Under load, 500 ms step timeouts can compensate every saga: goodput 0
	// is possible here (TestHarnessTwin, with longer timeouts, wants > 0).
	checkGoodput(t, res, 0)
	if res.Twin != nil || res.TwinCompleted == nil || *res.TwinCompleted != tinyTwinCompleted {
		t.Errorf("given twin count %d: twin %+v, twin_completed %v", tinyTwinCompleted, res.Twin, res.TwinCompleted)
	}
}

// TestHarnessPaymentProvider: the participants charge through the fake
// payment provider (answer later: the payment step is accepted, charged
// after the commit, completed by the provider's answer) while the
// participants processes are killed and stopped, so kills fall between a
// charge's intent, its call and its completion: every saga ends, every
// invariant holds, and the provider's own count of charges equals the
// ledger's, one per completed saga.
func TestHarnessPaymentProvider(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	db := fmt.Sprintf("sagaflow_chaos_provider_%d", os.Getpid())
	t.Cleanup(func() { testkit.DropDatabase(t, db) })
	res, err := chaos.Run(ctx, chaos.Config{
		Seed: 5, Sagas: 30, Duration: 12 * time.Second, FaultEvery: 600 * time.Millisecond,
		DatabaseURL: testkit.AdminURL(), Database: db,
		Faults:          []string{"kill", "stop"},
		QuiesceTimeout:  90 * time.Second,
		TwinCompleted:   24,
		PaymentProvider: true,
		Logger:          slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	t.Log(res.Line())
	if !res.OK() {
		t.Fatalf("violations (logs in %s):\n%v", res.WorkDir, res.Violations)
	}
	if got := res.Completed + res.Compensated; got != 30 {
		t.Errorf("completed %d + compensated %d = %d sagas, want 30", res.Completed, res.Compensated, got)
	}
	if res.Kills+res.Stops == 0 {
		t.Errorf("no kill or stop was injected: %s", res.Line())
	}
	if res.Completed == 0 || res.ProviderCharges != res.Completed {
		t.Errorf("the provider charged %d times for %d completed sagas, want one each", res.ProviderCharges, res.Completed)
	}
}

// tinyTwinCompleted is about what the fault-free twin of TestHarnessTiny's
// workload completes.
const tinyTwinCompleted = 31

// TestHarnessTwin runs a short harness with a real twin: the fault-free
// run of the same seed goes first, in its own database, and leaves no
// child and no session behind; both runs' logs stay in the work dir. The
// step timeouts are long enough for a loaded machine (at 500 ms, a twin
// running beside other tests compensated all its sagas) and the faults
// mild, so that both runs complete sagas.
func TestHarnessTwin(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	db := fmt.Sprintf("sagaflow_chaos_twintest_%d", os.Getpid())
	t.Cleanup(func() {
		testkit.DropDatabase(t, db)
		testkit.DropDatabase(t, db+chaos.TwinSuffix)
	})
	workDir := t.TempDir()
	const sagas = 16
	res, err := chaos.Run(ctx, chaos.Config{
		Seed: 3, Sagas: sagas, Duration: 6 * time.Second, FaultEvery: 700 * time.Millisecond, StepTimeout: 2 * time.Second,
		DatabaseURL: testkit.AdminURL(), Database: db, WorkDir: workDir,
		Faults: []string{"duplicate", "cut-postgres", "slow"}, Twin: true, QuiesceTimeout: 60 * time.Second,
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	t.Log(res.Line())
	if !res.OK() {
		t.Fatalf("violations (logs in %s):\n%v", res.WorkDir, res.Violations)
	}
	checkGoodput(t, res, math.SmallestNonzeroFloat64)
	tw := res.Twin
	switch {
	case tw == nil:
		t.Fatal("no twin figures")
	case tw.Completed+tw.Compensated != sagas:
		t.Errorf("twin: completed %d + compensated %d, want %d sagas", tw.Completed, tw.Compensated, sagas)
	case tw.FaultsInjected != 0:
		t.Errorf("twin injected %d faults", tw.FaultsInjected)
	case tw.Database != db+chaos.TwinSuffix:
		t.Errorf("twin database %q, want %q", tw.Database, db+chaos.TwinSuffix)
	case res.TwinCompleted == nil || *res.TwinCompleted != tw.Completed:
		t.Errorf("twin_completed %v, twin completed %d", res.TwinCompleted, tw.Completed)
	}
	for _, f := range []string{"twin/orchestrator-a.log", "twin/participants-2.log", "twin/chaos.yaml", "faults/orchestrator-b.log", "faults/chaos.yaml"} {
		if _, err := os.Stat(filepath.Join(workDir, f)); err != nil {
			t.Errorf("work dir: %v", err)
		}
	}
	a, errA := os.ReadFile(filepath.Join(workDir, "twin", "chaos.yaml"))
	b, errB := os.ReadFile(filepath.Join(workDir, "faults", "chaos.yaml"))
	if errA != nil || errB != nil || string(a) != string(b) {
		t.Errorf("the twin's children's configuration differs from the run's (%v, %v)", errA, errB)
	}

	// Nothing left: no child process naming either database, no session
	// on either (the killed children's backends may take a moment).
	if procs := processesNaming(t, db); len(procs) > 0 {
		t.Errorf("processes left after the run: %q", procs)
	}
	admin := testkit.PoolURL(t, testkit.AdminURL())
	testkit.Eventually(t, 15*time.Second, "no session on "+db+" and its twin", func() (bool, error) {
		var n int
		err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname IN ($1, $2)`, db, db+chaos.TwinSuffix).Scan(&n)
		return n == 0, err
	})
}

// checkGoodput wants goodput measured, in [least, ∞), and equal to
// completed over the twin's count.
func checkGoodput(t *testing.T, res chaos.Result, least float64) {
	t.Helper()
	switch g := res.Goodput; {
	case g == nil || res.TwinCompleted == nil:
		t.Errorf("goodput not measured: %s", res.Line())
	case !(*g >= least) || math.IsInf(*g, 1):
		t.Errorf("goodput %v, want it in [%v, ∞): %s", *g, least, res.Line())
	case *g != float64(res.Completed)/float64(*res.TwinCompleted):
		t.Errorf("goodput %v, want %d/%d", *g, res.Completed, *res.TwinCompleted)
	}
	if !strings.Contains(res.Line(), " goodput=") {
		t.Errorf("line lacks goodput: %s", res.Line())
	}
}

// processesNaming lists the command lines (Linux /proc) that contain s.
func processesNaming(t *testing.T, s string) []string {
	t.Helper()
	files, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var found []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		// Postgres backends name their database in their title; they are
		// sessions, checked below with a bounded wait, not children.
		if err == nil && strings.Contains(string(b), s) && !strings.HasPrefix(string(b), "postgres:") {
			found = append(found, strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return found
}

// The command line refuses goodput flags it cannot honour before running
// anything.
func TestChaosFlags(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--twin=false", "--min-goodput", "0.9"}, "--min-goodput needs goodput"},
		{[]string{"--twin-completed", "0"}, "want at least 1"},
		{[]string{"--min-goodput", "-1"}, "want >= 0"},
		{[]string{"--faults", "none,kill"}, "excludes every other kind"},
		{[]string{"--sagas", "10", "--twin-completed", "11"}, "TwinCompleted is 11"},
	} {
		var out, errb strings.Builder
		code := cli.Main(append([]string{"chaos"}, c.args...), &out, &errb)
		if code != 1 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("chaos %q: exit %d, stderr %q; want 1 and %q", c.args, code, errb.String(), c.want)
		}
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
