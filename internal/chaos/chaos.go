package chaos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/sagaflow/sagaflow/internal/dburl"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sagaflow/sagaflow/inbox"
	"github.com/sagaflow/sagaflow/internal/devbroker"
	"github.com/sagaflow/sagaflow/internal/faultproxy"
	"github.com/sagaflow/sagaflow/internal/kafkaclient"
	"github.com/sagaflow/sagaflow/internal/workload"
	"github.com/sagaflow/sagaflow/migrations"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/participants/external/fakeprovider"
	"github.com/sagaflow/sagaflow/participants/reference"
	"github.com/sagaflow/sagaflow/steps/orderapi"
	"github.com/sagaflow/sagaflow/steps/tripapi"
)

// schemas the children use (no prefixes).
func schemas() workload.Schemas {
	var o reference.Options
	return workload.Schemas{
		Orchestrator: orchestrator.SchemaDefault, Inventory: o.Schema(orderapi.Inventory), Coupon: o.Schema(orderapi.Coupon),
		Payment: o.Schema(orderapi.Payment), Shipping: o.Schema(orderapi.Shipping), Points: o.Schema(orderapi.Points),
		Flights: o.Schema(tripapi.Flights), Hotels: o.Schema(tripapi.Hotels), Cars: o.Schema(tripapi.Cars),
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
	// provider is the fake payment provider (Config.PaymentProvider).
	provider *fakeprovider.Server
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
	dbURL, err := dburl.Fresh(ctx, cfg.DatabaseURL, cfg.Database)
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
		Orders: cfg.Sagas - cfg.trips(), Trips: cfg.trips(), Seed: cfg.Seed, OutOfStockRate: workload.OutOfStockRateDefault,
		CouponTakenRate: workload.CouponTakenRateDefault, DeclineRate: workload.DeclineRateDefault,
		LimitCents: workload.LimitCentsDefault,
	})
	if err := h.prepare(ctx, plan); err != nil {
		return res, err
	}

	if cfg.PaymentProvider {
		h.provider = fakeprovider.Start(workload.LimitCentsDefault)
		defer h.provider.Close()
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
	if err := h.checkOutcomes(ctx, &res); err != nil {
		return res, err
	}
	res.ElapsedSeconds = time.Since(began).Seconds()
	return res, nil
}

// prepare migrates every schema, creates the topics and seeds the stock.
func (h *harness) prepare(ctx context.Context, plan workload.Plan) error {
	sets, err := migrations.Orchestrator(orchestrator.SchemaDefault)
	if err != nil {
		return err
	}
	ref, err := reference.New(h.pool, reference.Options{Trips: true, Brokers: h.brokers, Partitions: PartitionsDefault})
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
	topics := []string{orchestrator.ReplyTopicDefault, orchestrator.ReplyTopicDefault + inbox.DLQSuffixDefault,
		orchestrator.OutcomeTopicDefault, orchestrator.StartTopicDefault, orchestrator.EventTopicDefault}
	topics = append(topics, ref.Topics()...)
	if err := kafkaclient.EnsureTopics(ctx, h.brokers, PartitionsDefault, 1, topics...); err != nil {
		return fmt.Errorf("chaos: create topics: %w", err)
	}
	return workload.Seed(ctx, h.pool, schemas(), plan)
}
