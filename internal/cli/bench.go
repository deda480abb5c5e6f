package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sagaflow/sagaflow/internal/bench"
)

func benchCmd(c *Config) *cobra.Command {
	var (
		cfg                   bench.Config
		asJSON                bool
		cpuProfile, sweep     string
		plotPath, resultsPath string
		replot                string
		repeat                int
		floor                 bool
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Run a fixed, seeded saga workload end to end and report throughput, latency and cost per saga",
		Long: `bench runs the orchestrator, its relay and the participants in this process on a
fresh Postgres database (--database, dropped and created) and the embedded Kafka-protocol
broker (or --brokers / KAFKA_BROKERS), warms up, then measures --sagas sagas (or
--duration) at --concurrency sagas in flight (closed loop) or at --rate starts per
second (open loop). --sweep 8,16,32 runs one measurement per concurrency and draws
throughput and p99 latency against concurrency into --plot.

--split runs the orchestrator service (reply consumer, relay, timers) and the
participants (with their relays) in two worker processes of this executable
instead; this process keeps the saga starts (like a client app calling
StartTx), the completion tracker, the counters and the embedded broker. CPU per
saga is then the sum over the three processes (listed in the result).
--replicas N starts N worker processes of each role instead of one, and
--cpu-limit C confines each worker to C CPUs in a cgroup of its own (the
driver, Postgres and the broker stay unconfined): what a replica adds, on one
machine; give the topics at least N partitions (--partitions).

--floor measures what a lone saga of --steps steps cannot go below on this
machine with this design: its 2N+1 durable commits and 2N Kafka hops run one
after the other with sagaflow's clients on the same Postgres and broker, and
nothing else (no saga state, journal, signing or dispatcher); --sagas chains
after --warmup.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := quietLogger(cmd, c.Log, true)
			cfg.DatabaseURL, cfg.Brokers, cfg.Logger, cfg.Stderr = c.Database.URL, c.Kafka.Brokers, log, cmd.ErrOrStderr()
			cfg.Engine = c.engine()
			if replot != "" {
				b, err := os.ReadFile(replot)
				if err != nil {
					return fmt.Errorf("--replot: %w", err)
				}
				var all []bench.Result
				if err := json.Unmarshal(b, &all); err != nil {
					return fmt.Errorf("--replot %s: %w", replot, err)
				}
				return writePlot(cmd, all, plotPath)
			}
			if floor {
				return runFloor(cmd, cfg, asJSON, repeat, sweep, cpuProfile)
			}
			if repeat < 1 {
				return fmt.Errorf("--repeat is %d, want >= 1", repeat)
			}
			if sweep != "" {
				if repeat > 1 {
					return fmt.Errorf("--repeat and --sweep cannot be combined")
				}
				return runSweep(cmd, cfg, sweep, plotPath, resultsPath, asJSON)
			}
			if repeat > 1 {
				if cpuProfile != "" {
					return fmt.Errorf("--repeat and --cpuprofile cannot be combined (profile one run)")
				}
				return runRepeat(cmd, cfg, repeat, asJSON)
			}
			if cpuProfile != "" {
				f, err := os.Create(cpuProfile)
				if err != nil {
					return fmt.Errorf("--cpuprofile: %w", err)
				}
				defer f.Close()
				cfg.CPUProfile = f
			}
			res, err := bench.Run(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			if asJSON {
				if err := json.NewEncoder(cmd.OutOrStdout()).Encode(res); err != nil {
					return err
				}
			} else {
				printBench(cmd.OutOrStdout(), res)
			}
			if !res.AllComplete {
				return exitError{code: 2}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Saga, "saga", bench.SagaGeneric, "workload: generic or place-order")
	f.IntVar(&cfg.Steps, "steps", bench.StepsDefault, "steps of the generic saga (one INSERT per step in its participant)")
	f.IntVar(&cfg.Sagas, "sagas", bench.SagasDefault, "sagas to measure (0 with --duration: as many as fit)")
	f.DurationVar(&cfg.Duration, "duration", 0, "stop starting sagas after this long (0: run --sagas)")
	f.IntVar(&cfg.Warmup, "warmup", bench.WarmupDefault, "sagas run before measuring")
	f.IntVar(&cfg.Concurrency, "concurrency", bench.ConcurrencyDefault, "sagas in flight (closed loop); with --rate, the starter goroutines")
	f.Float64Var(&cfg.Rate, "rate", 0, "open loop: saga starts per second (0: closed loop)")
	f.Int64Var(&cfg.Seed, "seed", bench.SeedDefault, "workload seed")
	f.StringVar(&cfg.Database, "database", bench.DatabaseDefault, "database created afresh for the run on the server of database.url")
	f.IntVar(&cfg.MaxConns, "max-conns", bench.MaxConnsDefault, "connections of each of the two pools (orchestrator, participants)")
	f.IntVar(&cfg.Partitions, "partitions", bench.PartitionsDefault, "partitions of every topic of the run (on 2 cores fewer partitions mean bigger fetches and batches at moderate load)")
	f.IntVar(&cfg.Lanes, "lanes", bench.LanesDefault, "concurrent batches of the reply consumer and of the generic participants")
	f.BoolVar(&cfg.BatchForward, "batch-forward", false, "generic participants register a batch forward handler (one INSERT per batch, not per command)")
	f.BoolVar(&cfg.Unsigned, "unsigned", false, "run without record signing (by default commands and replies are signed and checked, as in production)")
	f.DurationVar(&cfg.Timeout, "timeout", bench.TimeoutDefault, "bound on the wait for the last saga")
	f.BoolVar(&asJSON, "json", false, "print one JSON object (an array with --sweep)")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the measured phase to this file (with --split: of the driver only)")
	f.BoolVar(&cfg.Split, "split", false, "run the orchestrator and the participants in two worker processes (this process starts the sagas and measures); CPU counts all three")
	f.IntVar(&cfg.Replicas, "replicas", 1, "with --split: worker processes of each role (replicas of the orchestrator and of the participants sharing their consumer groups and database)")
	f.Float64Var(&cfg.CPULimit, "cpu-limit", 0, "with --split: CPUs each worker process may use, through a cgroup v1 cpu controller of its own (0: no limit; needs a writable "+bench.CgroupRoot+")")
	f.StringVar(&sweep, "sweep", "", "comma-separated concurrencies to run one after another, e.g. 8,16,32,64,128")
	f.StringVar(&plotPath, "plot", "docs/perf/scaling.png", "with --sweep: PNG plot of throughput and p99 latency against concurrency")
	f.StringVar(&replot, "replot", "", "redraw --plot from a --results JSON file of an earlier sweep, without running")
	f.IntVar(&repeat, "repeat", 1, "run the measurement this many times (a fresh database each) and report each run and the medians")
	f.StringVar(&resultsPath, "results", "", "with --sweep: also write the results as JSON to this file")
	f.BoolVar(&floor, "floor", false, "measure the floor of a lone saga instead: its durable commits and Kafka hops alone, one after the other")
	cmd.AddCommand(benchWorkerCmd())
	return cmd
}

// benchWorkerCmd is the hidden `bench worker` a --split run spawns (see
// bench.RunWorker): it runs one role until SIGTERM or until its stdin, a
// pipe from the driver, closes.
func benchWorkerCmd() *cobra.Command {
	var w bench.WorkerConfig
	cmd := &cobra.Command{
		Use:    bench.WorkerSubcommand[len(bench.WorkerSubcommand)-1],
		Short:  "Run the orchestrator or the participants of a bench --split run (spawned by bench)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			w.DatabaseURL = os.Getenv(bench.WorkerDatabaseURLEnv)
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: w.LogLevel}))
			return bench.RunWorker(cmd.Context(), w, log, cmd.InOrStdin(), cmd.OutOrStdout())
		},
	}
	w.AddFlags(cmd.Flags())
	return cmd
}

// runFloor runs bench --floor.
func runFloor(cmd *cobra.Command, cfg bench.Config, asJSON bool, repeat int, sweep, cpuProfile string) error {
	fl := cmd.Flags()
	for _, name := range []string{"concurrency", "rate", "duration", "split", "replicas", "cpu-limit", "partitions", "lanes", "batch-forward", "unsigned", "max-conns", "saga"} {
		if fl.Changed(name) {
			return fmt.Errorf("--floor and --%s cannot be combined: %s", name, bench.ErrFloorFlags)
		}
	}
	if repeat != 1 || sweep != "" || cpuProfile != "" {
		return fmt.Errorf("--floor and --repeat, --sweep or --cpuprofile cannot be combined: %s", bench.ErrFloorFlags)
	}
	res, err := bench.Floor(cmd.Context(), cfg)
	if err != nil {
		return err
	}
	if asJSON {
		return json.NewEncoder(cmd.OutOrStdout()).Encode(res)
	}
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "floor of a lone %d-step saga: %d durable commits and %d Kafka hops one after the other, %d chains\n", res.Steps, res.Transactions, res.Hops, res.Chains)
	fmt.Fprintf(w, "  chain      p50 %.2f ms  p90 %.2f  p99 %.2f\n", res.ChainP50Ms, res.ChainP90Ms, res.ChainP99Ms)
	fmt.Fprintf(w, "  commit     p50 %.3f ms  p90 %.3f (one round trip, durable)\n", res.CommitP50Ms, res.CommitP90Ms)
	fmt.Fprintf(w, "  hop        p50 %.3f ms  p90 %.3f (produce %.3f, then fetch %.3f)\n", res.HopP50Ms, res.HopP90Ms, res.ProduceP50Ms, res.FetchP50Ms)
	return nil
}

// runRepeat runs cfg n times and reports every run and the medians.
func runRepeat(cmd *cobra.Command, cfg bench.Config, n int, asJSON bool) error {
	var runs []bench.Result
	for i := range n {
		res, err := bench.Run(cmd.Context(), cfg)
		if err != nil {
			return fmt.Errorf("run %d of %d: %w", i+1, n, err)
		}
		if !asJSON {
			fmt.Fprintf(cmd.OutOrStdout(), "run %d of %d: ", i+1, n)
			printBench(cmd.OutOrStdout(), res)
		}
		runs = append(runs, res)
	}
	med, err := bench.Median(runs)
	if err != nil {
		return err
	}
	if asJSON {
		if err := json.NewEncoder(cmd.OutOrStdout()).Encode(struct {
			Runs   []bench.Result `json:"runs"`
			Median bench.Result   `json:"median"`
		}{runs, med}); err != nil {
			return err
		}
	} else {
		var tp, p99 []string
		for _, r := range runs {
			tp = append(tp, fmt.Sprintf("%.0f", r.SagasPerSecond))
			p99 = append(p99, fmt.Sprintf("%.0f", r.LatencyP99Ms))
		}
		fmt.Fprintf(cmd.OutOrStdout(), "median of %d runs (sagas/s %s; p99 ms %s): ", n, strings.Join(tp, ", "), strings.Join(p99, ", "))
		printBench(cmd.OutOrStdout(), med)
	}
	if !med.AllComplete {
		return exitError{code: 2}
	}
	return nil
}

func runSweep(cmd *cobra.Command, cfg bench.Config, sweep, plotPath, resultsPath string, asJSON bool) error {
	var concs []int
	for _, s := range strings.Split(sweep, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return fmt.Errorf("--sweep %q: %q is not a positive concurrency", sweep, s)
		}
		concs = append(concs, n)
	}
	var all []bench.Result
	for _, c := range concs {
		cfg.Concurrency = c
		res, err := bench.Run(cmd.Context(), cfg)
		if err != nil {
			return fmt.Errorf("sweep at concurrency %d: %w", c, err)
		}
		if !asJSON {
			printBench(cmd.OutOrStdout(), res)
		}
		all = append(all, res)
	}
	if asJSON {
		if err := json.NewEncoder(cmd.OutOrStdout()).Encode(all); err != nil {
			return err
		}
	}
	if resultsPath != "" {
		b, err := json.MarshalIndent(all, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(resultsPath, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("--results: %w", err)
		}
	}
	if plotPath != "" {
		if err := writePlot(cmd, all, plotPath); err != nil {
			return err
		}
	}
	for _, r := range all {
		if !r.AllComplete {
			return exitError{code: 2}
		}
	}
	return nil
}

func writePlot(cmd *cobra.Command, all []bench.Result, plotPath string) error {
	if len(all) == 0 {
		return fmt.Errorf("--plot: no results")
	}
	{
		if err := os.MkdirAll(filepath.Dir(plotPath), 0o755); err != nil {
			return fmt.Errorf("--plot: %w", err)
		}
		f, err := os.Create(plotPath)
		if err != nil {
			return fmt.Errorf("--plot: %w", err)
		}
		title := fmt.Sprintf("%s saga, %d steps: sagas/s and p99 ms vs concurrency (%s)", all[0].Saga, all[0].Steps, time.Now().UTC().Format("2006-01-02"))
		if err := bench.Plot(f, all, title); err != nil {
			f.Close()
			return fmt.Errorf("--plot: %w", err)
		}
		if err := f.Close(); err != nil {
			return fmt.Errorf("--plot: %w", err)
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "plot written to %s\n", plotPath)
	}
	return nil
}

func printBench(w io.Writer, r bench.Result) {
	load := fmt.Sprintf("concurrency %d (closed loop)", r.Concurrency)
	if r.Mode == "open" {
		load = fmt.Sprintf("rate %.0f/s (open loop)", r.Rate)
	}
	batch := ""
	if r.BatchForward {
		batch = ", batch forward handlers"
	}
	if r.Unsigned {
		batch += ", unsigned records"
	} else {
		batch += ", signed records"
	}
	fmt.Fprintf(w, "%s saga, %d steps, %s, %d partitions, %d lanes%s; synchronous_commit=%s fsync=%s\n", r.Saga, r.Steps, load, r.Partitions, r.Lanes, batch, r.SynchronousCommit, r.Fsync)
	fmt.Fprintf(w, "  sagas        %d measured after %d warm-up; %d completed, %d not\n", r.Sagas, r.Warmup, r.Completed, r.NotComplete)
	fmt.Fprintf(w, "  throughput   %.0f sagas/s, %.0f steps/s (%.2fs)\n", r.SagasPerSecond, r.StepsPerSecond, r.ElapsedSeconds)
	fmt.Fprintf(w, "  latency ms   p50 %.1f  p95 %.1f  p99 %.1f  max %.1f\n", r.LatencyP50Ms, r.LatencyP95Ms, r.LatencyP99Ms, r.LatencyMaxMs)
	// first labels the first line of a group.
	first := func(i int, label string) string {
		if i == 0 {
			return label
		}
		return ""
	}
	for i, h := range r.StepHops {
		fmt.Fprintf(w, "  %-12s %s: command %.1f/%.1f, reply %.1f/%.1f (p50/p99)\n", first(i, "per step ms"), h.Step,
			h.CommandP50Ms, h.CommandP99Ms, h.ReplyP50Ms, h.ReplyP99Ms)
	}
	for i, c := range r.Consumers {
		fmt.Fprintf(w, "  %-12s %s: %d records waited %.1f ms (mean, from whole-ms record timestamps) for %d batches of %.1f taking %.1f ms, busy %.2f\n", first(i, "consumers"), c.Consumer,
			c.Records, c.WaitMeanMs, c.Batches, c.BatchSizeMean, c.BatchMeanMs, c.Busy)
	}
	fmt.Fprintf(w, "  per saga     %.1f Postgres transactions, %.0f WAL bytes, %.2f ms CPU\n", r.XactPerSaga, r.WALBytesPerSaga, r.CPUSecPerSaga*1000)
	if line := roundTripsLine(r); line != "" {
		fmt.Fprintf(w, "  round trips  %s\n", line)
	}
	if r.HostBusy > 0 {
		fmt.Fprintf(w, "  machine      %.0f%% busy, %.2f ms CPU per saga (every process, Postgres included), %.1f%% stolen by the hypervisor\n",
			r.HostBusy*100, r.HostCPUSecPerSaga*1000, r.HostSteal*100)
	}
	if r.Split {
		var ps []string
		for _, p := range r.Processes {
			if p.CPULimit > 0 {
				ps = append(ps, fmt.Sprintf("%s %.2fs (limit %.2g CPU, throttled %.1fs)", p.Role, p.CPUSeconds, p.CPULimit, p.ThrottledSeconds))
				continue
			}
			ps = append(ps, fmt.Sprintf("%s %.2fs", p.Role, p.CPUSeconds))
		}
		fmt.Fprintf(w, "  CPU (split)  %s\n", strings.Join(ps, ", "))
	}
	if r.AllComplete {
		fmt.Fprintln(w, "  every saga completed")
	} else {
		fmt.Fprintln(w, "  NOT every saga completed")
	}
}

// roundTripsLine is the per-saga round trips to Postgres (by group) and
// Kafka requests of r, "" when neither was counted.
func roundTripsLine(r bench.Result) string {
	var parts []string
	if r.PGRoundTripsPerSaga > 0 {
		var groups []string
		for _, g := range []string{"orchestrator", "participants", "relays", "other"} {
			if v, ok := r.PGRoundTrips[g]; ok {
				groups = append(groups, fmt.Sprintf("%s %.1f", g, v))
			}
		}
		parts = append(parts, fmt.Sprintf("%.1f to Postgres per saga (%s)", r.PGRoundTripsPerSaga, strings.Join(groups, ", ")))
	}
	if r.KafkaRequestsPerSaga > 0 {
		parts = append(parts, fmt.Sprintf("%.1f Kafka requests per saga", r.KafkaRequestsPerSaga))
	}
	return strings.Join(parts, ", ")
}
