// Package outbox is the transactional outbox: a table, in the schema of the
// service that owns it, of Kafka records waiting to be published.
//
// [Outbox.Enqueue] inserts records inside the caller's transaction, so a
// state change and the messages it causes commit together or not at all,
// and, while the relay waits for one (it holds the listen lock, see
// [ListenOp]), sends a NOTIFY on [Outbox.Channel] that Postgres delivers
// only at commit, waking the relay. While the relay is busy it polls
// instead: Postgres serializes the commits (WAL flush included) of every
// notifying transaction in a database, so a NOTIFY per transaction would
// cap the commit rate. A record may carry an AvailableAt in the future
// (delayed publication).
//
// The relay (package relay) reads the table with [Outbox.Claim] (due,
// unsent, not dead rows in id order, under its publishing lock; the same
// round trip takes or releases the listen lock), publishes, and records the
// result: published rows are deleted (or, keeping sent history, marked sent)
// in the round trip of the next claim, or by
// [Outbox.DeleteSent] / [Outbox.MarkSent] on the way out (a dispatcher uses
// [Outbox.ForgetPublished], an asynchronous commit); [Outbox.MarkFailed] (retry
// later) or [Outbox.MarkDead] (a poison row parked so it cannot block the
// rest). [Outbox.Stats] reports pending depth, the age of the oldest
// unsent row and dead rows; retention deletes kept sent rows by age.
//
// Guarantees: nothing enqueued in a committed transaction is lost; it is
// published at least once (a crash between publish and mark re-publishes,
// and receivers dedupe by message id); nothing from a rolled-back
// transaction is ever published. The table is created by the "messaging"
// migration set (package migrations).
package outbox
