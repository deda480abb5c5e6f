// Package outbox is the transactional outbox: a table, in the schema of
// the service that owns it, of Kafka records waiting to be published.
//
// Enqueue records in the same transaction as the state change they
// announce, and run a relay (package relay) that publishes them:
//
//	ob, err := outbox.New("orders") // a schema the "messaging" migrations created
//
//	tx, err := pool.Begin(ctx)
//	// ... the service's own writes in tx ...
//	err = ob.Enqueue(ctx, tx, outbox.Message{
//		Topic: "orders.events", Key: orderID, Value: body,
//		Headers: map[string]string{"message-id": id.String()},
//	})
//	err = tx.Commit(ctx)
//
//	rl, err := relay.New(pool, ob, &relay.Config{Brokers: brokers})
//	err = rl.Run(ctx)
//
// [Outbox.Enqueue] is all an application calls. Nothing enqueued in a
// committed transaction is lost: it is published at least once (receivers
// dedupe by message id), in id order per key; nothing from a rolled-back
// transaction is ever published. A [Message] with a future AvailableAt is
// published when it is due. The table is created by the "messaging"
// migration set (migrations.Participant and migrations.Orchestrator
// include it).
//
// The relay's side of the table (claims, recording what was published,
// parking a row Kafka refuses) is internal; the operators' side (dead rows,
// requeue) is package inbox/dlq, and the outbox gauges are the relay's
// metrics. How it works: docs/DESIGN.md, "Inside the packages", package
// outbox.
package outbox
