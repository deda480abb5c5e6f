package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sagaflow/sagaflow/internal/metricset"
	"github.com/sagaflow/sagaflow/orchestrator"
)

// ReconcileIntervalDefault is reconcile.interval's default.
const ReconcileIntervalDefault = 5 * time.Minute

// withReconciler runs run beside the engine's reconciler loop when
// reconcile.enabled.
func withReconciler(rc ReconcileConfig, svc *orchestrator.Service, ms *metricset.Set, run func(context.Context) error) func(context.Context) error {
	if !rc.Enabled {
		return run
	}
	o := rc.options()
	o.Outcomes, o.Starts = svc.OutcomeSource(), svc.StartSource()
	// Each run looks at a window at least one interval wide: no end falls
	// between two runs.
	o.OutcomeWindow = max(orchestrator.ReconcileOutcomeWindowDefault, rc.Interval+orchestrator.ReconcileOutcomeGraceDefault)
	return func(ctx context.Context) error {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- svc.Engine().RunReconciler(ctx, rc.Interval, o, ms.Reconcile) }()
		err := run(ctx)
		cancel()
		return errors.Join(err, <-done)
	}
}

// reconcileCmd runs one reconciliation against the database (what `serve`
// does every reconcile.interval) and prints the report; its subcommands
// list and resolve the open discrepancies.
func reconcileCmd(cfg *Config) *cobra.Command {
	var (
		since                time.Duration
		sampleRate, flowRate float64
		asJSON               bool
		dryRun               bool
	)
	cmd := &cobra.Command{
		Use:   "reconcile",
		Short: "Compare sagas with the journal's rules and their participants' records; repair what is safe, list the rest",
		Long: `reconcile runs one reconciliation against the orchestrator's database, as
serve does every reconcile.interval: failed sagas whose step was given up
are asked about again (a query through the one door, actor reconciler),
stuck sagas have their active command re-sent, a sample of the finished
sagas is checked against the participants (their answers are compared when
they arrive, by the serving orchestrator, and found by the next run; the flow
check's sample finds commands answered but not recorded), a start that made
two sagas is looked for when the unique index that prevents it is missing, and
what cannot be repaired is kept as an open discrepancy (API GET /reconcile,
the status page). It prints the report; with --json the report as JSON, with
"differences" (this run's count) and "list".`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			eng, done, err := cliEngine(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			defer done()
			o := cfg.Reconcile.options()
			o.DryRun = dryRun
			if cmd.Flags().Changed("since") {
				o.Since = since
			}
			if cmd.Flags().Changed("sample-rate") {
				o.SampleRate = sampleRate
				if sampleRate == 0 {
					o.SampleRate = -1
				}
			}
			if cmd.Flags().Changed("flow-sample-rate") {
				o.FlowSampleRate = flowRate
				if flowRate == 0 {
					o.FlowSampleRate = -1
				}
			}
			rep, err := eng.Reconcile(cmd.Context(), o, nil)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), rep)
			}
			printReport(cmd.OutOrStdout(), rep)
			return nil
		},
	}
	cmd.Flags().DurationVar(&since, "since", orchestrator.ReconcileSinceDefault, "window of journal entries and finished sagas looked at (reconcile.since)")
	cmd.Flags().Float64Var(&sampleRate, "sample-rate", 0, "share of finished sagas checked against their participants (reconcile.sample_rate; 0: none)")
	cmd.Flags().Float64Var(&flowRate, "flow-sample-rate", 0, "share of finished sagas whose commands are checked against the participants' records (reconcile.flow_sample_rate; 0: none)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "find and report; repair, check and record nothing")
	cmd.AddCommand(reconcileListCmd(cfg), reconcileResolveCmd(cfg))
	return cmd
}

func reconcileListCmd(cfg *Config) *cobra.Command {
	var asJSON bool
	var limit int
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the open discrepancies, newest first",
		RunE: func(cmd *cobra.Command, _ []string) error {
			eng, done, err := cliEngine(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			defer done()
			open, err := eng.OpenDiscrepancies(cmd.Context(), limit)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), map[string]any{"open": open})
			}
			printDiscrepancies(cmd.OutOrStdout(), open)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	cmd.Flags().IntVar(&limit, "limit", 100, "at most this many")
	return cmd
}

func reconcileResolveCmd(cfg *Config) *cobra.Command {
	var actor, reason string
	cmd := &cobra.Command{
		Use:   "resolve ID --actor A --reason R",
		Short: "Close an open discrepancy you have dealt with (audited)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil || id < 1 {
				return fmt.Errorf("discrepancy id %q: want a positive number (see `orchestrator reconcile list`)", args[0])
			}
			eng, done, err := cliEngine(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			defer done()
			if err := eng.ResolveDiscrepancy(cmd.Context(), id, actor, reason); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "discrepancy %d resolved by %s\n", id, safe(actor))
			return nil
		},
	}
	cmd.Flags().StringVar(&actor, "actor", "", "who resolves it (required)")
	cmd.Flags().StringVar(&reason, "reason", "", "what was done (required)")
	return cmd
}

// cliEngine is an engine over the configured database (no Kafka: commands
// it decides go to the outbox, which the serving orchestrator's relay
// publishes).
func cliEngine(ctx context.Context, cfg *Config) (*orchestrator.Engine, func(), error) {
	reg, err := cfg.registry()
	if err != nil {
		return nil, nil, err
	}
	pool, err := newPool(ctx, cfg.Database, 4)
	if err != nil {
		return nil, nil, err
	}
	ec := cfg.engine()
	eng, err := orchestrator.NewEngine(pool, reg, &ec)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return eng, pool.Close, nil
}

func printReport(w io.Writer, r orchestrator.ReconcileReport) {
	mode := ""
	if r.DryRun {
		mode = " (dry run: nothing repaired or recorded)"
	}
	fmt.Fprintf(w, "reconciled%s: %d differences, %d repaired, %d finished sagas checked (%d by the flow check), %d open\n", mode, r.Differences, r.Repaired, r.Checked, r.FlowChecked, r.Open)
	kinds := make([]string, 0, len(r.ByKind))
	for k, n := range r.ByKind {
		kinds = append(kinds, fmt.Sprintf("%s=%d", safe(string(k)), n))
	}
	if len(kinds) > 0 {
		slices.Sort(kinds)
		fmt.Fprintln(w, "by kind: "+strings.Join(kinds, " "))
	}
	printDiscrepancies(w, r.List)
}

func printDiscrepancies(w io.Writer, ds []orchestrator.Discrepancy) {
	if len(ds) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSAGA\tSTEP\tKIND\tREPAIR\tDETAIL")
	for _, d := range ds {
		id := "-"
		if d.ID > 0 {
			id = strconv.FormatInt(d.ID, 10)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", id, d.SagaID, safe(d.Step), safe(string(d.Kind)), safe(cmp(string(d.Repair), "-")), oneLine(d.Detail))
	}
	tw.Flush()
}
