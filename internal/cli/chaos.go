package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sagaflow/sagaflow/internal/chaos"
)

// chaosCmd runs the fault harness (package chaos).
func chaosCmd(c *Config) *cobra.Command {
	var (
		asJSON                  bool
		seed                    int64
		sagas, concurrency      int
		replicas                int
		tripShare               float64
		duration, faultEvery    time.Duration
		stepTimeout, quiesce    time.Duration
		database, workDir       string
		killBroker              bool
		faults                  []string
		brokerStop, brokerStart string
		twin, paymentProvider   bool
		twinCompleted           int
		minGoodput              float64
	)
	cmd := &cobra.Command{
		Use:   "chaos",
		Short: "Fault harness: two orchestrator replicas and the participants as processes under kills, cut connections, duplicates and late replies; checks every invariant",
		Long: `chaos starts two orchestrator replicas (serve; --replicas sets how many) and as many reference participant
processes as separate OS processes, each behind a loopback fault proxy to
Postgres and to the broker, drives a seeded place-order workload through the
replicas' HTTP API and, from the same seed, SIGKILLs and restarts processes,
cuts and restores connections, re-delivers consumed messages and SIGSTOPs
participants past the step timeouts. Then it waits for quiescence and checks
from the databases: every saga terminal, no lost command, no double effect,
nothing compensated after the pivot, outboxes drained. It prints one line of
figures and exits 2 on any violation.

Goodput: unless --twin=false, the fault-free twin of the run goes first:
the same seed, orders, sagas, duration, step timeouts and children's
configuration, no fault injected, in its own database (<database>_twin) on
the same server; then the run under faults. goodput is the sagas completed
under faults over those the twin completed (the planned business failures,
out of stock, coupon taken, payment declined, are the same in both).
--twin-completed N takes the twin's count from an earlier run instead of
running it; --twin=false measures no goodput. A violation in the twin
counts like one under faults (listed with "twin: "). --min-goodput G exits
3 when goodput is below G and nothing was violated. --faults none runs
without faults.

The embedded broker runs in the harness and is never killed. With real Kafka
(--brokers / KAFKA_BROKERS), --kill-broker runs --broker-stop-cmd and
--broker-start-cmd as one of the faults.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if twinCompleted < 0 || (cmd.Flags().Changed("twin-completed") && twinCompleted < 1) {
				return fmt.Errorf("--twin-completed %d: want at least 1 (goodput divides by it)", twinCompleted)
			}
			if minGoodput < 0 {
				return fmt.Errorf("--min-goodput %v: want >= 0", minGoodput)
			}
			if minGoodput > 0 && !twin && twinCompleted == 0 {
				return errors.New("--min-goodput needs goodput: drop --twin=false or give --twin-completed")
			}
			log := quietLogger(cmd, c.Log, true)
			res, err := chaos.Run(cmd.Context(), chaos.Config{
				Seed: seed, Sagas: sagas, TripShare: tripShare, Duration: duration, DatabaseURL: c.Database.URL, Database: database,
				Brokers: c.Kafka.Brokers, KillBroker: killBroker, BrokerStopCmd: brokerStop, BrokerStartCmd: brokerStart,
				FaultEvery: faultEvery, Faults: faults, StepTimeout: stepTimeout, QuiesceTimeout: quiesce, Concurrency: concurrency,
				WorkDir: workDir, Logger: log, Twin: twin, TwinCompleted: twinCompleted, PaymentProvider: paymentProvider, Replicas: replicas,
			})
			if err != nil {
				if res.WorkDir != "" {
					return fmt.Errorf("%w (children's logs in %s)", err, res.WorkDir)
				}
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				if res.Violations == nil {
					res.Violations = []string{}
				}
				if err := json.NewEncoder(out).Encode(res); err != nil {
					return err
				}
			} else {
				fmt.Fprintln(out, res.Line())
			}
			switch code := res.ExitCode(minGoodput); code {
			case chaos.ExitViolation:
				if !asJSON {
					for _, s := range res.Violations {
						fmt.Fprintln(cmd.ErrOrStderr(), "  violation:", safe(s))
					}
				}
				if res.WorkDir != "" {
					fmt.Fprintln(cmd.ErrOrStderr(), "children's logs in", res.WorkDir)
				}
				return exitError{code: code}
			case chaos.ExitLowGoodput:
				fmt.Fprintf(cmd.ErrOrStderr(), "chaos: goodput below --min-goodput %v: %s\n", minGoodput, res.GoodputText())
				return exitError{code: code}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&asJSON, "json", false, "print one JSON object instead of the line of figures")
	f.Int64Var(&seed, "seed", 1, "seed of the workload and of every fault decision")
	f.IntVar(&sagas, "sagas", chaos.SagasDefault, "sagas to start: place-order and book-trip (--trip-share of them)")
	f.Float64Var(&tripShare, "trip-share", chaos.TripShareDefault, "share of --sagas started as book-trip sagas, some needing an approval the harness gives or refuses through the events API (negative: none)")
	f.DurationVar(&duration, "duration", chaos.DurationDefault, "how long faults are injected (sagas start over its first 80%)")
	f.DurationVar(&faultEvery, "fault-every", chaos.FaultEveryDefault, "mean time between two injected faults")
	f.StringSliceVar(&faults, "faults", nil, "fault kinds to inject, comma-separated: "+strings.Join(chaos.FaultKinds, ",")+" (default all), or "+chaos.FaultsNone)
	f.DurationVar(&stepTimeout, "step-timeout", chaos.StepTimeoutDefault, "reply timeout of the steps before the pivot (the pivot and after: twice this)")
	f.DurationVar(&quiesce, "quiesce-timeout", chaos.QuiesceTimeoutDefault, "bound on the wait for every saga terminal and outbox drained")
	f.IntVar(&concurrency, "concurrency", chaos.ConcurrencyDefault, "concurrent HTTP saga starts")
	f.IntVar(&replicas, "replicas", chaos.ReplicasDefault, fmt.Sprintf("orchestrator processes (serve) and participants processes, as many of each (1 to %d)", chaos.PartitionsDefault))
	f.StringVar(&database, "database", chaos.DatabaseDefault, "database created afresh on the server of database.url (the twin's: this + "+chaos.TwinSuffix+")")
	f.StringVar(&workDir, "work-dir", "", "keep the children's config and logs here, in faults/ and twin/ (default: a temporary directory, removed after a clean run)")
	f.BoolVar(&twin, "twin", true, "run the fault-free twin first (same seed and workload, its own database) and report goodput")
	f.IntVar(&twinCompleted, "twin-completed", 0, "the twin's completed count, measured before: goodput without running the twin")
	f.Float64Var(&minGoodput, "min-goodput", 0, "exit 3 when goodput is below this (0: no threshold)")
	f.BoolVar(&paymentProvider, "payment-provider", false, "the participants charge through a fake payment provider on loopback (answer later, external calls); the check adds: the provider's charges equal the ledger's")
	f.BoolVar(&killBroker, "kill-broker", false, "real Kafka only: stop and start the broker as a fault (needs --broker-stop-cmd, --broker-start-cmd)")
	f.StringVar(&brokerStop, "broker-stop-cmd", "", "shell command that stops the Kafka broker (with --kill-broker)")
	f.StringVar(&brokerStart, "broker-start-cmd", "", "shell command that starts the Kafka broker again (with --kill-broker)")
	return cmd
}
