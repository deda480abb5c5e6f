package bench

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"time"

	"github.com/sagaflow/sagaflow/orchestrator"
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
	// inProcessPollInterval: the tracker's polls in an in-process run,
	// where the engine reports every end at once (Config.OnFinished) and
	// polls only back it up.
	inProcessPollInterval = 100 * time.Millisecond
	TimeoutDefault        = 5 * time.Minute
	MaxConnsDefault       = 16
	LanesDefault          = 4
	// PartitionsDefault is the partitions of every topic of a run. On two
	// cores more partitions cost more than they give: each partition is a
	// fetch session of its own in every consumer (and a produce batch of its
	// own), and at moderate load each fetch then brings one message, so
	// every message pays for its own transaction (measured:
	// docs/perf/figures.md#bench-partitions).
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
	// forward handler (participants.WithBatch): one INSERT for the effects
	// of a batch's commands instead of one per command. Off by default, so
	// the generic saga keeps the shape it is compared in (one statement per
	// step in its participant); the place-order participants always batch.
	BatchForward bool
	// Unsigned runs without record signing (commands and replies go
	// unsigned and unchecked); by default the run signs as a production
	// install does.
	Unsigned bool
	// Timeout bounds the wait for the last saga.
	Timeout time.Duration
	// CPUProfile, if set, receives a CPU profile of the measured phase.
	CPUProfile io.Writer
	// Engine overrides engine settings (schema, topics, timers).
	Engine orchestrator.EngineConfig
	Logger *slog.Logger
	// Split runs the orchestrator service and the participants in two
	// worker processes (see RunWorker) instead of in this one, which keeps
	// the saga starts, the completion tracker and the embedded broker.
	Split bool
	// Replicas is how many worker processes of each role a split run
	// starts (0 or 1: one of each): replicas of the orchestrator share its
	// consumer group and database, replicas of the participants theirs, as
	// replicas of a deployment do.
	Replicas int
	// CPULimit, if above 0, confines each worker process of a split run to
	// this many CPUs, through a cgroup v1 cpu controller of its own under
	// CgroupRoot (the driver, Postgres and the broker stay unconfined).
	CPULimit float64
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

// maxReplicas bounds Config.Replicas; minCPULimit is the smallest
// Config.CPULimit (the kernel's smallest quota is 1 ms a 100 ms period).
const (
	maxReplicas = 16
	minCPULimit = 0.01
)

// replicas is how many workers of each role a split run starts.
func (c Config) replicas() int { return max(c.Replicas, 1) }

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
	case c.Replicas < 0 || c.Replicas > maxReplicas:
		return fmt.Errorf("bench: Config.Replicas is %d, want 0..%d", c.Replicas, maxReplicas)
	case c.Replicas > 1 && !c.Split:
		return fmt.Errorf("bench: Config.Replicas is %d without Split: replicas are worker processes", c.Replicas)
	case c.CPULimit < 0 || math.IsNaN(c.CPULimit) || math.IsInf(c.CPULimit, 0):
		return fmt.Errorf("bench: Config.CPULimit is %v, want >= 0 CPUs", c.CPULimit)
	case c.CPULimit > 0 && !c.Split:
		return fmt.Errorf("bench: Config.CPULimit is %v without Split: the limit applies to worker processes", c.CPULimit)
	case c.CPULimit > 0 && c.CPULimit < minCPULimit:
		return fmt.Errorf("bench: Config.CPULimit is %v, want at least %v CPUs", c.CPULimit, minCPULimit)
	}
	return nil
}

// splitReplicas is Result.Replicas: the workers of each role, 0 unless
// split.
func splitReplicas(c Config) int {
	if !c.Split {
		return 0
	}
	return c.replicas()
}
