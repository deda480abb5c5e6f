package cli

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sagaflow/sagaflow/internal/history"
	"github.com/sagaflow/sagaflow/internal/retention"
	"github.com/sagaflow/sagaflow/migrations"
)

// historyCmd fills an orchestrator database with a history of sagas, to
// see how the status API, the page, the reconciler and retention behave
// with millions of rows (docs/performance.md, "A long history").
func historyCmd(cfg *Config) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "history",
		Short: "Fill a database with a history of finished and running sagas of realistic shape (for scale measurements)",
	}
	var o history.Options
	var asJSON bool
	fill := &cobra.Command{
		Use:   "fill",
		Short: "Add --sagas sagas (finished, and the newest --running share running) with their journals and timers",
		Long: `fill migrates the orchestrator's schema if needed and adds sagas copied from
templates that ran through the place-order and the bench's generic sagas
(completed, completed after retries, compensated, failed at the first step,
running at a step): each copy has its own id, business key, times and
journal. Starts are spread evenly over --span up to now. The rows are made
inside Postgres in chunks of --chunk sagas, one transaction each. It prints
the rows added, the time taken and the bytes per saga on disk (tables,
indexes and TOAST). Use a database of its own: the sagas are not real.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			pool, err := newPool(ctx, cfg.Database, 2)
			if err != nil {
				return err
			}
			defer pool.Close()
			o.Schema = cfg.engine().Schema
			sets, err := migrations.Orchestrator(o.Schema)
			if err != nil {
				return err
			}
			if _, err := migrations.Migrate(ctx, pool, sets...); err != nil {
				return err
			}
			if !asJSON {
				last := time.Now()
				o.Progress = func(done int64) {
					if time.Since(last) >= 10*time.Second || done == o.Sagas {
						last = time.Now()
						fmt.Fprintf(cmd.ErrOrStderr(), "history: %d of %d sagas\n", done, o.Sagas)
					}
				}
			}
			res, err := history.Fill(ctx, pool, o)
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(res)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "added %d sagas (%d running) and %d journal rows in %s (%.0f sagas/s); %.0f bytes per saga on disk\n",
				res.Sagas, res.Running, res.JournalRows, res.Elapsed.Round(time.Millisecond), res.SagasPerSec, res.BytesPer)
			return nil
		},
	}
	f := fill.Flags()
	f.Int64Var(&o.Sagas, "sagas", 1_000_000, "sagas to add")
	f.Float64Var(&o.Running, "running", 0.01, "share of the sagas still running (the newest)")
	f.DurationVar(&o.Span, "span", 30*24*time.Hour, "starts are spread over this long up to now (keep it within retention.finished_saga_after, or run serve with retention off)")
	f.Int64Var(&o.Chunk, "chunk", 100_000, "sagas per transaction")
	f.StringVar(&o.Seed, "seed", "h", "seed of ids and keys: a second fill of one database needs another")
	f.BoolVar(&asJSON, "json", false, "print one JSON object")
	cmd.AddCommand(fill, historyMeasureCmd(cfg))
	return cmd
}

func historyMeasureCmd(cfg *Config) *cobra.Command {
	var (
		mo         history.MeasureOptions
		asJSON     bool
		reconcile  bool
		purgeAfter time.Duration
		purgeBatch int
	)
	cmd := &cobra.Command{
		Use:   "measure",
		Short: "Time the status API's reads (lists, deep pages, lookups, stats, the page) on a filled database; optionally the reconciler's sweep and retention's purge",
		Long: `measure sends each read an operator makes to a serving orchestrator (--url)
on a filled database, --repeat times, and prints the median and the slowest
run: the list's first page, filtered pages, a page from the middle of the
history, a lookup by business key, one saga, the stuck list, the stats and
the page. With --reconcile it also runs one reconciliation in dry-run mode
against the database and times it; with --purge-after it runs one cycle of
retention with that finished-saga retention (this deletes sagas) and
reports the rows deleted per second.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			pool, err := newPool(ctx, cfg.Database, 4)
			if err != nil {
				return err
			}
			defer pool.Close()
			mo.Schema = cfg.engine().Schema
			out := historyReport{}
			if mo.BaseURL != "" {
				if out.Probes, err = history.Measure(ctx, pool, mo); err != nil {
					return err
				}
			}
			if reconcile {
				eng, done, err := cliEngine(ctx, cfg)
				if err != nil {
					return err
				}
				o := cfg.Reconcile.options()
				o.DryRun = true
				start := time.Now()
				rep, err := eng.Reconcile(ctx, o, nil)
				done()
				if err != nil {
					return fmt.Errorf("reconcile: %w", err)
				}
				out.Reconcile = &historyTimed{Elapsed: time.Since(start), Rows: int64(rep.Checked), What: fmt.Sprintf("%d differences, %d finished sagas sampled", rep.Differences, rep.Checked)}
			}
			if purgeAfter > 0 {
				p, err := retention.New(pool, &retention.Config{OrchestratorSchema: mo.Schema, FinishedSagaAfter: purgeAfter, FailedSagaAfter: purgeAfter, BatchSize: purgeBatch})
				if err != nil {
					return err
				}
				start := time.Now()
				n, err := p.PurgeOnce(ctx, time.Now())
				if err != nil {
					return fmt.Errorf("purge: %w", err)
				}
				var rows int64
				for _, v := range n {
					rows += v
				}
				out.Purge = &historyTimed{Elapsed: time.Since(start), Rows: rows, What: fmt.Sprint(n)}
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(out)
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "read\tmedian\tslowest\tbytes\tsagas")
			for _, p := range out.Probes {
				items := ""
				if p.Items >= 0 {
					items = fmt.Sprint(p.Items)
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\n", p.Name, ms(p.Median), ms(p.Max), p.Bytes, items)
			}
			if t := out.Reconcile; t != nil {
				fmt.Fprintf(w, "reconcile (dry run)\t%s\t\t%s\n", ms(t.Elapsed), safe(t.What))
			}
			if t := out.Purge; t != nil {
				fmt.Fprintf(w, "retention purge\t%s\t\t%d rows, %.0f rows/s\n", ms(t.Elapsed), t.Rows, float64(t.Rows)/t.Elapsed.Seconds())
			}
			return w.Flush()
		},
	}
	f := cmd.Flags()
	f.StringVar(&mo.BaseURL, "url", "", "base URL of the serving orchestrator's HTTP API on the filled database (empty: no API reads)")
	f.StringVar(&mo.Token, "token", "", "bearer token of the API (a read token is enough)")
	f.IntVar(&mo.Repeat, "repeat", 5, "runs of each read")
	f.BoolVar(&reconcile, "reconcile", false, "also time one reconciliation (dry run) against the database")
	f.DurationVar(&purgeAfter, "purge-after", 0, "also run one retention cycle deleting finished sagas older than this (destructive)")
	f.IntVar(&purgeBatch, "purge-batch", 1000, "rows per delete of that retention cycle")
	f.BoolVar(&asJSON, "json", false, "print one JSON object")
	return cmd
}

type historyTimed struct {
	Elapsed time.Duration `json:"elapsed_ns"`
	Rows    int64         `json:"rows"`
	What    string        `json:"what"`
}

type historyReport struct {
	Probes    []history.Probe `json:"reads,omitempty"`
	Reconcile *historyTimed   `json:"reconcile,omitempty"`
	Purge     *historyTimed   `json:"purge,omitempty"`
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }
