package chaos

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"
)

// Defaults of Config.
const (
	DatabaseDefault = "sagaflow_chaos"
	SagasDefault    = 300
	// ReplicasDefault is how many orchestrator processes, and how many
	// participants processes, a run starts (Config.Replicas); at most
	// PartitionsDefault of each consume.
	ReplicasDefault       = 2
	DurationDefault       = 45 * time.Second
	FaultEveryDefault     = 700 * time.Millisecond
	QuiesceTimeoutDefault = 3 * time.Minute
	StepTimeoutDefault    = 500 * time.Millisecond
	ConcurrencyDefault    = 8
	// TripShareDefault is the share of Config.Sagas that are book-trip
	// sagas (the rest place-order).
	TripShareDefault  = 0.25
	PartitionsDefault = 8
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
	// TripShare is the share of Sagas started as book-trip sagas (some
	// with a car, some needing an approval the harness gives or refuses
	// through the events API), the rest place-order; 0: TripShareDefault;
	// negative: none.
	TripShare float64
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
	// PaymentProvider makes the participants charge through a fake payment
	// provider the harness runs on loopback (participants/external/
	// fakeprovider, given to the participants processes as
	// participants.payment_provider_url): the kills of the participants
	// then fall between a charge's intent, its call and its completion.
	// The check adds: the provider's own count of charges equals the
	// ledger's (every customer charged exactly once).
	PaymentProvider bool
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
	// Replicas is how many orchestrator processes (`serve`) and how many
	// participants processes run, each pair of kinds sharing its consumer
	// groups and database; 0: ReplicasDefault; 1 to PartitionsDefault.
	Replicas int
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
	c.Replicas = cmp.Or(c.Replicas, ReplicasDefault)
	c.TripShare = cmp.Or(c.TripShare, TripShareDefault)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Sagas < 1:
		return fmt.Errorf("chaos: Config.Sagas is %d, want at least 1", c.Sagas)
	case c.TripShare > 1:
		return fmt.Errorf("chaos: Config.TripShare is %v, want at most 1 (negative: no trips)", c.TripShare)
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
	case c.Replicas < 1 || c.Replicas > PartitionsDefault:
		return fmt.Errorf("chaos: Config.Replicas is %d, want 1 to %d (the topics' partitions)", c.Replicas, PartitionsDefault)
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

// trips is how many of Sagas are book-trip sagas.
func (c Config) trips() int {
	if c.TripShare <= 0 {
		return 0
	}
	return int(float64(c.Sagas)*c.TripShare + 0.5)
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
