package bench

import "testing"

func TestMedianTakesEachFigureAlone(t *testing.T) {
	runs := []Result{
		{SagasPerSecond: 900, LatencyP99Ms: 300, CPUSecPerSaga: 0.002, Sagas: 10, Completed: 10, AllComplete: true, Processes: []ProcessCPU{{Role: "bench"}}},
		{SagasPerSecond: 1200, LatencyP99Ms: 100, CPUSecPerSaga: 0.001, Sagas: 10, Completed: 9, NotComplete: 1, AllComplete: false},
		{SagasPerSecond: 1000, LatencyP99Ms: 200, CPUSecPerSaga: 0.003, Sagas: 10, Completed: 10, AllComplete: true},
	}
	m, err := Median(runs)
	if err != nil {
		t.Fatal(err)
	}
	if m.SagasPerSecond != 1000 || m.LatencyP99Ms != 200 || m.CPUSecPerSaga != 0.002 {
		t.Fatalf("medians %v/s p99 %v cpu %v, want 1000, 200, 0.002", m.SagasPerSecond, m.LatencyP99Ms, m.CPUSecPerSaga)
	}
	if m.Sagas != 30 || m.Completed != 29 || m.NotComplete != 1 || m.AllComplete {
		t.Fatalf("counts %d/%d/%d all=%v, want 30/29/1 false", m.Sagas, m.Completed, m.NotComplete, m.AllComplete)
	}
	if m.Processes != nil {
		t.Fatalf("processes kept: %v", m.Processes)
	}
	even, err := Median(runs[:2])
	if err != nil || even.SagasPerSecond != 1050 {
		t.Fatalf("median of two runs: %v (%v), want 1050", even.SagasPerSecond, err)
	}
	if _, err := Median(nil); err == nil {
		t.Fatal("median of no runs: no error")
	}
}

func TestParseHostTicks(t *testing.T) {
	stat := "cpu  100 5 50 1000 20 3 7 11 0 0\ncpu0 50 2 25 500 10 1 3 5 0 0\nintr 1\n"
	got, err := parseHostTicks([]byte(stat))
	if err != nil {
		t.Fatal(err)
	}
	if want := (hostTicks{busy: 100 + 5 + 50 + 3 + 7, idle: 1000 + 20, steal: 11}); got != want {
		t.Fatalf("parsed %+v, want %+v", got, want)
	}
	for _, bad := range []string{"", "intr 1\n", "cpu 1 2 3\n", "cpu 1 2 x 4 5 6 7 8\n"} {
		if _, err := parseHostTicks([]byte(bad)); err == nil {
			t.Errorf("parseHostTicks(%q) = nil error, want one", bad)
		}
	}
	var r Result
	r.hostCPU(hostTicks{busy: 100, idle: 100}, hostTicks{busy: 400, idle: 150, steal: 50}, 30)
	if r.HostCPUSecPerSaga != 0.1 || r.HostBusy != 0.75 || r.HostSteal != 0.125 {
		t.Fatalf("hostCPU: %v s/saga, busy %v, steal %v; want 0.1, 0.75, 0.125", r.HostCPUSecPerSaga, r.HostBusy, r.HostSteal)
	}
}

func TestMedianOfStepBreakdowns(t *testing.T) {
	hop := func(step string, cmd float64) StepHop {
		return StepHop{Step: step, Count: 10, CommandP50Ms: cmd, ReplyP50Ms: 2 * cmd}
	}
	runs := []Result{
		{StepHops: []StepHop{hop("a", 10), hop("b", 1)}},
		{StepHops: []StepHop{hop("a", 30), hop("b", 3)}},
		{StepHops: []StepHop{hop("a", 20), hop("b", 2)}},
	}
	m, err := Median(runs)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.StepHops) != 2 || m.StepHops[0] != hop("a", 20) || m.StepHops[1] != hop("b", 2) {
		t.Fatalf("median breakdown %+v, want a at 20 ms and b at 2 ms", m.StepHops)
	}
	runs[2].StepHops = runs[2].StepHops[:1]
	if m, _ = Median(runs); m.StepHops != nil {
		t.Fatalf("runs with different steps: median breakdown %+v, want none", m.StepHops)
	}
}
