// Package inbox consumes Kafka topics through a consumer group and hands
// batches of records to a handler inside one Postgres transaction that
// also records their message ids, so at-least-once delivery has the effect
// of exactly once.
//
// Give a consumer a handler and run it; the handler writes its effects
// through the transaction it is given:
//
//	h := inbox.EachMessage(func(ctx context.Context, tx pgx.Tx, r message.Record) error {
//		var ev OrderPlaced
//		if err := json.Unmarshal(r.Value, &ev); err != nil {
//			return inbox.Permanent(err) // dead-lettered, the rest goes on
//		}
//		_, err := tx.Exec(ctx, `INSERT INTO shop.orders (id, total) VALUES ($1, $2)`, ev.ID, ev.Total)
//		return err // any other error: the batch is retried
//	})
//	c, err := inbox.New(pool, h, &inbox.Config{
//		Brokers: brokers, GroupID: "shop", Topics: []string{"orders.events"},
//		Schema: "shop", // holds the inbox table (the "messaging" migrations)
//	})
//	err = c.Run(ctx) // until ctx ends; then finishes the batches in flight
//
// A [Handler] takes a whole batch and returns a [Result] per record
// (applied, duplicate, dead letter, retry later); [EachMessage] builds one
// from a function of one record, each in a savepoint of its own. A single
// record is a batch of one: there is one path.
//
// What it guarantees: a record's effects and its inbox row commit together
// or not at all, and a message id that committed is never handled again;
// offsets are committed only after the database commit; no record stalls
// its partition or its neighbours: one that cannot be handled (unusable
// headers, an invalid envelope, a permanent error, a panic, content
// Postgres refuses, a record that keeps failing) is isolated and sent to
// "<topic>.dlq" with the reason, and the rest of its batch is applied.
// Errors are classified by [Classify]: permanent ones dead-letter, transient
// ones retry with backoff, and an unavailable database is waited for.
// [AfterCommit] and [CommitWith] let a handler run work after, or send
// writes with, the batch's commit.
//
// How it works (fetching per partition, the steps of a batch, the failure
// windows, the dead-letter record): docs/DESIGN.md, "Inside the packages",
// package inbox.
package inbox
