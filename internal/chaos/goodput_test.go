package chaos

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sagaflow/sagaflow/internal/workload"
)

func TestGoodput(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		completed, twin int
		want            float64
		ok              bool
	}{
		{291, 300, 0.97, true},
		{300, 300, 1, true},
		{0, 300, 0, true},
		{210, 200, 1.05, true}, // contention can let the faulted run complete more
		{5, 0, 0, false},
		{5, -1, 0, false},
		{-1, 10, 0, false},
	} {
		got, ok := Goodput(c.completed, c.twin)
		if ok != c.ok || (ok && (got < c.want-1e-12 || got > c.want+1e-12)) {
			t.Errorf("Goodput(%d, %d) = %v, %v; want %v, %v", c.completed, c.twin, got, ok, c.want, c.ok)
		}
	}
}

// TestGoodputLineAndJSON checks the goodput part of the line of figures
// and of the JSON object: twin run, count given, twin that completed
// nothing, no twin.
func TestGoodputLineAndJSON(t *testing.T) {
	t.Parallel()
	base := Result{Seed: 1, Sagas: 300, Completed: 291, Compensated: 9}
	ran := base
	ran.withTwin(&Result{Completed: 300, ElapsedSeconds: 47.25}, 0)
	given := base
	given.withTwin(nil, 300)
	zero := base
	zero.withTwin(&Result{Compensated: 300, ElapsedSeconds: 40}, 0)
	none := base
	none.withTwin(nil, 0)

	for _, c := range []struct {
		name   string
		r      Result
		line   string
		fields string // goodput, twin_completed and twin as JSON
	}{
		{"twin run", ran, "goodput=0.970 (291/300 completed; twin 300 in 47.2s)",
			`"goodput":0.97,"twin_completed":300,"twin":{"database":"","completed":300,"compensated":0,"failed":0,"faults_injected":0,"crashes":0,"start_retries":0,"late_replies":0,"lost":0,"double_effects":0,"stuck":0,"compensated_after_pivot":0,"double_transitions":0,"undrained":0,"violations":0,"elapsed_seconds":47.25}`},
		{"given", given, "goodput=0.970 (291/300 completed; twin 300, given)", `"goodput":0.97,"twin_completed":300,"twin":null`},
		{"twin completed nothing", zero, "goodput=n/a (291/300 completed; twin 0 in 40.0s)", `"goodput":null,"twin_completed":0,"twin":{`},
		{"no twin", none, "goodput=n/a (no twin run)", `"goodput":null,"twin_completed":null,"twin":null`},
	} {
		if got := c.r.GoodputText(); got != c.line {
			t.Errorf("%s: GoodputText() = %q, want %q", c.name, got, c.line)
		}
		if l := c.r.Line(); !strings.HasSuffix(l, " elapsed=0.0s "+c.line) {
			t.Errorf("%s: Line() = %q, want it to end with the goodput text", c.name, l)
		}
		b, err := json.Marshal(c.r)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), `"failed":0,`+c.fields) {
			t.Errorf("%s: JSON %s\nlacks %s", c.name, b, c.fields)
		}
		if !c.r.OK() {
			t.Errorf("%s: not OK without violations", c.name)
		}
	}
}

// The twin's violations are the run's: listed first with "twin: ", counted
// in the line, and they make the Result not OK.
func TestTwinViolationsCount(t *testing.T) {
	t.Parallel()
	r := Result{Sagas: 10, Completed: 7, Violations: []string{"under faults"}}
	r.withTwin(&Result{Completed: 8, Stuck: 1, Violations: []string{"1 sagas not terminal after 3m0s"}}, 0)
	if want := []string{"twin: 1 sagas not terminal after 3m0s", "under faults"}; strings.Join(r.Violations, "|") != strings.Join(want, "|") {
		t.Errorf("violations %q, want %q", r.Violations, want)
	}
	if !strings.Contains(r.Line(), " violations=2 ") || !strings.Contains(r.Line(), "twin 8 in 0.0s, 1 violations)") {
		t.Errorf("line %q", r.Line())
	}
	clean := Result{Sagas: 10, Completed: 7}
	clean.withTwin(&Result{Completed: 8, Stuck: 1}, 0)
	if clean.OK() {
		t.Error("OK() with a stuck saga in the twin")
	}
	if g := *clean.Goodput; g != 7.0/8 {
		t.Errorf("goodput %v, want %v", g, 7.0/8)
	}
}

// The twin differs from its run only in its faults and database: same
// workload plan, same children's configuration.
func TestTwinConfig(t *testing.T) {
	t.Parallel()
	cfg := Config{
		Seed: 5, Sagas: 120, Duration: 20 * time.Second, Database: "chaosdb", StepTimeout: 1500 * time.Millisecond,
		Faults: []string{"kill", "stop"}, FaultEvery: 3 * time.Second, Twin: true, Brokers: []string{"k:9092"},
		KillBroker: true, BrokerStopCmd: "stop", BrokerStartCmd: "start",
	}.WithDefaults()
	tw := cfg.twin()
	if err := tw.validate(); err != nil {
		t.Fatalf("twin config: %v", err)
	}
	if !tw.noFaults() || tw.KillBroker || tw.runsTwin() || tw.Database != "chaosdb_twin" {
		t.Errorf("twin: faults %v, kill broker %v, runs a twin %v, database %q", tw.Faults, tw.KillBroker, tw.runsTwin(), tw.Database)
	}
	if a, b := (&harness{cfg: cfg}).config(), (&harness{cfg: tw}).config(); a != b {
		t.Errorf("children's configuration differs:\n%s\ntwin:\n%s", a, b)
	}
	if tw.Seed != cfg.Seed || tw.Sagas != cfg.Sagas || tw.TripShare != cfg.TripShare || tw.Duration != cfg.Duration || tw.StepTimeout != cfg.StepTimeout ||
		tw.QuiesceTimeout != cfg.QuiesceTimeout || tw.Concurrency != cfg.Concurrency || tw.Executable != cfg.Executable {
		t.Errorf("twin %+v differs from %+v beyond faults and database", tw, cfg)
	}
	mix := workload.Mix{Orders: cfg.Sagas - cfg.trips(), Trips: cfg.trips(), Seed: cfg.Seed, OutOfStockRate: 0.1, CouponTakenRate: 0.1, DeclineRate: 0.1}
	a, _ := json.Marshal(workload.NewPlan(mix))
	// The injector drawing from its source does not move the plan's.
	in := newInjector(&harness{cfg: cfg}, cfg.Seed)
	for range 100 {
		in.r.Float64()
	}
	b, _ := json.Marshal(workload.NewPlan(mix))
	if string(a) != string(b) {
		t.Error("the plan depends on the injector's draws")
	}
}

func TestValidateFaultsAndTwin(t *testing.T) {
	t.Parallel()
	ok := Config{}.WithDefaults()
	if ok.Replicas != ReplicasDefault {
		t.Fatalf("default Replicas %d, want %d", ok.Replicas, ReplicasDefault)
	}
	for _, c := range []struct {
		name string
		mod  func(*Config)
		want string // "" = valid
	}{
		{"none", func(c *Config) { c.Faults = []string{FaultsNone} }, ""},
		{"none and kill", func(c *Config) { c.Faults = []string{FaultsNone, "kill"} }, "excludes"},
		{"unknown", func(c *Config) { c.Faults = []string{"flood"} }, "want some of"},
		{"kill broker without faults", func(c *Config) {
			c.Faults, c.Brokers, c.KillBroker, c.BrokerStopCmd, c.BrokerStartCmd = []string{FaultsNone}, []string{"k:1"}, true, "a", "b"
		}, "KillBroker"},
		{"twin given", func(c *Config) { c.TwinCompleted = c.Sagas }, ""},
		{"twin given above sagas", func(c *Config) { c.TwinCompleted = c.Sagas + 1 }, "TwinCompleted"},
		{"twin given negative", func(c *Config) { c.TwinCompleted = -1 }, "TwinCompleted"},
		{"twin database too long", func(c *Config) { c.Twin, c.Database = true, strings.Repeat("d", 60) }, "too long"},
		{"long database without twin", func(c *Config) { c.Database = strings.Repeat("d", 60) }, ""},
		{"four replicas", func(c *Config) { c.Replicas = 4 }, ""},
		{"a replica per partition", func(c *Config) { c.Replicas = PartitionsDefault }, ""},
		{"more replicas than partitions", func(c *Config) { c.Replicas = PartitionsDefault + 1 }, "Replicas"},
		{"no replica", func(c *Config) { c.Replicas = -1 }, "Replicas"},
	} {
		cfg := ok
		c.mod(&cfg)
		err := cfg.validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: error %v, want one mentioning %q", c.name, err, c.want)
		}
	}
}

func TestExitCode(t *testing.T) {
	t.Parallel()
	g := func(completed, twin int) Result {
		r := Result{Sagas: 100, Completed: completed}
		r.withTwin(nil, twin)
		return r
	}
	for _, c := range []struct {
		name string
		r    Result
		min  float64
		want int
	}{
		{"clean, no threshold", g(50, 100), 0, 0},
		{"clean, above", g(96, 100), 0.95, 0},
		{"clean, at", g(95, 100), 0.95, 0},
		{"below", g(94, 100), 0.95, ExitLowGoodput},
		{"not measured", g(94, 0), 0.95, ExitLowGoodput},
		{"not measured, no threshold", g(94, 0), 0, 0},
		{"violation wins", Result{Completed: 1, TwinCompleted: new(int), Violations: []string{"x"}}, 0.95, ExitViolation},
		{"twin violation", func() Result { r := g(99, 0); r.withTwin(&Result{Completed: 100, Lost: 1}, 0); return r }(), 0, ExitViolation},
	} {
		if got := c.r.ExitCode(c.min); got != c.want {
			t.Errorf("%s: ExitCode(%v) = %d, want %d (%s)", c.name, c.min, got, c.want, c.r.GoodputText())
		}
	}
}
