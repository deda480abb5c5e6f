package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/pflag"

	"github.com/sagaflow/sagaflow/internal/metricset"
	"github.com/sagaflow/sagaflow/orchestrator"
)

// Roles of the worker processes of a split run.
const (
	// RoleOrchestrator runs the orchestrator service: reply consumer,
	// relay of the orchestrator's outbox, timers.
	RoleOrchestrator = "orchestrator"
	// RoleParticipants runs the participants: command consumers, handlers
	// and their relays.
	RoleParticipants = "participants"
)

// WorkerSubcommand is the hidden subcommand of the orchestrator binary
// that runs one worker (cli registers it); a split run spawns its own
// executable with it unless Config.Worker says otherwise.
var WorkerSubcommand = []string{"bench", "worker"}

// WorkerDatabaseURLEnv carries the database URL to a worker: the
// environment, unlike the command line, is not readable by other users.
const WorkerDatabaseURLEnv = "SAGAFLOW_BENCH_WORKER_DATABASE_URL"

// WorkerReady is the line a worker writes to its stdout once it runs.
const WorkerReady = "ready"

// WorkerConfig is what one worker process of a split run is told: its
// flags (Args, AddFlags) and the database URL (WorkerDatabaseURLEnv).
type WorkerConfig struct {
	Role         string
	DatabaseURL  string
	Brokers      []string
	Saga         string
	Steps        int
	Lanes        int
	BatchForward bool
	Unsigned     bool
	Partitions   int
	MaxConns     int
	Seed         int64
	// Engine: the settings a flag carries (schema, topics, timer and gauge
	// intervals, timer batch); its Logger, Metrics and Now are not passed.
	Engine   orchestrator.EngineConfig
	LogLevel slog.Level
}

func workerConfig(st *stack, role string) WorkerConfig {
	c := st.c
	return WorkerConfig{
		Role: role, DatabaseURL: st.dbURL, Brokers: st.brokers, Saga: c.Saga, Steps: c.Steps,
		Lanes: c.Lanes, BatchForward: c.BatchForward, Unsigned: c.Unsigned, Partitions: c.Partitions, MaxConns: c.MaxConns, Seed: c.Seed, Engine: c.Engine, LogLevel: loggerLevel(c.Logger),
	}
}

// Args are the worker's flags, as AddFlags reads them.
func (w WorkerConfig) Args() []string {
	e := w.Engine
	return []string{
		"--role=" + w.Role, "--brokers=" + strings.Join(w.Brokers, ","), "--saga=" + w.Saga,
		"--steps=" + strconv.Itoa(w.Steps), "--lanes=" + strconv.Itoa(w.Lanes), "--batch-forward=" + strconv.FormatBool(w.BatchForward), "--unsigned=" + strconv.FormatBool(w.Unsigned), "--partitions=" + strconv.Itoa(w.Partitions), "--max-conns=" + strconv.Itoa(w.MaxConns),
		"--seed=" + strconv.FormatInt(w.Seed, 10), "--log-level=" + w.LogLevel.String(),
		"--schema=" + e.Schema, "--reply-topic=" + e.ReplyTopic, "--topic-prefix=" + e.TopicPrefix,
		"--timer-interval=" + e.TimerInterval.String(), "--timer-batch=" + strconv.Itoa(e.TimerBatch),
		"--gauge-interval=" + e.GaugeInterval.String(),
	}
}

// Env is the worker's environment on top of the driver's.
func (w WorkerConfig) Env() []string { return []string{WorkerDatabaseURLEnv + "=" + w.DatabaseURL} }

// AddFlags defines the worker's flags on fs, read into w. They shadow the
// orchestrator binary's global --brokers and --log-level.
func (w *WorkerConfig) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&w.Role, "role", "", "orchestrator or participants")
	fs.StringSliceVar(&w.Brokers, "brokers", nil, "Kafka brokers")
	fs.StringVar(&w.Saga, "saga", SagaGeneric, "workload: generic or place-order")
	fs.IntVar(&w.Steps, "steps", StepsDefault, "steps of the generic saga")
	fs.IntVar(&w.Lanes, "lanes", LanesDefault, "concurrent batches of the consumers")
	fs.BoolVar(&w.BatchForward, "batch-forward", false, "batch forward handlers in the generic participants")
	fs.BoolVar(&w.Unsigned, "unsigned", false, "run without record signing")
	fs.IntVar(&w.Partitions, "partitions", PartitionsDefault, "partitions of the topics")
	fs.IntVar(&w.MaxConns, "max-conns", MaxConnsDefault, "connections of the worker's pool")
	fs.Int64Var(&w.Seed, "seed", SeedDefault, "workload seed")
	fs.TextVar(&w.LogLevel, "log-level", slog.LevelWarn, "log level")
	fs.StringVar(&w.Engine.Schema, "schema", "", "orchestrator schema")
	fs.StringVar(&w.Engine.ReplyTopic, "reply-topic", "", "reply topic")
	fs.StringVar(&w.Engine.TopicPrefix, "topic-prefix", "", "prefix of the command topics")
	fs.DurationVar(&w.Engine.TimerInterval, "timer-interval", 0, "timer loop interval")
	fs.IntVar(&w.Engine.TimerBatch, "timer-batch", 0, "sagas per timer transaction")
	fs.DurationVar(&w.Engine.GaugeInterval, "gauge-interval", 0, "in-flight gauge refresh interval")
}

// loggerLevel is the lowest level l logs (above slog.LevelError if none).
func loggerLevel(l *slog.Logger) slog.Level {
	for _, lv := range []slog.Level{slog.LevelDebug, slog.LevelInfo, slog.LevelWarn, slog.LevelError} {
		if l.Enabled(context.Background(), lv) {
			return lv
		}
	}
	return slog.LevelError + 4
}

// RunWorker runs one role of a split run (the driver migrated, created the
// topics and seeded; the worker only runs) until ctx ends or reading parent
// ends: the driver holds the other end of that pipe, so a worker never
// outlives it. Once running it writes WorkerReady and a newline to ready.
func RunWorker(ctx context.Context, w WorkerConfig, log *slog.Logger, parent io.Reader, ready io.Writer) error {
	c := Config{
		DatabaseURL: w.DatabaseURL, Saga: w.Saga, Steps: w.Steps, Lanes: w.Lanes, BatchForward: w.BatchForward, Unsigned: w.Unsigned, Partitions: w.Partitions, MaxConns: w.MaxConns,
		Seed: w.Seed, Engine: w.Engine, Logger: log,
	}.withDefaults()
	if err := c.validate(); err != nil {
		return err
	}
	if len(w.Brokers) == 0 {
		return errors.New("bench worker: no brokers")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if parent != nil {
		go func() {
			_, _ = io.Copy(io.Discard, parent)
			log.Info("bench worker: the driver closed the pipe; stopping")
			cancel()
		}()
	}
	m, err := metricset.New()
	if err != nil {
		return err
	}
	var (
		pool *pgxpool.Pool
		run  func(context.Context) error
	)
	switch w.Role {
	case RoleOrchestrator:
		if pool, err = newPool(ctx, w.DatabaseURL, c.MaxConns, orchestratorApp, nil); err != nil {
			return err
		}
		defer pool.Close()
		svc, err := newService(pool, w.Brokers, c, m)
		if err != nil {
			return err
		}
		run = svc.Run
	case RoleParticipants:
		if pool, err = newPool(ctx, w.DatabaseURL, c.MaxConns, participantsApp, nil); err != nil {
			return err
		}
		defer pool.Close()
		ps, err := newParticipants(pool, w.Brokers, c, m)
		if err != nil {
			return err
		}
		run = ps.run
	default:
		return fmt.Errorf("bench worker: role %q, want %q or %q", w.Role, RoleOrchestrator, RoleParticipants)
	}
	pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
	err = pool.Ping(pctx)
	if err == nil {
		err = orchestrator.PingBrokers(pctx, nil, w.Brokers)
	}
	pcancel()
	if err != nil {
		return fmt.Errorf("bench worker %s: %w", w.Role, err)
	}
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	if _, err := fmt.Fprintln(ready, WorkerReady); err != nil {
		cancel()
		return errors.Join(fmt.Errorf("bench worker %s: write ready: %w", w.Role, err), <-done)
	}
	log.Info("bench worker running", slog.String("role", w.Role))
	if err := <-done; err != nil {
		return fmt.Errorf("bench worker %s: %w", w.Role, err)
	}
	return nil
}
