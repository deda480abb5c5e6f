package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/internal/bench"
	"github.com/sagaflow/sagaflow/internal/testkit"
)

func databaseURL() string { return testkit.AdminURL() }

// A short closed-loop run of the generic saga end to end: every saga
// completes, and the cost figures are measured (not zero).
func TestRunGenericCompletesEverySaga(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 2*time.Minute)
	db := "sagaflow_bench_test_" + testkit.RandomSuffix(6)
	res, err := bench.Run(ctx, bench.Config{
		DatabaseURL: databaseURL(), Database: db, Brokers: testkit.Brokers(t),
		Saga: bench.SagaGeneric, Steps: 2, Warmup: 5, Sagas: 30, Concurrency: 8, MaxConns: 6,
	})
	t.Cleanup(func() { testkit.DropDatabase(t, db) })
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !res.AllComplete || res.Completed != 30 || res.Sagas != 30 {
		t.Fatalf("result %+v: want 30 of 30 sagas completed", res)
	}
	if res.SagasPerSecond <= 0 || res.StepsPerSecond != 2*res.SagasPerSecond {
		t.Fatalf("throughput %v sagas/s, %v steps/s; want > 0 and steps = 2 x sagas", res.SagasPerSecond, res.StepsPerSecond)
	}
	if !(res.LatencyP50Ms > 0 && res.LatencyP50Ms <= res.LatencyP99Ms && res.LatencyP99Ms <= res.LatencyMaxMs) {
		t.Fatalf("latencies p50 %v p99 %v max %v: want 0 < p50 <= p99 <= max", res.LatencyP50Ms, res.LatencyP99Ms, res.LatencyMaxMs)
	}
	// Each saga is at least its start and one transaction per step on each
	// side (participant, orchestrator).
	if res.XactPerSaga < 3 || res.WALBytesPerSaga <= 0 || res.CPUSecPerSaga <= 0 {
		t.Fatalf("per saga: %v transactions, %v WAL bytes, %v CPU s; want >= 3, > 0, > 0", res.XactPerSaga, res.WALBytesPerSaga, res.CPUSecPerSaga)
	}
	if res.SynchronousCommit == "" {
		t.Fatal("synchronous_commit not reported")
	}
	// The round trips are counted per group. A saga needs a start and, per
	// step, a transaction on each side, each one round trip at best (a
	// reply batch of kept sagas, a participant whose write goes with its
	// commit), and with 8 in flight a round trip may carry 8 sagas: at
	// least 5/8 per saga, about half of it on each side. The commands and
	// replies are dispatched right after their commits (their deletes are
	// the orchestrator's and the participants' round trips): the relays
	// only poll, less than a round trip per saga.
	if res.PGRoundTripsPerSaga < (1+2*2)/8.0 {
		t.Fatalf("%v Postgres round trips per saga, want >= 5/8", res.PGRoundTripsPerSaga)
	}
	var sum float64
	for _, g := range []string{"orchestrator", "participants"} {
		if res.PGRoundTrips[g] < 2/8.0 {
			t.Errorf("%s: %v round trips per saga, want >= 2/8 (all: %v)", g, res.PGRoundTrips[g], res.PGRoundTrips)
		}
	}
	if res.PGRoundTrips["relays"] >= 1 {
		t.Errorf("relays: %v round trips per saga, want < 1 with dispatch after commit (all: %v)", res.PGRoundTrips["relays"], res.PGRoundTrips)
	}
	for _, v := range res.PGRoundTrips {
		sum += v
	}
	if d := sum - res.PGRoundTripsPerSaga; d > 1e-9 || d < -1e-9 {
		t.Errorf("groups add up to %v, total is %v", sum, res.PGRoundTripsPerSaga)
	}
	// Every step of every saga is in the breakdown, in step order, and its
	// two parts fit inside the sagas' latencies.
	if len(res.StepHops) != 2 || res.StepHops[0].Step != bench.GenericStep(1) || res.StepHops[1].Step != bench.GenericStep(2) {
		t.Fatalf("step breakdown %+v, want step-1 and step-2", res.StepHops)
	}
	var sumP50 float64
	for _, h := range res.StepHops {
		if h.Count != 30 {
			t.Errorf("step %s: breakdown over %d sagas, want 30", h.Step, h.Count)
		}
		if !(h.CommandP50Ms > 0 && h.CommandP50Ms <= h.CommandP99Ms && h.ReplyP50Ms > 0 && h.ReplyP50Ms <= h.ReplyP99Ms) {
			t.Errorf("step %s: breakdown %+v, want 0 < p50 <= p99 for command and reply", h.Step, h)
		}
		sumP50 += h.CommandP50Ms + h.ReplyP50Ms
	}
	// One line per inbox consumer: the orchestrator's and each participant's.
	if len(res.Consumers) != 3 {
		t.Fatalf("consumer lines %+v, want the orchestrator and two participants", res.Consumers)
	}
	for _, c := range res.Consumers {
		if c.Records < 30 || c.Batches < 1 || c.Busy <= 0 || c.WaitMeanMs < 0 || c.BatchSizeMean < 1 {
			t.Errorf("consumer %+v: want at least 30 records in at least one batch, busy > 0", c)
		}
	}
	if sumP50 > res.LatencyMaxMs {
		t.Errorf("the steps' p50 parts add up to %.1f ms, more than the slowest saga (%.1f ms)", sumP50, res.LatencyMaxMs)
	}
}

func TestRunRejectsBadConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		cfg   bench.Config
		field string
	}{
		{"no url", bench.Config{}, "DatabaseURL"},
		{"saga", bench.Config{DatabaseURL: "postgres://x", Saga: "nope"}, "Config.Saga"},
		{"steps", bench.Config{DatabaseURL: "postgres://x", Steps: 99}, "Config.Steps"},
		{"rate", bench.Config{DatabaseURL: "postgres://x", Rate: -1}, "Config.Rate"},
		{"replicas without split", bench.Config{DatabaseURL: "postgres://x", Replicas: 2}, "Config.Replicas is 2 without Split"},
		{"too many replicas", bench.Config{DatabaseURL: "postgres://x", Split: true, Replicas: 99}, "Config.Replicas is 99"},
		{"negative replicas", bench.Config{DatabaseURL: "postgres://x", Split: true, Replicas: -1}, "Config.Replicas is -1"},
		{"limit without split", bench.Config{DatabaseURL: "postgres://x", CPULimit: 0.3}, "without Split"},
		{"negative limit", bench.Config{DatabaseURL: "postgres://x", Split: true, CPULimit: -1}, "Config.CPULimit is -1"},
		{"tiny limit", bench.Config{DatabaseURL: "postgres://x", Split: true, CPULimit: 0.001}, "at least 0.01"},
	} {
		_, err := bench.Run(context.Background(), tc.cfg)
		if err == nil || !bytes.Contains([]byte(err.Error()), []byte(tc.field)) {
			t.Errorf("%s: err = %v, want one naming %s", tc.name, err, tc.field)
		}
	}
}

func TestPlotDrawsBothSeries(t *testing.T) {
	t.Parallel()
	rs := []bench.Result{
		{Saga: "generic", Steps: 3, Mode: "closed", Concurrency: 8, SagasPerSecond: 100, LatencyP99Ms: 120},
		{Saga: "generic", Steps: 3, Mode: "closed", Concurrency: 32, SagasPerSecond: 300, LatencyP99Ms: 180},
		{Saga: "generic", Steps: 3, Mode: "closed", Concurrency: 128, SagasPerSecond: 350, LatencyP99Ms: 600},
	}
	var buf bytes.Buffer
	if err := bench.Plot(&buf, rs, "test plot"); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() != 1000 || b.Dy() != 600 {
		t.Fatalf("size %v, want 1000x600", b)
	}
	blue, red := 0, 0
	for y := range 600 {
		for x := range 1000 {
			r, g, b, _ := img.At(x, y).RGBA()
			switch {
			case b>>8 == 0xbf && r>>8 == 0x1f && g>>8 == 0x5f:
				blue++
			case r>>8 == 0xd0 && g>>8 == 0x3a:
				red++
			}
		}
	}
	if blue < 500 || red < 500 {
		t.Fatalf("%d throughput and %d latency pixels, want both lines drawn", blue, red)
	}
	if err := bench.Plot(&buf, nil, "empty"); err == nil {
		t.Fatal("Plot of no results did not fail")
	}
}

// A short --split run through the built binary: the orchestrator and the
// participants run as two worker processes, every saga completes, the CPU
// of all three processes is counted, and no worker outlives the run.
func TestSplitRunsWorkersAsProcesses(t *testing.T) {
	t.Parallel()
	bin := testkit.BuildBinary(t, "../..")
	ctx := testkit.Context(t, 2*time.Minute)
	db := "sagaflow_bench_split_test_" + testkit.RandomSuffix(6)
	t.Cleanup(func() { testkit.DropDatabase(t, db) })
	var stdout, stderr testkit.Output
	cmd := exec.CommandContext(ctx, bin, "bench", "--split", "--json", "--database-url", databaseURL(), "--database", db,
		"--steps", "2", "--warmup", "10", "--sagas", "100", "--concurrency", "16", "--max-conns", "6")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("bench --split: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	var res bench.Result
	if err := json.Unmarshal([]byte(stdout.String()), &res); err != nil {
		t.Fatalf("bench --split --json: %v\n%s", err, stdout.String())
	}
	if !res.Split || !res.AllComplete || res.Completed != 100 || res.Sagas != 100 {
		t.Fatalf("result %+v: want split, 100 of 100 sagas completed", res)
	}
	pids := map[int]string{}
	for _, p := range res.Processes {
		pids[p.PID] = p.Role
		if p.CPUSeconds <= 0 {
			t.Errorf("process %s (pid %d): %v CPU seconds, want > 0", p.Role, p.PID, p.CPUSeconds)
		}
	}
	if len(pids) != 3 || !slices.Equal(roles(res.Processes), []string{"driver", bench.RoleOrchestrator, bench.RoleParticipants}) {
		t.Fatalf("processes %+v: want driver, orchestrator and participants, three pids", res.Processes)
	}
	if res.CPUSecPerSaga <= 0 || res.XactPerSaga < 3 || res.WALBytesPerSaga <= 0 {
		t.Fatalf("per saga: %v CPU s, %v transactions, %v WAL bytes; want > 0, >= 3, > 0", res.CPUSecPerSaga, res.XactPerSaga, res.WALBytesPerSaga)
	}
	// The driver waited for its workers before exiting, so they are gone
	// (not even zombies: reaped).
	for _, p := range res.Processes[1:] {
		testkit.Eventually(t, 5*time.Second, fmt.Sprintf("%s worker (pid %d) gone", p.Role, p.PID), func() (bool, error) {
			return errors.Is(syscall.Kill(p.PID, 0), syscall.ESRCH), nil
		})
	}
}

// Replicas of each role in CPU-limited cgroups: two orchestrator and two
// participants worker processes, each confined to its limit (read back from
// its cgroup), every saga completes, and the cgroups are gone after.
func TestSplitReplicasRunInCPULimitedCgroups(t *testing.T) {
	t.Parallel()
	bin := testkit.BuildBinary(t, "../..")
	ctx := testkit.Context(t, 2*time.Minute)
	db := "sagaflow_bench_replicas_test_" + testkit.RandomSuffix(6)
	t.Cleanup(func() { testkit.DropDatabase(t, db) })
	var stdout, stderr testkit.Output
	cmd := exec.CommandContext(ctx, bin, "bench", "--split", "--replicas", "2", "--cpu-limit", "0.5", "--partitions", "2",
		"--json", "--database-url", databaseURL(), "--database", db,
		"--steps", "2", "--warmup", "10", "--sagas", "100", "--concurrency", "16", "--max-conns", "4")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("bench --split --replicas 2 --cpu-limit 0.5: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	var res bench.Result
	if err := json.Unmarshal([]byte(stdout.String()), &res); err != nil {
		t.Fatalf("bench --json: %v\n%s", err, stdout.String())
	}
	if !res.AllComplete || res.Completed != 100 || res.Replicas != 2 {
		t.Fatalf("result %+v: want 100 of 100 sagas completed by 2 replicas of each role", res)
	}
	want := []string{"driver", "orchestrator-1", "orchestrator-2", "participants-1", "participants-2"}
	if got := roles(res.Processes); !slices.Equal(got, want) {
		t.Fatalf("processes %v, want %v", got, want)
	}
	// Each worker is limited; each role worked (a replica's own share
	// of a short run may be under the kernel's 10 ms accounting tick).
	byRole := map[string]float64{}
	for _, p := range res.Processes[1:] {
		if p.CPULimit != 0.5 || p.PID <= 0 {
			t.Errorf("worker %s (pid %d): limit %v CPU; want 0.5", p.Role, p.PID, p.CPULimit)
		}
		byRole[strings.TrimRight(p.Role, "-0123456789")] += p.CPUSeconds
	}
	for _, role := range []string{bench.RoleOrchestrator, bench.RoleParticipants} {
		if byRole[role] <= 0 {
			t.Errorf("the %s workers used %v CPU seconds, want > 0", role, byRole[role])
		}
	}
	if res.Processes[0].CPULimit != 0 {
		t.Errorf("driver limited to %v CPU, want no limit", res.Processes[0].CPULimit)
	}
	left, err := filepath.Glob(filepath.Join(bench.CgroupRoot, fmt.Sprintf("sagaflow-bench-%d", cmd.Process.Pid)))
	if err != nil || len(left) != 0 {
		t.Fatalf("cgroups left after the run: %v %v", left, err)
	}
}

func roles(ps []bench.ProcessCPU) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Role)
	}
	return out
}

func TestRunGenericWithBatchForwardHandlers(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 2*time.Minute)
	db := "sagaflow_bench_test_" + testkit.RandomSuffix(6)
	t.Cleanup(func() { testkit.DropDatabase(t, db) })
	res, err := bench.Run(ctx, bench.Config{
		DatabaseURL: databaseURL(), Database: db, Brokers: testkit.Brokers(t),
		Saga: bench.SagaGeneric, Steps: 2, Warmup: 5, Sagas: 60, Concurrency: 30, MaxConns: 6, BatchForward: true,
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !res.AllComplete || res.Completed != 60 || !res.BatchForward {
		t.Fatalf("result %+v: want 60 of 60 sagas completed, batch_forward reported", res)
	}
	// Every saga (warm-up included) left exactly one effect per step.
	cfg, err := pgx.ParseConfig(databaseURL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.Database = db
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for i := 1; i <= 2; i++ {
		var rows, sagas int
		if err := conn.QueryRow(ctx, fmt.Sprintf(`SELECT count(*), count(DISTINCT saga_id) FROM bench_p%d.effects`, i)).Scan(&rows, &sagas); err != nil {
			t.Fatal(err)
		}
		if rows != 65 || sagas != 65 {
			t.Errorf("participant %d: %d effects of %d sagas, want 65 of 65", i, rows, sagas)
		}
	}
}
