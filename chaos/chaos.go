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
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sagaflow/sagaflow/demo"
	"github.com/sagaflow/sagaflow/devbroker"
	"github.com/sagaflow/sagaflow/faultproxy"
	"github.com/sagaflow/sagaflow/inbox"
	"github.com/sagaflow/sagaflow/kafkaclient"
	"github.com/sagaflow/sagaflow/migrations"
	"github.com/sagaflow/sagaflow/orderapi"
	"github.com/sagaflow/sagaflow/participants/reference"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/workload"
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
	// Faults lists the kinds injected (FaultKinds); empty: all.
	Faults []string
	// StepTimeout is every step's reply timeout in the children (short, so
	// that stops and cuts make timeouts fire).
	StepTimeout time.Duration
	// QuiesceTimeout bounds the wait for every saga terminal and every
	// outbox drained once the injection stops.
	QuiesceTimeout time.Duration
	// Concurrency of saga starts over HTTP.
	Concurrency int
	// WorkDir keeps the children's config and logs; empty: a temporary
	// directory removed after a clean run.
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
		return fmt.Errorf("chaos: Config.Faults %v: want some of %v", c.Faults, FaultKinds)
	case c.KillBroker && len(c.Brokers) == 0:
		return errors.New("chaos: Config.KillBroker needs real Kafka (Config.Brokers / KAFKA_BROKERS): the embedded broker loses its data with its process")
	case c.KillBroker && (c.BrokerStopCmd == "" || c.BrokerStartCmd == ""):
		return errors.New("chaos: Config.KillBroker needs BrokerStopCmd and BrokerStartCmd")
	}
	return nil
}

// Result is what a run injected and found.
type Result struct {
	Seed        int64 `json:"seed"`
	Sagas       int   `json:"sagas"`
	Completed   int   `json:"completed"`
	Compensated int   `json:"compensated"`
	Failed      int   `json:"failed"`
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
	// included.
	Violations     []string `json:"violations"`
	ElapsedSeconds float64  `json:"elapsed_seconds"`
	WorkDir        string   `json:"work_dir"`
}

// OK reports whether the run found no violation.
func (r Result) OK() bool {
	return len(r.Violations) == 0 && r.Lost == 0 && r.DoubleEffects == 0 && r.Stuck == 0 &&
		r.CompensatedAfterPivot == 0 && r.DoubleTransitions == 0 && r.Undrained == 0
}

// Line is the one-line summary `orchestrator chaos` prints.
func (r Result) Line() string {
	return fmt.Sprintf("chaos: seed=%d sagas=%d completed=%d compensated=%d failed=%d kills=%d cuts=%d duplicates=%d stops=%d late_replies=%d lost=%d double_effects=%d stuck=%d compensated_after_pivot=%d crashes=%d double_transitions=%d violations=%d elapsed=%.1fs",
		r.Seed, r.Sagas, r.Completed, r.Compensated, r.Failed, r.Kills, r.Cuts, r.Duplicates, r.Stops, r.LateReplies,
		r.Lost, r.DoubleEffects, r.Stuck, r.CompensatedAfterPivot, r.Crashes, r.DoubleTransitions, len(r.Violations), r.ElapsedSeconds)
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

// Run runs the harness. An error means the harness itself could not run;
// violations are reported in the Result (see Result.OK).
func Run(ctx context.Context, cfg Config) (res Result, err error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return Result{}, err
	}
	began := time.Now()
	res.Seed, res.Sagas = cfg.Seed, cfg.Sagas
	h := &harness{cfg: cfg, log: cfg.Logger, pgProxy: map[string]*faultproxy.Proxy{}, httpAddr: map[string]string{}}
	if cfg.Executable == "" {
		if cfg.Executable, err = os.Executable(); err != nil {
			return res, fmt.Errorf("chaos: find own executable: %w", err)
		}
		h.cfg.Executable = cfg.Executable
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
		if removeWorkDir && err == nil && res.OK() {
			_ = os.RemoveAll(workDir)
			res.WorkDir = ""
		}
	}()

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

	// Faults and workload, side by side.
	inj := newInjector(h, cfg.Seed)
	injCtx, stopInj := context.WithCancel(ctx)
	injDone := make(chan struct{})
	go func() { defer close(injDone); inj.run(injCtx) }()
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
