package chaos

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sagaflow/sagaflow/inbox"
	"github.com/sagaflow/sagaflow/internal/demo"
	"github.com/sagaflow/sagaflow/internal/devbroker"
	"github.com/sagaflow/sagaflow/internal/faultproxy"
	"github.com/sagaflow/sagaflow/internal/kafkaclient"
	"github.com/sagaflow/sagaflow/internal/workload"
	"github.com/sagaflow/sagaflow/migrations"
	"github.com/sagaflow/sagaflow/participants/reference"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

// Defaults of Config.
const (
	DatabaseDefault       = "sagaflow_chaos"
	SagasDefault          = 300
	DurationDefault       = 45 * time.Second
	FaultEveryDefault     = 700 * time.Millisecond
	QuiesceTimeoutDefault = 3 * time.Minute
	StepTimeoutDefault    = 500 * time.Millisecond
	ConcurrencyDefault    = 8
	PartitionsDefault     = 8
	// ChildEnv is set to 1 in every child's environment, so a test binary
	// standing in for the orchestrator binary knows to run the command line.
	ChildEnv = "SAGAFLOW_CHAOS_CHILD"
	// childMaxConns caps every pool (the server is shared: four children
	// plus their relays' lock connections must stay well under
	// max_connections).
	childMaxConns = 4
	// FaultsNone, alone in Config.Faults, injects no fault at all: the
	// fault-free twin's setting.
	FaultsNone = "none"
	// TwinSuffix is appended to Config.Database to name the twin's
	// database.
	TwinSuffix = "_twin"
	// maxIdentifier is Postgres's longest database name (NAMEDATALEN-1).
	maxIdentifier = 63
)

// Config configures a harness run.
type Config struct {
	Seed  int64
	Sagas int
	// Duration of the injection phase; the sagas are started spread over
	// its first 80%.
	Duration time.Duration
	// DatabaseURL names the Postgres server (loopback); the harness creates
	// Database afresh on it.
	DatabaseURL string
	Database    string
	// Brokers: real Kafka; empty starts the embedded broker in the harness.
	Brokers []string
	// KillBroker (real Kafka only) runs BrokerStopCmd, waits, then
	// BrokerStartCmd (shell commands) as one of the faults.
	KillBroker                    bool
	BrokerStopCmd, BrokerStartCmd string
	// Executable is the orchestrator binary the children run (default
	// os.Executable()); Env is added to the children's environment.
	Executable string
	Env        []string
	// FaultEvery is the mean time between two injected faults.
	FaultEvery time.Duration
	// Faults lists the kinds injected (FaultKinds); empty: all; FaultsNone
	// alone: none (the injector does not run).
	Faults []string
	// Twin runs the fault-free twin first: the same seed, workload, sagas,
	// duration, step timeouts and children's configuration with no fault
	// injected, in its own database (Database+TwinSuffix) on the same
	// server, so the Result carries goodput (completed under faults over
	// completed without).
	Twin bool
	// TwinCompleted, when > 0, is the twin's completed count measured
	// before: no twin runs and goodput is Completed/TwinCompleted.
	TwinCompleted int
	// StepTimeout is every step's reply timeout in the children (short, so
	// that stops and cuts make timeouts fire).
	StepTimeout time.Duration
	// QuiesceTimeout bounds the wait for every saga terminal and every
	// outbox drained once the injection stops.
	QuiesceTimeout time.Duration
	// Concurrency of saga starts over HTTP.
	Concurrency int
	// WorkDir keeps the children's config and logs, the run's under
	// faults/ and the twin's under twin/; empty: a temporary directory
	// removed after a clean run.
	WorkDir string
	Logger  *slog.Logger
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.Sagas = cmp.Or(c.Sagas, SagasDefault)
	c.Duration = cmp.Or(c.Duration, DurationDefault)
	c.DatabaseURL = cmp.Or(c.DatabaseURL, "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable")
	c.Database = cmp.Or(c.Database, DatabaseDefault)
	c.FaultEvery = cmp.Or(c.FaultEvery, FaultEveryDefault)
	c.StepTimeout = cmp.Or(c.StepTimeout, StepTimeoutDefault)
	c.QuiesceTimeout = cmp.Or(c.QuiesceTimeout, QuiesceTimeoutDefault)
	c.Concurrency = cmp.Or(c.Concurrency, ConcurrencyDefault)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Sagas < 1:
		return fmt.Errorf("chaos: Config.Sagas is %d, want at least 1", c.Sagas)
	case c.Duration <= 0:
		return fmt.Errorf("chaos: Config.Duration is %s, want > 0", c.Duration)
	case c.FaultEvery <= 0:
		return fmt.Errorf("chaos: Config.FaultEvery is %s, want > 0", c.FaultEvery)
	case c.StepTimeout <= 0:
		return fmt.Errorf("chaos: Config.StepTimeout is %s, want > 0", c.StepTimeout)
	case c.QuiesceTimeout <= 0:
		return fmt.Errorf("chaos: Config.QuiesceTimeout is %s, want > 0", c.QuiesceTimeout)
	case c.Concurrency < 1:
		return fmt.Errorf("chaos: Config.Concurrency is %d, want at least 1", c.Concurrency)
	case !knownFaults(c.Faults):
		return fmt.Errorf("chaos: Config.Faults %v: want some of %v, or %q alone", c.Faults, FaultKinds, FaultsNone)
	case slices.Contains(c.Faults, FaultsNone) && len(c.Faults) > 1:
		return fmt.Errorf("chaos: Config.Faults %v: %q excludes every other kind", c.Faults, FaultsNone)
	case c.KillBroker && c.noFaults():
		return fmt.Errorf("chaos: Config.KillBroker is a fault, but Config.Faults is %q", FaultsNone)
	case c.TwinCompleted < 0 || c.TwinCompleted > c.Sagas:
		return fmt.Errorf("chaos: Config.TwinCompleted is %d, want 0 (not given) to %d (Config.Sagas)", c.TwinCompleted, c.Sagas)
	case c.runsTwin() && len(c.Database)+len(TwinSuffix) > maxIdentifier:
		return fmt.Errorf("chaos: Config.Database %q is too long for its twin's %q (Postgres keeps %d bytes)", c.Database, c.Database+TwinSuffix, maxIdentifier)
	case c.KillBroker && len(c.Brokers) == 0:
		return errors.New("chaos: Config.KillBroker needs real Kafka (Config.Brokers / KAFKA_BROKERS): the embedded broker loses its data with its process")
	case c.KillBroker && (c.BrokerStopCmd == "" || c.BrokerStartCmd == ""):
		return errors.New("chaos: Config.KillBroker needs BrokerStopCmd and BrokerStartCmd")
	}
	return nil
}

// noFaults reports whether c injects nothing.
func (c Config) noFaults() bool { return slices.Equal(c.Faults, []string{FaultsNone}) }

// runsTwin reports whether Run runs the twin (rather than taking its
// count from TwinCompleted, or not measuring goodput).
func (c Config) runsTwin() bool { return c.Twin && c.TwinCompleted == 0 }

// twin is the configuration of c's fault-free twin: c with no fault and
// its own database. Everything the workload and the children's
// configuration derive from (seed, sagas, duration, step timeouts,
// quiescence bound, concurrency, executable, brokers) stays as it is.
func (c Config) twin() Config {
	t := c
	t.Faults = []string{FaultsNone}
	t.KillBroker, t.BrokerStopCmd, t.BrokerStartCmd = false, "", ""
	t.Twin, t.TwinCompleted = false, 0
	t.Database = c.Database + TwinSuffix
	return t
}

// Result is what a run injected and found.
type Result struct {
	Seed        int64 `json:"seed"`
	Sagas       int   `json:"sagas"`
	Completed   int   `json:"completed"`
	Compensated int   `json:"compensated"`
	Failed      int   `json:"failed"`
	// Goodput is Completed over the twin's completed count (TwinCompleted):
	// nil when not measured (no twin, or a twin that completed nothing).
	Goodput *float64 `json:"goodput"`
	// TwinCompleted is the twin's completed count, measured (Twin) or
	// given (Config.TwinCompleted); nil without either.
	TwinCompleted *int `json:"twin_completed"`
	// Twin holds the key figures of the twin run; nil when none ran.
	Twin *TwinResult `json:"twin"`
	// Faults injected.
	Kills        int64 `json:"kills"`
	Crashes      int64 `json:"crashes"` // exits the harness did not cause (restarted too)
	Cuts         int64 `json:"cuts"`
	Slows        int64 `json:"slows"`
	Duplicates   int64 `json:"duplicates"`
	Stops        int64 `json:"stops"`
	BrokerKills  int64 `json:"broker_kills"`
	StartRetries int64 `json:"start_retries"`
	// Seen in the databases.
	LateReplies           int64 `json:"late_replies"`
	Lost                  int   `json:"lost"`
	DoubleEffects         int   `json:"double_effects"`
	Stuck                 int   `json:"stuck"`
	CompensatedAfterPivot int   `json:"compensated_after_pivot"`
	DoubleTransitions     int   `json:"double_transitions"`
	Undrained             int64 `json:"undrained"`
	// Violations lists every violation found (capped), workload.Check's
	// included; the twin's come first, prefixed "twin: ".
	Violations     []string `json:"violations"`
	ElapsedSeconds float64  `json:"elapsed_seconds"`
	WorkDir        string   `json:"work_dir"`
}

// TwinResult is the key figures of the fault-free twin run.
type TwinResult struct {
	Database    string `json:"database"`
	Completed   int    `json:"completed"`
	Compensated int    `json:"compensated"`
	Failed      int    `json:"failed"`
	// FaultsInjected sums the twin's kills, cuts, slows, duplicates, stops
	// and broker kills: 0 unless the harness is broken.
	FaultsInjected        int64   `json:"faults_injected"`
	Crashes               int64   `json:"crashes"`
	StartRetries          int64   `json:"start_retries"`
	LateReplies           int64   `json:"late_replies"`
	Lost                  int     `json:"lost"`
	DoubleEffects         int     `json:"double_effects"`
	Stuck                 int     `json:"stuck"`
	CompensatedAfterPivot int     `json:"compensated_after_pivot"`
	DoubleTransitions     int     `json:"double_transitions"`
	Undrained             int64   `json:"undrained"`
	Violations            int     `json:"violations"` // listed in Result.Violations
	ElapsedSeconds        float64 `json:"elapsed_seconds"`
}

// OK reports whether the run, and its twin if one ran, found no violation.
func (r Result) OK() bool {
	return len(r.Violations) == 0 && r.Lost == 0 && r.DoubleEffects == 0 && r.Stuck == 0 &&
		r.CompensatedAfterPivot == 0 && r.DoubleTransitions == 0 && r.Undrained == 0 &&
		(r.Twin == nil || r.Twin.ok())
}

func (t TwinResult) ok() bool {
	return t.Violations == 0 && t.Lost == 0 && t.DoubleEffects == 0 && t.Stuck == 0 &&
		t.CompensatedAfterPivot == 0 && t.DoubleTransitions == 0 && t.Undrained == 0
}

// Goodput is completed (under faults) over twinCompleted (the same
// workload without faults); false when the twin completed nothing.
func Goodput(completed, twinCompleted int) (float64, bool) {
	if twinCompleted < 1 || completed < 0 {
		return 0, false
	}
	return float64(completed) / float64(twinCompleted), true
}

// withTwin sets r's goodput from the twin's Result (twin not nil) or from
// a given count (given > 0), and lists the twin's violations first.
func (r *Result) withTwin(twin *Result, given int) {
	switch {
	case twin != nil:
		r.Twin = &TwinResult{
			Completed: twin.Completed, Compensated: twin.Compensated, Failed: twin.Failed,
			FaultsInjected: twin.Kills + twin.Cuts + twin.Slows + twin.Duplicates + twin.Stops + twin.BrokerKills,
			Crashes:        twin.Crashes, StartRetries: twin.StartRetries, LateReplies: twin.LateReplies,
			Lost: twin.Lost, DoubleEffects: twin.DoubleEffects, Stuck: twin.Stuck,
			CompensatedAfterPivot: twin.CompensatedAfterPivot, DoubleTransitions: twin.DoubleTransitions,
			Undrained: twin.Undrained, Violations: len(twin.Violations), ElapsedSeconds: twin.ElapsedSeconds,
		}
		if len(twin.Violations) > 0 {
			vs := make([]string, 0, len(twin.Violations)+len(r.Violations))
			for _, v := range twin.Violations {
				vs = append(vs, "twin: "+v)
			}
			r.Violations = append(vs, r.Violations...)
		}
		given = twin.Completed
	case given < 1:
		return
	}
	r.TwinCompleted = &given
	if g, ok := Goodput(r.Completed, given); ok {
		r.Goodput = &g
	}
}

// Exit codes of `orchestrator chaos` after a run (ExitCode).
const (
	ExitViolation  = 2
	ExitLowGoodput = 3
)

// ExitCode is 0 for a clean run, ExitViolation when r (or its twin) found
// a violation, else ExitLowGoodput when minGoodput > 0 and goodput is
// below it or was not measured.
func (r Result) ExitCode(minGoodput float64) int {
	switch {
	case !r.OK():
		return ExitViolation
	case minGoodput > 0 && (r.Goodput == nil || *r.Goodput < minGoodput):
		return ExitLowGoodput
	}
	return 0
}

// Line is the one-line summary `orchestrator chaos` prints.
func (r Result) Line() string {
	return fmt.Sprintf("chaos: seed=%d sagas=%d completed=%d compensated=%d failed=%d kills=%d cuts=%d duplicates=%d stops=%d late_replies=%d lost=%d double_effects=%d stuck=%d compensated_after_pivot=%d crashes=%d double_transitions=%d violations=%d elapsed=%.1fs %s",
		r.Seed, r.Sagas, r.Completed, r.Compensated, r.Failed, r.Kills, r.Cuts, r.Duplicates, r.Stops, r.LateReplies,
		r.Lost, r.DoubleEffects, r.Stuck, r.CompensatedAfterPivot, r.Crashes, r.DoubleTransitions, len(r.Violations), r.ElapsedSeconds,
		r.GoodputText())
}

// GoodputText is the goodput part of Line: "goodput=0.970 (291/300
// completed; twin 300 in 47.2s)", "... twin 300, given)", or
// "goodput=n/a (...)" when the twin completed nothing or none was run.
func (r Result) GoodputText() string {
	var twin string
	switch {
	case r.Twin != nil:
		twin = fmt.Sprintf("twin %d in %.1fs", r.Twin.Completed, r.Twin.ElapsedSeconds)
		if n := r.Twin.Violations; n > 0 {
			twin += fmt.Sprintf(", %d violations", n)
		}
	case r.TwinCompleted != nil:
		twin = fmt.Sprintf("twin %d, given", *r.TwinCompleted)
	default:
		return "goodput=n/a (no twin run)"
	}
	g := "n/a"
	if r.Goodput != nil {
		g = fmt.Sprintf("%.3f", *r.Goodput)
	}
	return fmt.Sprintf("goodput=%s (%d/%d completed; %s)", g, r.Completed, r.Sagas, twin)
}

// schemas the children use (no prefixes).
func schemas() workload.Schemas {
	var o reference.Options
	return workload.Schemas{
		Orchestrator: saga.SchemaDefault, Inventory: o.Schema(orderapi.Inventory), Coupon: o.Schema(orderapi.Coupon),
		Payment: o.Schema(orderapi.Payment), Shipping: o.Schema(orderapi.Shipping), Points: o.Schema(orderapi.Points),
	}
}

// harness is one run's moving parts.
type harness struct {
	cfg      Config
	log      *slog.Logger
	brokers  []string // what children and the injector dial
	bproxy   *faultproxy.Proxy
	pgProxy  map[string]*faultproxy.Proxy // by child name
	children []*child
	orchs    []*child
	httpAddr map[string]string
	pool     *pgxpool.Pool
}

// Run runs the harness: the fault-free twin first when cfg.Twin asks for
// one, then the run under faults. An error means the harness itself could
// not run; violations, the twin's included, are reported in the Result
// (see Result.OK).
func Run(ctx context.Context, cfg Config) (res Result, err error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return Result{}, err
	}
	res.Seed, res.Sagas = cfg.Seed, cfg.Sagas
	if cfg.Executable == "" {
		if cfg.Executable, err = os.Executable(); err != nil {
			return res, fmt.Errorf("chaos: find own executable: %w", err)
		}
	}
	workDir := cfg.WorkDir
	removeWorkDir := false
	if workDir == "" {
		if workDir, err = os.MkdirTemp("", "sagaflow-chaos-"); err != nil {
			return res, fmt.Errorf("chaos: work dir: %w", err)
		}
		removeWorkDir = true
	} else if err := os.MkdirAll(workDir, 0o755); err != nil {
		return res, fmt.Errorf("chaos: work dir %s: %w", workDir, err)
	}
	res.WorkDir = workDir
	defer func() {
		res.WorkDir = workDir
		if removeWorkDir && err == nil && res.OK() {
			_ = os.RemoveAll(workDir)
			res.WorkDir = ""
		}
	}()

	// The twin runs to its end (every child, pool, proxy and broker of it
	// closed) before the run under faults starts: nothing is shared but the
	// Postgres server.
	var twin *Result
	if cfg.runsTwin() {
		tcfg := cfg.twin()
		cfg.Logger.Info("chaos: twin run (no faults)", slog.String("database", tcfg.Database))
		t, err := runOnce(ctx, tcfg, filepath.Join(workDir, "twin"))
		if err != nil {
			return res, fmt.Errorf("chaos: twin run (no faults): %w", err)
		}
		twin = &t
		cfg.Logger.Info("chaos: twin done", slog.String("line", t.Line()))
	}
	cfg.Logger.Info("chaos: run under faults", slog.String("database", cfg.Database))
	res, err = runOnce(ctx, cfg, filepath.Join(workDir, "faults"))
	if err != nil {
		return res, err
	}
	res.withTwin(twin, cfg.TwinCompleted)
	if twin != nil {
		res.Twin.Database = cfg.twin().Database
	}
	return res, nil
}

// runOnce is one run of the harness, with its children's files in
// workDir.
func runOnce(ctx context.Context, cfg Config, workDir string) (res Result, err error) {
	began := time.Now()
	res.Seed, res.Sagas = cfg.Seed, cfg.Sagas
	h := &harness{cfg: cfg, log: cfg.Logger, pgProxy: map[string]*faultproxy.Proxy{}, httpAddr: map[string]string{}}
	if err := os.MkdirAll(workDir, 0o755); err != nil {
		return res, fmt.Errorf("chaos: work dir %s: %w", workDir, err)
	}

	// Database, fresh, and the harness's own direct pool.
	dbURL, err := demo.FreshDatabaseURL(ctx, cfg.DatabaseURL, cfg.Database)
	if err != nil {
		return res, err
	}
	pcfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return res, fmt.Errorf("chaos: database url: %w", err)
	}
	pcfg.MaxConns = childMaxConns
	h.pool, err = pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return res, fmt.Errorf("chaos: pool: %w", err)
	}
	defer h.pool.Close()

	// Broker: embedded behind a proxy it advertises, or real Kafka.
	if len(cfg.Brokers) == 0 {
		brokerAddr, err := freeAddr()
		if err != nil {
			return res, err
		}
		h.bproxy, err = faultproxy.New("127.0.0.1:0", brokerAddr)
		if err != nil {
			return res, err
		}
		defer h.bproxy.Close()
		b, err := devbroker.Start(devbroker.Config{Addr: brokerAddr, AdvertiseAddr: h.bproxy.Addr(), Partitions: PartitionsDefault})
		if err != nil {
			return res, err
		}
		defer b.Close()
		h.brokers = []string{h.bproxy.Addr()}
	} else {
		h.brokers = cfg.Brokers
	}

	// Schemas, topics and the plan's stock before any child runs.
	plan := workload.NewPlan(workload.Mix{
		Orders: cfg.Sagas, Seed: cfg.Seed, OutOfStockRate: workload.OutOfStockRateDefault,
		CouponTakenRate: workload.CouponTakenRateDefault, DeclineRate: workload.DeclineRateDefault,
		LimitCents: workload.LimitCentsDefault,
	})
	if err := h.prepare(ctx, plan); err != nil {
		return res, err
	}

	// Children, each behind its own Postgres proxy.
	defer h.closeProxies()
	if err := h.spawn(ctx, workDir, dbURL); err != nil {
		return res, err
	}
	defer func() {
		for _, c := range h.children {
			c.close()
		}
	}()
	if err := h.waitReady(ctx, 90*time.Second); err != nil {
		return res, err
	}

	// Faults and workload, side by side. The plan above drew the workload
	// (orders, out-of-stock items, contested coupons, declined amounts)
	// from its own source: the injector's draws, or their absence in the
	// twin, do not change it.
	inj := newInjector(h, cfg.Seed)
	injCtx, stopInj := context.WithCancel(ctx)
	injDone := make(chan struct{})
	if cfg.noFaults() {
		close(injDone)
	} else {
		go func() { defer close(injDone); inj.run(injCtx) }()
	}
	startErr := h.startAll(ctx, plan, &res)
	// Let the injection run its full duration.
	remaining := time.Until(began.Add(cfg.Duration))
	if startErr == nil && remaining > 0 {
		select {
		case <-ctx.Done():
		case <-time.After(remaining):
		}
	}
	stopInj()
	<-injDone
	inj.restoreAll()
	res.Kills, res.Cuts, res.Slows = inj.kills.Load(), inj.cuts.Load(), inj.slows.Load()
	res.Duplicates, res.Stops, res.BrokerKills = inj.duplicates.Load(), inj.stops.Load(), inj.brokerKills.Load()
	if startErr != nil {
		return res, startErr
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	h.log.Info("chaos: injection over; waiting for quiescence", slog.Duration("bound", cfg.QuiesceTimeout))

	qctx, cancel := context.WithTimeout(ctx, cfg.QuiesceTimeout)
	qerr := h.quiesce(qctx)
	cancel()
	if qerr != nil && !errors.Is(qerr, context.DeadlineExceeded) {
		return res, qerr
	}
	for _, c := range h.children {
		_, crashes := c.stats()
		res.Crashes += int64(crashes)
	}
	if err := h.check(ctx, plan, &res); err != nil {
		return res, err
	}
	res.ElapsedSeconds = time.Since(began).Seconds()
	return res, nil
}

// prepare migrates every schema, creates the topics and seeds the stock.
func (h *harness) prepare(ctx context.Context, plan workload.Plan) error {
	sets, err := migrations.Orchestrator(saga.SchemaDefault)
	if err != nil {
		return err
	}
	ref, err := reference.New(h.pool, reference.Options{Brokers: h.brokers, Partitions: PartitionsDefault})
	if err != nil {
		return err
	}
	ps, err := ref.Migrations()
	if err != nil {
		return err
	}
	if _, err := migrations.Migrate(ctx, h.pool, append(sets, ps...)...); err != nil {
		return fmt.Errorf("chaos: migrate: %w", err)
	}
	topics := []string{saga.ReplyTopicDefault, saga.ReplyTopicDefault + inbox.DLQSuffixDefault}
	topics = append(topics, ref.Topics()...)
	if err := kafkaclient.EnsureTopics(ctx, h.brokers, PartitionsDefault, 1, topics...); err != nil {
		return fmt.Errorf("chaos: create topics: %w", err)
	}
	return workload.Seed(ctx, h.pool, schemas(), plan)
}

// config is the YAML the children share: short step timeouts so faults
// make them fire, a pivot that keeps re-sending for long, transient
// shipping and points failures. Re-sends back off up to 10-15s: with
// thousands of sagas timing out together (a participant stalled by a
// kill), faster re-sends flood the participants faster than they answer
// and the run never quiesces.
func (h *harness) config() string {
	st := h.cfg.StepTimeout
	return fmt.Sprintf(`log:
  level: warn
database:
  max_conns: %d
kafka:
  partitions: %d
orchestrator:
  timer_interval: 100ms
participants:
  shipping_fail_rate: 0.2
  points_fail_rate: 0.2
  seed: %d
  payment_limit_cents: %d
sagas:
  place-order:
    steps:
      %s:
        timeout: %s
        retry:
          max_attempts: 8
          max_interval: 15s
      %s:
        timeout: %s
        retry:
          max_attempts: 8
          max_interval: 15s
      %s:
        timeout: %s
        deadline: 30m
        retry:
          initial_interval: 100ms
          max_interval: 10s
          max_attempts: 100000
      %s:
        timeout: %s
        retry:
          max_interval: 10s
      %s:
        timeout: %s
        retry:
          max_interval: 10s
`, childMaxConns, PartitionsDefault, h.cfg.Seed, workload.LimitCentsDefault,
		orderapi.StepReserveInventory, st, orderapi.StepLockCoupon, st,
		orderapi.StepChargePayment, 2*st, orderapi.StepCreateShipment, 2*st, orderapi.StepAwardPoints, 2*st)
}

// spawn writes the children's config and starts two orchestrator replicas
// and two participant processes.
func (h *harness) spawn(_ context.Context, workDir, dbURL string) error {
	cfgPath := filepath.Join(workDir, "chaos.yaml")
	if err := os.WriteFile(cfgPath, []byte(h.config()), 0o644); err != nil {
		return fmt.Errorf("chaos: write %s: %w", cfgPath, err)
	}
	u, err := url.Parse(dbURL)
	if err != nil {
		return fmt.Errorf("chaos: database url: %w", err)
	}
	pgTarget := u.Host
	if u.Port() == "" {
		pgTarget = net.JoinHostPort(u.Hostname(), "5432")
	}
	type spec struct {
		name string
		orch bool
	}
	for _, s := range []spec{{"orchestrator-a", true}, {"orchestrator-b", true}, {"participants-1", false}, {"participants-2", false}} {
		px, err := faultproxy.New("127.0.0.1:0", pgTarget)
		if err != nil {
			return err
		}
		h.pgProxy[s.name] = px
		cu := *u
		cu.Host = px.Addr()
		args := []string{"--config", cfgPath, "--database-url", cu.String(), "--brokers", strings.Join(h.brokers, ",")}
		if s.orch {
			addr, err := freeAddr()
			if err != nil {
				return err
			}
			h.httpAddr[s.name] = addr
			args = append([]string{"serve"}, append(args, "--addr", addr)...)
		} else {
			args = append([]string{"participants"}, args...)
		}
		c := &child{
			name: s.name, exe: h.cfg.Executable, args: args, env: append([]string{ChildEnv + "=1"}, h.cfg.Env...),
			logPath: filepath.Join(workDir, s.name+".log"), log: h.log, participant: !s.orch,
		}
		h.children = append(h.children, c)
		if s.orch {
			h.orchs = append(h.orchs, c)
		}
	}
	for _, c := range h.children {
		if err := c.start(); err != nil {
			return err
		}
	}
	return nil
}

// closeProxies is deferred by Run through the pgProxy map.
func (h *harness) closeProxies() {
	for _, p := range h.pgProxy {
		_ = p.Close()
	}
}

// waitReady waits until both replicas answer /readyz with 200.
func (h *harness) waitReady(ctx context.Context, bound time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	client := &http.Client{Timeout: 2 * time.Second}
	for _, c := range h.orchs {
		u := "http://" + h.httpAddr[c.name] + "/readyz"
		for {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
			resp, err := client.Do(req)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("chaos: %s not ready at %s within %s (see %s): %w", c.name, u, bound, c.logPath, ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

// freeAddr returns a loopback address with a port free right now.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("chaos: pick a free port: %w", err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr, nil
}
