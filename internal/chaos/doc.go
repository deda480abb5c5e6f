// Package chaos is the fault harness behind `orchestrator chaos`.
//
// Run starts two orchestrator replicas (`serve`; Config.Replicas sets
// how many) and as many reference participant processes (`participants`, each running all eight
// participants, place-order's five and book-trip's three, in the same
// consumer groups) as separate OS processes, each connected to Postgres and
// to the Kafka broker through its own loopback fault proxy (package
// faultproxy). It drives a seeded mixed workload through the replicas' HTTP
// API, place-order sagas and Config.TripShare of book-trip sagas (with and
// without a car, some for a sold-out hotel, some needing an approval it
// gives or refuses through POST /sagas/{id}/events), and meanwhile, from
// the same seed:
//
//   - SIGKILLs random children and restarts them after a short pause;
//   - cuts and restores a child's Postgres connection, or the broker's;
//   - adds latency to a proxy for a while;
//   - re-delivers already consumed messages: it reads records of the command
//     and reply topics from older offsets and produces exact copies (key,
//     value, headers) to the same partition;
//   - SIGSTOPs a participant process for longer than the step timeouts
//     (then SIGCONT), so replies arrive late and timeouts fire.
//
// Then it stops injecting, restores everything, waits for quiescence (every
// saga terminal, every outbox drained) and checks from the databases:
// workload.CheckPlan (terminal, stock conserved, one charge/shipment/points
// entry per completed order, coupons; for trips nothing reserved without a
// charge, every confirmed reservation charged once, refused trips with
// nothing reserved or charged), each forward effect at most once, each
// compensation only for an effect that happened (a flight, hotel or car
// released only by a recorded compensation), nothing compensated once the
// pivot (charge-payment, both sagas') succeeded, no command sent without a
// recorded outcome at its participant, no reply applied twice. The Result counts the
// faults injected and the violations found.
//
// Goodput: with Config.Twin, Run first runs the fault-free twin of the run
// (Config.Faults = FaultsNone: the same seed, workload plan, sagas,
// duration, step timeouts and children's configuration, in the database
// Config.Database+TwinSuffix on the same server, its children's files under
// WorkDir/twin), closes all of it, then runs under faults (files under
// WorkDir/faults). Result.Goodput is completed under faults over completed
// by the twin (or over Config.TwinCompleted, a count measured before). The
// workload plan draws from its own seeded source, apart from the
// injector's, so both runs start the same orders with the same planned
// business failures; what contention decides (which order holds a
// contested coupon or the last scarce item) and the participants'
// transient failures (drawn per saga id) may differ. The twin's violations
// are the run's violations too.
//
// The embedded broker (devbroker) runs inside the harness process and is
// never killed: it keeps its data in memory only. With real Kafka
// (Config.Brokers) the children connect to the brokers directly (the broker
// proxy needs an advertised address the harness controls) and KillBroker
// runs the given stop and start commands instead.
//
// Every child runs in its own process group with a parent-death signal; the
// harness kills every group when it returns, whatever the reason.
//
// # Files
//
//   - chaos.go: Run and one run's lifecycle (database, broker, schemas and
//     stock, children, injection, quiescence, checks);
//   - config.go: Config, its defaults and validation, the twin's Config;
//   - result.go: Result, TwinResult and goodput, exit codes, the summary
//     line;
//   - children.go: the children's YAML, spawning them behind their proxies,
//     waiting for the replicas;
//   - proc.go, sysproc_*.go: one supervised child process;
//   - driver.go: the saga starts over HTTP;
//   - inject.go: the seeded fault injector;
//   - check.go: quiescence and the checks on the databases.
package chaos
