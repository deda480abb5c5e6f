// Package bench measures sagaflow end to end: it runs the orchestrator (engine,
// reply consumer, relay, timers) and the participants in one process over
// real Postgres (a fresh database) and the Kafka protocol (an embedded broker
// unless brokers are given), drives a fixed, seeded workload through them
// and reports throughput, saga latency and the cost of one saga.
//
// Two workloads: the reference place-order saga (5 steps, no failures
// injected) and a generic all-compensable saga of N steps whose participant
// for each step does exactly one INSERT (GenericDefinition). A run warms up,
// then keeps Concurrency sagas in flight (closed loop) or starts Rate sagas
// per second (open loop) for Sagas sagas or Duration.
//
// Measured:
//   - sagas/s and steps/s: completed sagas over the time from the first
//     measured start to the last finish;
//   - latency p50/p95/p99/max: each saga's finished_at - created_at, both
//     written by the engine in the saga's own transactions;
//   - Postgres transactions per saga: the xact_commit delta of the bench
//     database in pg_stat_database (read after every backend of the run
//     exited, so their statistics are flushed), minus the tracker's polls;
//   - Postgres round trips per saga of this process, in all and for the
//     orchestrator's pool, the participants' pool and the relays (a
//     counting wrapper on the connections: each Write is one statement,
//     batch or pipeline sent, then awaited; not with Split), and Kafka requests
//     per saga (the answers the embedded broker wrote, every client
//     included; not with an outside broker);
//   - WAL bytes per saga: the pg_current_wal_lsn() delta. WAL is
//     cluster-wide: other activity on the same server is included;
//   - CPU seconds per saga of this process (getrusage; includes the
//     embedded broker when one runs), and of the whole machine with its
//     busy and steal shares (/proc/stat);
//   - per step, where its time went (StepHop, from the databases'
//     timestamps);
//   - per inbox consumer, its records' mean wait, its batches, their mean
//     size and time, and its busy share (ConsumerStat, from the deltas of
//     its metrics over the measured phase; not with Split).
//
// With Config.Split the orchestrator service and the participants run in
// two worker processes instead (RunWorker, spawned as this executable's
// WorkerSubcommand); the driver keeps the saga starts, the tracker, the
// counters and the embedded broker, and CPU per saga adds the workers' CPU
// time (/proc/<pid>/stat) to the driver's (Result.Processes).
// Config.Replicas starts that many workers of each role, and
// Config.CPULimit confines each worker to a CPU quota in a cgroup v1 cpu
// controller of its own: what a replica adds, measured on one machine.
//
// Floor measures what a lone saga cannot go below on a machine with this
// design: its durable commits and Kafka hops one after the other, with
// sagaflow's clients and nothing else on the path.
//
// Sweep runs several concurrencies and Plot draws throughput and p99
// latency against concurrency as a PNG with the standard library only.
//
// # Files
//
//   - bench.go: Run and the measured run (warm-up, baselines, the loop, the
//     figures of the Result), the components run in this process;
//   - config.go: Config, its defaults and their validation;
//   - setup.go: a run's stack (fresh database, broker, pools, metrics, the
//     orchestrator service and the participants);
//   - loop.go: the workloads' start requests, the closed and open loops;
//   - tracker.go: the completion tracker's polls of the saga table;
//   - counters.go: latencies and percentiles, Postgres's transaction and
//     WAL counters, this process's CPU time;
//   - result.go: Result and ProcessCPU;
//   - hops.go, consumers.go, roundtrips.go, hostcpu.go: the per-step hops,
//     the per-consumer figures, the Postgres round trips, the host's CPU;
//   - generic.go: the generic saga and its participants;
//   - split.go, worker.go: split runs (the driver's side, the workers');
//     cgroup.go: the CPU limit of each worker (Config.CPULimit);
//   - median.go: Median of repeated runs; plot.go, font.go: Plot.
//   - floor.go: Floor, the commits and hops of a lone saga alone.
package bench
