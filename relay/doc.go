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
// A process that commits outbox rows on its hot path can also publish them
// right after its own commit instead of waiting for the relay to be woken:
// it enqueues them leased ([outbox.Outbox.EnqueueDirect]) and hands them
// to a [Dispatcher] after the commit:
//
//	d, err := relay.NewDispatcher(pool, ob, &relay.Config{Brokers: brokers})
//	go d.Run(ctx)
//	p, err := ob.EnqueueDirect(ctx, tx, d.Lease(), msgs...)
//	err = tx.Commit(ctx)
//	d.Send(p)
//
// The relay remains the safety net: what a dispatcher did not publish (a
// crash, a refusal, a full queue) is due to the relay when its lease ends.
// The saga engine and the participant SDK wire both for their own outboxes.
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
// How it runs (the listen lock, claims, dispatch, the exceptions to
// per-key order): docs/DESIGN.md, "Inside the packages", package relay.
package relay
