package cli

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/sagaflow/sagaflow/chaos"
)

// chaosCmd runs the fault harness (package chaos).
func chaosCmd(v *viper.Viper) *cobra.Command {
	var (
		asJSON                  bool
		seed                    int64
		sagas, concurrency      int
		duration, faultEvery    time.Duration
		stepTimeout, quiesce    time.Duration
		database, workDir       string
		killBroker              bool
		faults                  []string
		brokerStop, brokerStart string
	)
	cmd := &cobra.Command{
		Use:   "chaos",
		Short: "Fault harness: two orchestrator replicas and the participants as processes under kills, cut connections, duplicates and late replies; checks every invariant",
		Long: `chaos starts two orchestrator replicas (serve) and two reference participant
processes as separate OS processes, each behind a loopback fault proxy to
Postgres and to the broker, drives a seeded place-order workload through the
replicas' HTTP API and, from the same seed, SIGKILLs and restarts processes,
cuts and restores connections, re-delivers consumed messages and SIGSTOPs
participants past the step timeouts. Then it waits for quiescence and checks
from the databases: every saga terminal, no lost command, no double effect,
nothing compensated after the pivot, outboxes drained. It prints one line of
figures and exits 2 on any violation.

The embedded broker runs in the harness and is never killed. With real Kafka
(--brokers / KAFKA_BROKERS), --kill-broker runs --broker-stop-cmd and
--broker-start-cmd as one of the faults.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logger(v)
			if err != nil {
				return err
			}
			if !cmd.Flags().Changed("log-level") && os.Getenv("SAGAFLOW_LOG_LEVEL") == "" {
				log = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
			}
			res, err := chaos.Run(cmd.Context(), chaos.Config{
				Seed: seed, Sagas: sagas, Duration: duration, DatabaseURL: v.GetString("database.url"), Database: database,
				Brokers: brokers(v), KillBroker: killBroker, BrokerStopCmd: brokerStop, BrokerStartCmd: brokerStart,
				FaultEvery: faultEvery, Faults: faults, StepTimeout: stepTimeout, QuiesceTimeout: quiesce, Concurrency: concurrency,
				WorkDir: workDir, Logger: log,
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
			if !res.OK() {
				if !asJSON {
					for _, s := range res.Violations {
						fmt.Fprintln(cmd.ErrOrStderr(), "  violation:", s)
					}
				}
				if res.WorkDir != "" {
					fmt.Fprintln(cmd.ErrOrStderr(), "children's logs in", res.WorkDir)
				}
				return exitError{code: 2}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&asJSON, "json", false, "print one JSON object instead of the line of figures")
	f.Int64Var(&seed, "seed", 1, "seed of the workload and of every fault decision")
	f.IntVar(&sagas, "sagas", chaos.SagasDefault, "place-order sagas to start")
	f.DurationVar(&duration, "duration", chaos.DurationDefault, "how long faults are injected (sagas start over its first 80%)")
	f.DurationVar(&faultEvery, "fault-every", chaos.FaultEveryDefault, "mean time between two injected faults")
	f.StringSliceVar(&faults, "faults", nil, "fault kinds to inject, comma-separated: "+strings.Join(chaos.FaultKinds, ",")+" (default all)")
	f.DurationVar(&stepTimeout, "step-timeout", chaos.StepTimeoutDefault, "reply timeout of the steps before the pivot (the pivot and after: twice this)")
	f.DurationVar(&quiesce, "quiesce-timeout", chaos.QuiesceTimeoutDefault, "bound on the wait for every saga terminal and outbox drained")
	f.IntVar(&concurrency, "concurrency", chaos.ConcurrencyDefault, "concurrent HTTP saga starts")
	f.StringVar(&database, "database", chaos.DatabaseDefault, "database created afresh on the server of database.url")
	f.StringVar(&workDir, "work-dir", "", "keep the children's config and logs here (default: a temporary directory, removed after a clean run)")
	f.BoolVar(&killBroker, "kill-broker", false, "real Kafka only: stop and start the broker as a fault (needs --broker-stop-cmd, --broker-start-cmd)")
	f.StringVar(&brokerStop, "broker-stop-cmd", "", "shell command that stops the Kafka broker (with --kill-broker)")
	f.StringVar(&brokerStart, "broker-start-cmd", "", "shell command that starts the Kafka broker again (with --kill-broker)")
	return cmd
}
