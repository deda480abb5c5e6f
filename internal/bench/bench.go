package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sagaflow/sagaflow/inbox"
	"github.com/sagaflow/sagaflow/internal/demo"
	"github.com/sagaflow/sagaflow/internal/devbroker"
	"github.com/sagaflow/sagaflow/internal/kafkaclient"
	"github.com/sagaflow/sagaflow/internal/workload"
	"github.com/sagaflow/sagaflow/migrations"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/participants/reference"
	"github.com/sagaflow/sagaflow/relay"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

// Workload names.
const (
	SagaGeneric    = "generic"
	SagaPlaceOrder = "place-order"
)

// Defaults filled in for zero Config fields.
const (
	DatabaseDefault     = "sagaflow_bench"
	StepsDefault        = 3
	ConcurrencyDefault  = 32
	WarmupDefault       = 200
	SagasDefault        = 2000
	PollIntervalDefault = 10 * time.Millisecond
	TimeoutDefault      = 5 * time.Minute
	MaxConnsDefault     = 16
	LanesDefault        = 4
	// PartitionsDefault is the partitions of every topic of a run. On two
	// cores more partitions cost more than they give: each partition is a
	// fetch session of its own in every consumer (and a produce batch of its
	// own), and at moderate load each fetch then brings one message, so
	// every message pays for its own transaction. Measured at 500 sagas/s
	// (generic, 3 steps): p99 810 ms with 8 partitions, 321 ms with 2,
	// 217 ms with 1.
	PartitionsDefault = 2
	SeedDefault       = 1
	// maxPlannedOrders bounds the place-order plan of a --duration run.
	maxPlannedOrders = 200_000
)

// Config configures one benchmark run.
type Config struct {
	// DatabaseURL is the Postgres server; the run drops and creates
	// Database on it (default DatabaseDefault).
	DatabaseURL string
	Database    string
	// Brokers: empty starts an embedded Kafka-protocol broker.
	Brokers []string
	// Saga is SagaGeneric (Steps steps) or SagaPlaceOrder.
	Saga  string
	Steps int
	// Warmup sagas run (closed loop, Concurrency) before measuring.
	Warmup int
	// Sagas measured; with Duration set, the run stops starting sagas
	// after Duration instead (whichever comes first when both are set).
	Sagas    int
	Duration time.Duration
	// Concurrency is the number of sagas in flight (closed loop). With
	// Rate > 0 the run is open loop instead: Rate starts per second.
	Concurrency int
	Rate        float64
	Seed        int64
	// MaxConns of each of the two pools (orchestrator, participants).
	MaxConns int
	// PollInterval of the completion tracker.
	PollInterval time.Duration
	// Lanes is the number of concurrent batches of the orchestrator's reply
	// consumer and of the generic participants' command consumers (the
	// reference participants of place-order keep one: their handlers update
	// shared stock rows); default LanesDefault.
	Lanes int
	// Partitions of every topic the run creates; default PartitionsDefault.
	Partitions int
	// BatchForward gives the generic participants a batch form of their
	// forward handler (participants.BatchFunc): one INSERT for the effects
	// of a batch's commands instead of one per command. Off by default, so
	// the generic saga keeps the shape it is compared in (one statement per
	// step in its participant); the place-order participants always batch.
	BatchForward bool
	// Timeout bounds the wait for the last saga.
	Timeout time.Duration
	// CPUProfile, if set, receives a CPU profile of the measured phase.
	CPUProfile io.Writer
	// Engine overrides engine settings (schema, topics, timers).
	Engine saga.Config
	Logger *slog.Logger
	// Split runs the orchestrator service and the participants in two
	// worker processes (see RunWorker) instead of in this one, which keeps
	// the saga starts, the completion tracker and the embedded broker.
	Split bool
	// Worker is the command that runs one worker, before its flags
	// (WorkerConfig.Args); default: this executable's WorkerSubcommand.
	Worker []string
	// Stderr receives the workers' logs, each line prefixed with the
	// worker's role; default os.Stderr.
	Stderr io.Writer
}

func (c Config) withDefaults() Config {
	c.Database = cmp.Or(c.Database, DatabaseDefault)
	c.Saga = cmp.Or(c.Saga, SagaGeneric)
	c.Steps = cmp.Or(c.Steps, StepsDefault)
	c.Concurrency = cmp.Or(c.Concurrency, ConcurrencyDefault)
	if c.Sagas == 0 && c.Duration == 0 {
		c.Sagas = SagasDefault
	}
	c.Seed = cmp.Or(c.Seed, SeedDefault)
	c.MaxConns = cmp.Or(c.MaxConns, MaxConnsDefault)
	c.PollInterval = cmp.Or(c.PollInterval, PollIntervalDefault)
	c.Timeout = cmp.Or(c.Timeout, TimeoutDefault)
	c.Lanes = cmp.Or(c.Lanes, LanesDefault)
	c.Partitions = cmp.Or(c.Partitions, PartitionsDefault)
	if c.Stderr == nil {
		c.Stderr = os.Stderr
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.DatabaseURL == "":
		return errors.New("bench: Config.DatabaseURL is required")
	case c.Saga != SagaGeneric && c.Saga != SagaPlaceOrder:
		return fmt.Errorf("bench: Config.Saga is %q, want %q or %q", c.Saga, SagaGeneric, SagaPlaceOrder)
	case c.Saga == SagaGeneric && (c.Steps < 1 || c.Steps > 50):
		return fmt.Errorf("bench: Config.Steps is %d, want 1..50", c.Steps)
	case c.Sagas < 0:
		return fmt.Errorf("bench: Config.Sagas is %d, want >= 0", c.Sagas)
	case c.Duration < 0:
		return fmt.Errorf("bench: Config.Duration is %s, want >= 0", c.Duration)
	case c.Warmup < 0:
		return fmt.Errorf("bench: Config.Warmup is %d, want >= 0", c.Warmup)
	case c.Concurrency < 1:
		return fmt.Errorf("bench: Config.Concurrency is %d, want >= 1", c.Concurrency)
	case c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0):
		return fmt.Errorf("bench: Config.Rate is %v, want >= 0", c.Rate)
	case c.Partitions < 1 || c.Partitions > 1000:
		return fmt.Errorf("bench: Config.Partitions is %d, want 1..1000", c.Partitions)
	case c.Lanes < 1:
		return fmt.Errorf("bench: Config.Lanes is %d, want >= 1", c.Lanes)
	case c.MaxConns < 1:
		return fmt.Errorf("bench: Config.MaxConns is %d, want >= 1", c.MaxConns)
	}
	return nil
}

// Result is what one run measured.
type Result struct {
	Saga        string `json:"saga"`
	Steps       int    `json:"steps"`
	Mode        string `json:"mode"` // "closed" or "open"
	Concurrency int    `json:"concurrency,omitempty"`
	Partitions  int    `json:"partitions"`
	Lanes       int    `json:"lanes"`
	// BatchForward: the generic participants ran batch forward handlers.
	BatchForward bool    `json:"batch_forward,omitempty"`
	Rate         float64 `json:"rate,omitempty"`
	Warmup       int     `json:"warmup"`
	Sagas        int     `json:"sagas"`
	Completed    int     `json:"completed"`
	NotComplete  int     `json:"not_completed"`
	AllComplete  bool    `json:"all_completed"`

	ElapsedSeconds float64 `json:"elapsed_seconds"`
	SagasPerSecond float64 `json:"sagas_per_second"`
	StepsPerSecond float64 `json:"steps_per_second"`

	LatencyP50Ms float64 `json:"latency_p50_ms"`
	LatencyP95Ms float64 `json:"latency_p95_ms"`
	LatencyP99Ms float64 `json:"latency_p99_ms"`
	LatencyMaxMs float64 `json:"latency_max_ms"`

	// StepHops: where each step's time went (see StepHop).
	StepHops []StepHop `json:"step_hops,omitempty"`
	// Consumers: each inbox consumer's waits, batches and busy share
	// (see ConsumerStat).
	Consumers []ConsumerStat `json:"consumers,omitempty"`

	XactPerSaga float64 `json:"pg_transactions_per_saga"`
	// PGRoundTripsPerSaga is the round trips to Postgres per saga of the
	// bench process (every Write on its connections: a statement, a whole
	// batch or pipeline, a commit), and PGRoundTrips the same by group:
	// "orchestrator" (its pool: starts, reply batches, timers; the
	// completion tracker's polls left out), "participants" (their pool) and
	// "relays" (every outbox's lock connection). Not counted with Split.
	PGRoundTripsPerSaga float64            `json:"pg_round_trips_per_saga,omitempty"`
	PGRoundTrips        map[string]float64 `json:"pg_round_trips,omitempty"`
	// KafkaRequestsPerSaga is the requests the embedded broker answered per
	// saga, from every client (fetches, produces, offset commits,
	// heartbeats, metadata). Not counted with Config.Brokers.
	KafkaRequestsPerSaga float64 `json:"kafka_requests_per_saga,omitempty"`
	WALBytesPerSaga      float64 `json:"wal_bytes_per_saga"`
	// CPUSeconds is the CPU time of the measured phase summed over
	// Processes; CPUSecPerSaga divides it by Sagas.
	CPUSecPerSaga float64 `json:"cpu_seconds_per_saga"`
	CPUSeconds    float64 `json:"cpu_seconds"`
	// HostCPUSecPerSaga is the CPU time of the whole machine during the
	// measured phase (every process, Postgres included, and the kernel's
	// work for them; /proc/stat, Linux only) per saga. HostBusy is the
	// share of the machine's CPU time that was busy, HostSteal the share
	// the hypervisor gave to other guests.
	HostCPUSecPerSaga float64 `json:"host_cpu_seconds_per_saga,omitempty"`
	HostBusy          float64 `json:"host_busy,omitempty"`
	HostSteal         float64 `json:"host_steal,omitempty"`
	// Split: the orchestrator and the participants ran in worker processes.
	Split bool `json:"split"`
	// Processes are the processes whose CPU time is counted: "bench" alone
	// in one process; "driver", "orchestrator" and "participants" split.
	Processes []ProcessCPU `json:"cpu_processes"`

	SynchronousCommit string `json:"synchronous_commit"`
	Fsync             string `json:"fsync"`
	Brokers           string `json:"brokers"`
	Database          string `json:"database"`
}

// ProcessCPU is the CPU time (user + system) of one process of a run.
type ProcessCPU struct {
	// Role is "bench" (everything in one process: driver, embedded broker,
	// orchestrator, participants), or with Split "driver" (saga starts,
	// completion tracker, embedded broker), "orchestrator" or "participants".
	Role       string  `json:"role"`
	PID        int     `json:"pid"`
	CPUSeconds float64 `json:"cpu_seconds"`
}

// cpuDelta is after - before, process by process.
func cpuDelta(before, after []ProcessCPU) []ProcessCPU {
	out := make([]ProcessCPU, len(after))
	for i, a := range after {
		out[i] = a
		for _, b := range before {
			if b.Role == a.Role && b.PID == a.PID {
				out[i].CPUSeconds = a.CPUSeconds - b.CPUSeconds
			}
		}
	}
	return out
}

// Run runs one benchmark. An error means the run could not be made; sagas
// that did not complete are reported in the Result (AllComplete false).
func Run(ctx context.Context, cfg Config) (Result, error) {
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return Result{}, err
	}
	st, err := setup(ctx, c)
	if err != nil {
		return Result{}, err
	}
	defer st.close()
	return st.measure(ctx)
}

// stack is a run set up: its fresh database (migrated, topics created,
// place-order stock seeded), the broker, the two pools, the orchestrator
// service and the participants. Nothing runs yet.
type stack struct {
	c       Config
	dbURL   string
	brokers []string
	broker  *devbroker.Broker // nil with Config.Brokers
	// trips counts the round trips of the bench process's connections to
	// Postgres (the pools below and the relays' connections).
	trips    *pgTrips
	orchPool *pgxpool.Pool
	partPool *pgxpool.Pool
	svc      *orchestrator.Service
	parts    *participantSet
	w        work
	res      Result // the run's settings, filled in by measure
	// reg holds the in-process components' metrics (the inbox consumers'
	// feed the per-consumer lines).
	reg *prometheus.Registry
}

func setup(ctx context.Context, c Config) (_ *stack, err error) {
	dbURL, err := demo.FreshDatabaseURL(ctx, c.DatabaseURL, c.Database)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	st := &stack{c: c, dbURL: dbURL, brokers: c.Brokers}
	defer func() {
		if err != nil {
			st.close()
		}
	}()
	if len(st.brokers) == 0 {
		// kfake listens on TCP (127.0.0.1): the worker processes of a split
		// run connect to it like any client.
		if st.broker, err = devbroker.Start(devbroker.Config{Partitions: st.c.Partitions}); err != nil {
			return nil, fmt.Errorf("bench: start embedded broker: %w", err)
		}
		st.brokers = st.broker.Addrs()
	}
	st.trips = newPGTrips()
	if st.orchPool, err = newPool(ctx, dbURL, c.MaxConns, orchestratorApp, st.trips); err != nil {
		return nil, err
	}
	if st.partPool, err = newPool(ctx, dbURL, c.MaxConns, participantsApp, st.trips); err != nil {
		return nil, err
	}
	st.res = Result{Saga: c.Saga, Steps: c.Steps, Warmup: c.Warmup, Brokers: strings.Join(st.brokers, ","), Database: c.Database, Split: c.Split, Partitions: c.Partitions, Lanes: c.Lanes, BatchForward: c.BatchForward && c.Saga == SagaGeneric}
	if c.Saga == SagaPlaceOrder {
		st.res.Steps = 5
	}
	if err := st.orchPool.QueryRow(ctx, `SELECT current_setting('synchronous_commit'), current_setting('fsync')`).Scan(&st.res.SynchronousCommit, &st.res.Fsync); err != nil {
		return nil, fmt.Errorf("bench: read synchronous_commit: %w", err)
	}

	m, err := newMetrics()
	if err != nil {
		return nil, err
	}
	st.reg = m.reg
	if st.parts, err = newParticipants(st.partPool, st.brokers, c, m); err != nil {
		return nil, err
	}
	if err := st.parts.prepare(ctx); err != nil {
		return nil, err
	}
	if st.svc, err = newService(st.orchPool, st.brokers, c, m); err != nil {
		return nil, err
	}
	if err := st.svc.Prepare(ctx); err != nil {
		return nil, fmt.Errorf("bench: prepare orchestrator: %w", err)
	}
	switch c.Saga {
	case SagaGeneric:
		st.w = genericWork{seed: c.Seed}
	case SagaPlaceOrder:
		n := c.Warmup + c.Sagas
		if c.Duration > 0 {
			n = c.Warmup + min(maxPlannedOrders, int(c.Duration.Seconds()*3000)+1000)
			if c.Sagas > 0 {
				n = min(n, c.Warmup+c.Sagas)
			}
		}
		plan := workload.NewPlan(workload.Mix{Orders: n, Seed: c.Seed})
		if err := workload.Seed(ctx, st.partPool, workload.SchemasOf("", st.parts.ref), plan); err != nil {
			return nil, err
		}
		st.w = orderWork{orders: plan.Orders}
	}
	return st, nil
}

func (st *stack) close() {
	if st.orchPool != nil {
		st.orchPool.Close()
	}
	if st.partPool != nil {
		st.partPool.Close()
	}
	if st.broker != nil {
		st.broker.Close()
	}
}

// metrics are the Prometheus metrics of one process's components.
type metrics struct {
	saga  *saga.Metrics
	inbox *inbox.Metrics
	relay *relay.Metrics
	reg   *prometheus.Registry
}

func newMetrics() (metrics, error) {
	reg := prometheus.NewRegistry()
	m := metrics{reg: reg}
	var err error
	if m.saga, err = saga.NewMetrics(reg, "sagaflow"); err != nil {
		return m, err
	}
	if m.inbox, err = inbox.NewMetrics(reg, "sagaflow"); err != nil {
		return m, err
	}
	if m.relay, err = relay.NewMetrics(reg, "sagaflow"); err != nil {
		return m, err
	}
	return m, nil
}

// newService builds the orchestrator service of c.Saga over pool; it does
// not touch Postgres or Kafka.
func newService(pool *pgxpool.Pool, brokers []string, c Config, m metrics) (*orchestrator.Service, error) {
	reg := saga.NewRegistry()
	switch c.Saga {
	case SagaGeneric:
		def, err := GenericDefinition(c.Steps)
		if err != nil {
			return nil, err
		}
		if err := reg.Register(def); err != nil {
			return nil, err
		}
	case SagaPlaceOrder:
		if err := steps.Register(reg); err != nil {
			return nil, err
		}
	}
	ec := c.Engine
	ec.Metrics = m.saga
	return orchestrator.New(pool, reg, &orchestrator.Config{
		Brokers: brokers, Engine: ec, Logger: c.Logger.With(slog.String("component", "orchestrator")),
		Partitions: c.Partitions,
		Inbox:      inbox.Config{Metrics: m.inbox, Lanes: c.Lanes},
		Relay:      relay.Config{Metrics: m.relay},
	})
}

// participantSet is the participants of c.Saga.
type participantSet struct {
	// prepare migrates their schemas and creates their topics.
	prepare func(context.Context) error
	// run runs them (consumers, handlers, relays) until ctx ends.
	run func(context.Context) error
	ref *reference.Set // place-order: the set whose schemas are seeded
	// schemas are the participants' schemas (their barrier tables).
	schemas []string
}

// newParticipants builds the participants of c.Saga over pool; it does not
// touch Postgres or Kafka.
func newParticipants(pool *pgxpool.Pool, brokers []string, c Config, m metrics) (*participantSet, error) {
	po := partOptions{Lanes: c.Lanes, BatchForward: c.BatchForward, Brokers: brokers, Logger: c.Logger.With(slog.String("component", "participants")), InboxMetrics: m.inbox, RelayMetrics: m.relay}
	switch c.Saga {
	case SagaGeneric:
		gs, err := newGenericSet(pool, c.Steps, po)
		if err != nil {
			return nil, err
		}
		prepare := func(ctx context.Context) error {
			sets, err := gs.migrations()
			if err != nil {
				return err
			}
			if _, err := migrations.Migrate(ctx, pool, sets...); err != nil {
				return fmt.Errorf("bench: migrate participants: %w", err)
			}
			if err := kafkaclient.EnsureTopics(ctx, brokers, c.Partitions, 1, gs.topics()...); err != nil {
				return fmt.Errorf("bench: create participant topics: %w", err)
			}
			return nil
		}
		var schemas []string
		for i := 1; i <= c.Steps; i++ {
			schemas = append(schemas, genericSchema(i))
		}
		return &participantSet{prepare: prepare, run: func(ctx context.Context) error { return runParticipants(ctx, gs) }, schemas: schemas}, nil
	case SagaPlaceOrder:
		set, err := reference.New(pool, reference.Options{
			Brokers: brokers, Seed: c.Seed, Logger: po.Logger, InboxMetrics: m.inbox, RelayMetrics: m.relay,
			Partitions: c.Partitions,
		})
		if err != nil {
			return nil, err
		}
		prepare := func(ctx context.Context) error {
			if err := set.Prepare(ctx); err != nil {
				return fmt.Errorf("bench: prepare reference participants: %w", err)
			}
			return nil
		}
		var schemas []string
		for _, p := range set.Participants() {
			schemas = append(schemas, p.Schema())
		}
		return &participantSet{prepare: prepare, run: set.Run, ref: set, schemas: schemas}, nil
	}
	return nil, fmt.Errorf("bench: unknown saga %q", c.Saga)
}

// components runs the orchestrator and the participants while the driver
// measures: in this process, or in worker processes with Config.Split.
type components interface {
	// cpu is the CPU time used so far by each process the run counts.
	cpu() ([]ProcessCPU, error)
	// stop stops them and waits; an error is one that stopping raised (a
	// failure before stop is the run's failure cause instead).
	stop() error
}

// inProcess runs the components as goroutines of this process.
type inProcess struct {
	cancel context.CancelFunc
	errc   chan error
}

func startInProcess(ctx context.Context, st *stack, fail context.CancelCauseFunc) *inProcess {
	runCtx, cancel := context.WithCancel(ctx)
	p := &inProcess{cancel: cancel, errc: make(chan error, 2)}
	for what, run := range map[string]func(context.Context) error{"orchestrator": st.svc.Run, "participants": st.parts.run} {
		go func() { p.errc <- failEarly(runCtx, fail, wrap(what, run(runCtx))) }()
	}
	return p
}

func (p *inProcess) cpu() ([]ProcessCPU, error) {
	return []ProcessCPU{{Role: "bench", PID: os.Getpid(), CPUSeconds: cpuSeconds()}}, nil
}

func (p *inProcess) stop() error {
	p.cancel()
	return errors.Join(<-p.errc, <-p.errc)
}

// failEarly reports err through fail if runCtx is still live (the
// component failed on its own) and returns nil then; after runCtx ended
// it returns err (an error while stopping).
func failEarly(runCtx context.Context, fail context.CancelCauseFunc, err error) error {
	if err != nil && runCtx.Err() == nil {
		fail(err)
		return nil
	}
	return err
}

// measure runs the components, the warm-up and the measured loop and
// computes the Result.
func (st *stack) measure(ctx context.Context) (Result, error) {
	c, log, res := st.c, st.c.Logger, st.res
	eng := st.svc.Engine()
	sagas := pgx.Identifier{eng.Outbox().Schema(), "sagas"}.Sanitize()

	// lctx ends when a component fails (or a worker process exits) before
	// the end: the loops stop at once and the run reports why.
	lctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	var comps components
	if c.Split {
		ws, err := startWorkers(lctx, st, fail)
		if err != nil {
			return Result{}, err
		}
		comps = ws
	} else {
		comps = startInProcess(lctx, st, fail)
	}
	trCtx, stopTracker := context.WithCancel(lctx)
	tr := newTracker(st.orchPool, sagas, c.PollInterval)
	trDone := make(chan error, 1)
	go func() { trDone <- failEarly(trCtx, fail, wrap("tracker", tr.run(trCtx))) }()
	stopAll := sync.OnceValue(func() error {
		stopTracker()
		return errors.Join(<-trDone, comps.stop())
	})
	defer stopAll()
	// failure is why lctx ended early, if it did.
	failure := func() error {
		if lctx.Err() != nil && ctx.Err() == nil {
			return context.Cause(lctx)
		}
		return nil
	}
	abort := func(err error) (Result, error) {
		if cause := failure(); cause != nil {
			err = cause // err is only its consequence (a loop cancelled)
		}
		return Result{}, errors.Join(err, stopAll())
	}

	// Warm-up: not measured.
	next := 0
	if c.Warmup > 0 {
		log.Info("bench: warm-up", slog.Int("sagas", c.Warmup))
		wctx, cancel := context.WithTimeout(lctx, c.Timeout)
		_, _, err := closedLoop(wctx, eng, tr, st.w, 0, c.Warmup, 0, c.Concurrency)
		cancel()
		if err != nil {
			return abort(fmt.Errorf("bench: warm-up: %w", err))
		}
		next = c.Warmup
	}

	// Baselines.
	before, err := readCounters(ctx, st.orchPool, c.Database)
	if err != nil {
		return abort(err)
	}
	pollsBefore := tr.polls.Load()
	tripsBefore, kafkaBefore := st.trips.snapshot(), st.kafkaRequests()
	cpuBefore, err := comps.cpu()
	if err != nil {
		return abort(err)
	}
	hostBefore, hostOK := readHostTicks()
	consBefore, err := snapConsumers(st.reg)
	if err != nil {
		return abort(err)
	}
	consFrom := time.Now()
	if c.CPUProfile != nil {
		if err := pprof.StartCPUProfile(c.CPUProfile); err != nil {
			return abort(fmt.Errorf("bench: start CPU profile: %w", err))
		}
	}

	log.Info("bench: measuring", slog.Int("sagas", c.Sagas), slog.Duration("duration", c.Duration),
		slog.Int("concurrency", c.Concurrency), slog.Float64("rate", c.Rate))
	limit := c.Sagas
	if limit == 0 {
		limit = math.MaxInt32
	}
	mctx, cancel := context.WithTimeout(lctx, c.Timeout+c.Duration)
	var ids []uuid.UUID
	var startedAt time.Time
	if c.Rate > 0 {
		res.Mode, res.Rate = "open", c.Rate
		ids, startedAt, err = openLoop(mctx, eng, tr, st.w, next, limit, c.Duration, c.Rate, c.Concurrency)
	} else {
		res.Mode, res.Concurrency = "closed", c.Concurrency
		ids, startedAt, err = closedLoop(mctx, eng, tr, st.w, next, limit, c.Duration, c.Concurrency)
	}
	cancel()
	if c.CPUProfile != nil {
		pprof.StopCPUProfile()
	}
	cpuAfter, cpuErr := comps.cpu()
	hostAfter, hostAfterOK := readHostTicks()
	tripsAfter, kafkaAfter, pollsAtLoopEnd := st.trips.snapshot(), st.kafkaRequests(), tr.polls.Load()-pollsBefore
	if err != nil {
		return abort(fmt.Errorf("bench: %w", err))
	}
	consAfter, err := snapConsumers(st.reg)
	if err != nil {
		return abort(err)
	}
	res.Consumers = consumerStats(consBefore, consAfter, time.Since(consFrom))
	if cpuErr != nil {
		return abort(cpuErr)
	}

	// Latencies from the engine's own timestamps.
	lat, completed, last, err := latencies(ctx, st.orchPool, sagas, ids)
	if err != nil {
		return abort(err)
	}
	if res.StepHops, err = stepHops(ctx, st.orchPool, eng.Outbox().Schema(), st.parts.schemas, ids); err != nil {
		return abort(err)
	}
	pollsDuring := tr.polls.Load() - pollsBefore
	if err := stopAll(); err != nil {
		return Result{}, err
	}
	if err := failure(); err != nil {
		return Result{}, err
	}
	st.orchPool.Close()
	st.partPool.Close()
	after, err := settledCounters(ctx, c.DatabaseURL, c.Database)
	if err != nil {
		return Result{}, err
	}

	n := len(ids)
	res.Sagas, res.Completed, res.NotComplete = n, completed, n-completed
	res.AllComplete = n > 0 && completed == n
	elapsed := last.Sub(startedAt)
	res.ElapsedSeconds = elapsed.Seconds()
	if elapsed > 0 {
		res.SagasPerSecond = float64(completed) / elapsed.Seconds()
		res.StepsPerSecond = res.SagasPerSecond * float64(res.Steps)
	}
	res.LatencyP50Ms, res.LatencyP95Ms, res.LatencyP99Ms, res.LatencyMaxMs = pct(lat, 0.50), pct(lat, 0.95), pct(lat, 0.99), pct(lat, 1)
	res.Processes = cpuDelta(cpuBefore, cpuAfter)
	for _, p := range res.Processes {
		res.CPUSeconds += p.CPUSeconds
	}
	if n > 0 {
		// The tracker's polls and the counter reads are measurement, not cost.
		x := float64(after.xact-before.xact) - float64(pollsDuring) - 2
		res.XactPerSaga = max(x, 0) / float64(n)
		res.WALBytesPerSaga = float64(after.wal-before.wal) / float64(n)
		res.CPUSecPerSaga = res.CPUSeconds / float64(n)
		if !c.Split {
			res.roundTrips(tripsDelta(tripsBefore, tripsAfter), pollsAtLoopEnd, n)
		}
		if st.broker != nil {
			res.KafkaRequestsPerSaga = float64(kafkaAfter-kafkaBefore) / float64(n)
		}
		if hostOK && hostAfterOK {
			res.hostCPU(hostBefore, hostAfter, n)
		}
	}
	return res, nil
}

func wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("bench: %s: %w", what, err)
}

// newPool opens a pool named app; with trips its connections' round trips
// are counted.
func newPool(ctx context.Context, url string, maxConns int, app string, trips *pgTrips) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("bench: database url: %w", err)
	}
	pc.MaxConns = int32(maxConns)
	pc.ConnConfig.RuntimeParams["application_name"] = app
	if trips != nil {
		pc.ConnConfig.AfterNetConnect = trips.afterNetConnect(pc.ConnConfig.AfterNetConnect)
	}
	p, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("bench: %s pool: %w", app, err)
	}
	return p, nil
}

// runParticipants runs the generic participants until ctx ends.
func runParticipants(ctx context.Context, gs *genericSet) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, len(gs.parts))
	for _, p := range gs.parts {
		wg.Go(func() {
			if err := p.Run(ctx); err != nil {
				errs <- err
				cancel()
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// work builds the start request of saga number i.
type work interface {
	request(i int) (saga.StartRequest, error)
}

type genericWork struct{ seed int64 }

func (g genericWork) request(i int) (saga.StartRequest, error) {
	key := fmt.Sprintf("bench-%d-%07d", g.seed, i)
	return saga.StartRequest{Type: GenericType, IdempotencyKey: key, AggregateID: key, Data: GenericData{ID: key}}, nil
}

type orderWork struct{ orders []steps.Order }

func (o orderWork) request(i int) (saga.StartRequest, error) {
	if i >= len(o.orders) {
		return saga.StartRequest{}, fmt.Errorf("place-order plan has %d orders, saga %d asked", len(o.orders), i)
	}
	ord := o.orders[i]
	return saga.StartRequest{Type: orderapi.SagaType, IdempotencyKey: ord.OrderID, AggregateID: ord.OrderID, Data: ord}, nil
}

var errPlanExhausted = errors.New("plan exhausted")

func startOne(ctx context.Context, eng *saga.Engine, w work, i int) (uuid.UUID, error) {
	req, err := w.request(i)
	if err != nil {
		return uuid.Nil, fmt.Errorf("%w: %v", errPlanExhausted, err)
	}
	req.ID = uuid.New()
	if _, _, err := eng.Start(ctx, req); err != nil {
		return uuid.Nil, fmt.Errorf("start saga %d (%s): %w", i, req.IdempotencyKey, err)
	}
	return req.ID, nil
}

// closedLoop keeps conc sagas in flight: each worker starts a saga and
// waits for it to end, until limit sagas were started or dur passed.
func closedLoop(ctx context.Context, eng *saga.Engine, tr *tracker, w work, first, limit int, dur time.Duration, conc int) ([]uuid.UUID, time.Time, error) {
	t0 := time.Now()
	var deadline time.Time
	if dur > 0 {
		deadline = t0.Add(dur)
	}
	var (
		mu       sync.Mutex
		ids      []uuid.UUID
		firstErr error
		next     atomic.Int64
		wg       sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
	}
	for range conc {
		wg.Go(func() {
			for ctx.Err() == nil {
				k := int(next.Add(1)) - 1
				if k >= limit || (!deadline.IsZero() && time.Now().After(deadline)) {
					return
				}
				done := make(chan struct{})
				req, err := w.request(first + k)
				if err != nil {
					if dur > 0 {
						return // a --duration run ran past its plan
					}
					fail(err)
					return
				}
				req.ID = uuid.New()
				tr.watch(req.ID, done)
				if _, _, err := eng.Start(ctx, req); err != nil {
					tr.forget(req.ID)
					fail(fmt.Errorf("start saga %d (%s): %w", first+k, req.IdempotencyKey, err))
					return
				}
				mu.Lock()
				ids = append(ids, req.ID)
				mu.Unlock()
				select {
				case <-done:
				case <-ctx.Done():
					fail(fmt.Errorf("saga %s did not end: %w", req.ID, ctx.Err()))
					return
				}
			}
		})
	}
	wg.Wait()
	return ids, t0, firstErr
}

// openLoop starts rate sagas per second on a fixed schedule (starters run
// on conc goroutines) until limit sagas or dur, then waits for all.
func openLoop(ctx context.Context, eng *saga.Engine, tr *tracker, w work, first, limit int, dur time.Duration, rate float64, conc int) ([]uuid.UUID, time.Time, error) {
	t0 := time.Now()
	jobs := make(chan int, conc)
	var (
		mu       sync.Mutex
		ids      []uuid.UUID
		firstErr error
		wg       sync.WaitGroup
	)
	for range conc {
		wg.Go(func() {
			for k := range jobs {
				req, err := w.request(first + k)
				if err == nil {
					req.ID = uuid.New()
					if _, _, err = eng.Start(ctx, req); err == nil {
						mu.Lock()
						ids = append(ids, req.ID)
						mu.Unlock()
						continue
					}
				}
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		})
	}
	interval := time.Duration(float64(time.Second) / rate)
	timer := time.NewTimer(0)
	defer timer.Stop()
loop:
	for k := 0; k < limit; k++ {
		at := t0.Add(time.Duration(k) * interval)
		if dur > 0 && at.Sub(t0) >= dur {
			break
		}
		if d := time.Until(at); d > 0 {
			timer.Reset(d)
			select {
			case <-ctx.Done():
				break loop
			case <-timer.C:
			}
		}
		select {
		case jobs <- k:
		case <-ctx.Done():
			break loop
		}
	}
	close(jobs)
	wg.Wait()
	if firstErr != nil {
		return ids, t0, firstErr
	}
	// Only now does the tracker look for the ends: the schedule does not
	// wait for them, the latencies come from the saga rows, and polls
	// during the run took a tenth of Postgres's statement time at 500/s.
	dones := make([]chan struct{}, len(ids))
	for i, id := range ids {
		dones[i] = make(chan struct{})
		tr.watch(id, dones[i])
	}
	for i, d := range dones {
		select {
		case <-d:
		case <-ctx.Done():
			return ids, t0, fmt.Errorf("saga %s did not end: %w", ids[i], ctx.Err())
		}
	}
	return ids, t0, nil
}

// tracker polls the saga table for the end of watched sagas.
type tracker struct {
	pool     *pgxpool.Pool
	q        string
	interval time.Duration
	polls    atomic.Int64

	mu      sync.Mutex
	waiting map[uuid.UUID]chan struct{}
	// order is the watched ids oldest first (ended and forgotten ones are
	// dropped when a poll walks past them).
	order []uuid.UUID
}

func newTracker(pool *pgxpool.Pool, sagas string, interval time.Duration) *tracker {
	return &tracker{
		pool: pool, interval: interval, waiting: map[uuid.UUID]chan struct{}{},
		q: `SELECT id FROM ` + sagas + ` WHERE id = ANY($1) AND state NOT IN ('running', 'compensating')`,
	}
}

func (t *tracker) watch(id uuid.UUID, done chan struct{}) {
	t.mu.Lock()
	t.waiting[id] = done
	t.order = append(t.order, id)
	t.mu.Unlock()
}

func (t *tracker) forget(id uuid.UUID) {
	t.mu.Lock()
	delete(t.waiting, id)
	t.mu.Unlock()
}

// pollCostPerID spaces the tracker's polls by the number of sagas watched:
// when a poll looked up every watched id, polling every 5 ms at 1,024 in
// flight took a sixth of Postgres's statement time away from the workload.
// At 1,024 the polls are 51 ms apart, which changes nothing for a closed
// loop whose sagas take far longer; with few sagas watched it stays at the
// tracker's interval.
const pollCostPerID = 50 * time.Microsecond

// pollWindow bounds the ids one poll looks up to the oldest watched ones:
// sagas end roughly in the order they started, so the oldest hold nearly
// all the ends a poll can find, and a poll costs Postgres a lookup per id
// (at 1,024 in flight, looking all of them up was 4.4 ms per poll and 8%
// of a core in a place-order run). Every fullPollEvery-th poll looks all of
// them up, so a saga that ends while younger ones block the window is found
// all the same.
const (
	pollWindow    = 256
	fullPollEvery = 8
)

// polled returns the ids the next poll looks up: all of them when full,
// else the oldest pollWindow; n is the number watched.
func (t *tracker) polled(dst []uuid.UUID, full bool) (ids []uuid.UUID, n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	live := t.order[:0]
	for _, id := range t.order {
		if _, ok := t.waiting[id]; ok {
			live = append(live, id)
		}
	}
	clear(t.order[len(live):])
	t.order = live
	k := len(live)
	if !full {
		k = min(k, pollWindow)
	}
	return append(dst[:0], live[:k]...), len(live)
}

func (t *tracker) run(ctx context.Context) error {
	wait := time.NewTimer(t.interval)
	defer wait.Stop()
	var ids []uuid.UUID
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-wait.C:
		}
		n := t.polls.Load()
		var watched int
		ids, watched = t.polled(ids, n%fullPollEvery == fullPollEvery-1)
		wait.Reset(max(t.interval, time.Duration(watched)*pollCostPerID))
		if len(ids) == 0 {
			continue
		}
		t.polls.Add(1)
		rows, err := t.pool.Query(ctx, t.q, pgUUIDs(ids))
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("poll %d sagas: %w", len(ids), err)
		}
		ended, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("poll %d sagas: %w", len(ids), err)
		}
		t.mu.Lock()
		for _, id := range ended {
			if d, ok := t.waiting[id]; ok {
				close(d)
				delete(t.waiting, id)
			}
		}
		t.mu.Unlock()
	}
}

// latencies reads created_at -> finished_at of the completed sagas among
// ids (milliseconds, sorted), their number and the last finish time.
func latencies(ctx context.Context, pool *pgxpool.Pool, sagas string, ids []uuid.UUID) ([]float64, int, time.Time, error) {
	rows, err := pool.Query(ctx, `SELECT created_at, finished_at FROM `+sagas+` WHERE id = ANY($1) AND state = 'completed' AND finished_at IS NOT NULL`, pgUUIDs(ids))
	if err != nil {
		return nil, 0, time.Time{}, fmt.Errorf("bench: read latencies of %d sagas: %w", len(ids), err)
	}
	defer rows.Close()
	var out []float64
	var last time.Time
	for rows.Next() {
		var c, f time.Time
		if err := rows.Scan(&c, &f); err != nil {
			return nil, 0, time.Time{}, fmt.Errorf("bench: read latencies: %w", err)
		}
		out = append(out, float64(f.Sub(c))/float64(time.Millisecond))
		if f.After(last) {
			last = f
		}
	}
	if err := rows.Err(); err != nil {
		return nil, 0, time.Time{}, fmt.Errorf("bench: read latencies: %w", err)
	}
	slices.Sort(out)
	return out, len(out), last, nil
}

// pct is the nearest-rank percentile q of sorted xs.
func pct(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(xs)))) - 1
	return xs[min(max(i, 0), len(xs)-1)]
}

type counters struct {
	xact int64
	wal  int64
}

const countersSQL = `SELECT xact_commit, pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint FROM pg_stat_database WHERE datname = $1`

func readCounters(ctx context.Context, pool *pgxpool.Pool, db string) (counters, error) {
	var c counters
	if err := pool.QueryRow(ctx, countersSQL, db).Scan(&c.xact, &c.wal); err != nil {
		return c, fmt.Errorf("bench: read pg_stat_database of %s: %w", db, err)
	}
	return c, nil
}

// settledCounters reads the counters once every backend of the run has
// exited (exiting backends flush their statistics).
func settledCounters(ctx context.Context, baseURL, db string) (counters, error) {
	conn, err := pgx.Connect(ctx, baseURL)
	if err != nil {
		return counters{}, fmt.Errorf("bench: connect to read statistics: %w", err)
	}
	defer conn.Close(ctx)
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1`, db).Scan(&n); err != nil {
			return counters{}, fmt.Errorf("bench: wait for backends of %s: %w", db, err)
		}
		if n == 0 || time.Now().After(deadline) {
			break
		}
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return counters{}, ctx.Err()
		case <-t.C:
		}
	}
	var c counters
	if _, err := conn.Exec(ctx, `SELECT pg_stat_clear_snapshot()`); err != nil {
		return c, fmt.Errorf("bench: clear statistics snapshot: %w", err)
	}
	if err := conn.QueryRow(ctx, countersSQL, db).Scan(&c.xact, &c.wal); err != nil {
		return c, fmt.Errorf("bench: read pg_stat_database of %s: %w", db, err)
	}
	return c, nil
}

// cpuSeconds is the user+system CPU time of this process so far.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// pgUUIDs converts ids for a uuid[] parameter: uuid.UUID elements go through
// driver.Valuer and text, which took a tenth of the bench process's CPU in
// the completion tracker's polls.
func pgUUIDs(ids []uuid.UUID) []pgtype.UUID {
	out := make([]pgtype.UUID, len(ids))
	for i, id := range ids {
		out[i] = pgtype.UUID{Bytes: id, Valid: true}
	}
	return out
}
