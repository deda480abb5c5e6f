// Package relay publishes the rows of one transactional outbox (package
// outbox) to Kafka.
//
// Run one relay per outbox in every process that owns it; replicas are
// safe (one publishes, the others stand by):
//
//	ob, err := outbox.New("orders")
//	rl, err := relay.New(pool, ob, &relay.Config{Brokers: brokers})
//	go rl.Run(ctx) // until ctx ends; then finishes its batch and returns
//
// A relay works in two modes over one producer. It sweeps the table: it
// claims due rows while it holds the outbox's publishing lock. And it
// dispatches: a process that commits outbox rows on its hot path hands them
// to its relay right after the commit ([Relay.Send]) instead of waiting for
// the sweep to be woken. The saga engine and the participant SDK enqueue
// such rows leased to the relay and hand them over for their own outboxes
// (orchestrator and participants wire it; [Config] NoDispatch turns it
// off). The sweep remains the safety net: what the dispatch did not publish
// (a crash, a refusal, a full queue) is due to it when its lease ends.
//
// What the relay guarantees: at least once (a row is deleted, or with
// Config.KeepSent marked sent, only after Kafka acknowledged it);
// one publisher per outbox (the holder of a Postgres advisory lock);
// per-key order (rows are published in id order, a key's rows to one
// partition, also across a failover); a row Kafka refuses is retried with
// backoff and parked dead after Config.MaxAttempts, without blocking the
// rows after it; a Kafka outage burns no attempts. [NewMetrics] registers
// its counters and the outbox gauges.
//
// How it runs (the listen lock, claims, the producer, dispatch, the
// exceptions to per-key order): docs/DESIGN.md, "Inside the packages", package relay.
package relay
