// Package inbox consumes Kafka topics through a consumer group and hands each
// message to a Handler inside one Postgres transaction that also records the
// message id in the inbox table, so at-least-once delivery has the effect of
// exactly once.
//
// # What it owns
//
// The Consumer owns a kafka-go Reader (consumer group, synchronous offset
// commits), a kafka-go Writer for the dead-letter topics and the rows of the
// "inbox" table of one Postgres schema (created by the "messaging" migration
// set). It owns no other table: the Handler writes its own effects through
// the transaction it is given.
//
// # How a batch is processed
//
// Messages fetched from Kafka are taken in batches of up to Config.BatchSize
// (whatever is immediately available after the first). Each batch is one
// Postgres transaction:
//
//  1. The message id is read from the "message-id" header
//     (message.HeaderMessageID). A missing or non-UUID id sends the message to
//     the dead-letter topic.
//  2. One statement inserts every id of the batch into the inbox table with
//     ON CONFLICT DO NOTHING; ids that were already there are duplicates and
//     are skipped (the Handler is not called). An id repeated inside one
//     batch is handled once.
//     With a BatchHandler, the same round trip sets a savepoint and the
//     BatchHandler gets the new messages under it; on an error it is rolled
//     back to and the messages go one by one through step 3. On success the
//     savepoint is not released (the commit does that): a round trip costs
//     more than the statements in it at moderate load.
//  3. Each new message runs the Handler inside a savepoint. A nil error keeps
//     its writes. A permanent error (Permanent, or an error wrapping
//     message.ErrInvalid) or a panic rolls back to the savepoint, deletes
//     the message's inbox row and queues the message for the dead-letter
//     topic. Any other error is transient: the whole transaction is rolled
//     back and the same batch is retried with capped exponential backoff and
//     jitter, without refetching, until it succeeds or Run's context ends.
//  4. Dead-letter records are published before the transaction commits.
//  5. The transaction commits, then the batch's offsets are committed to the
//     consumer group.
//
// # Guarantees
//
//   - A message's Handler effects and its inbox row commit together or not at
//     all; a message id that committed is never handled again.
//   - The consumer never advances past a message that was neither handled nor
//     dead-lettered: offsets are committed only after the database commit.
//   - A bad message (unparseable id, permanent handler error, handler panic)
//     never blocks its partition and never crashes the process.
//   - Run returns nil when its context is cancelled, after the in-flight
//     batch has finished (committed, or rolled back if it was waiting to
//     retry), and leaves no goroutine behind.
//
// # Failure windows
//
//   - Crash before the database commit: nothing of the batch is kept, the
//     offsets were not committed; the batch is redelivered and handled.
//   - Crash after the database commit, before the offset commit: the batch
//     is redelivered; the inbox rows make every message a duplicate, so the
//     Handler does not run again (duplicates are counted).
//   - Crash after the dead-letter publish, before the database commit: the
//     message is redelivered and dead-lettered again. Dead-lettering is at
//     least once, never lost. A failed dead-letter publish is a transient
//     error (the batch is retried).
//   - Offset commit failure (for example after a rebalance): logged; the
//     messages are redelivered later and deduplicated.
//   - A member killed or cut off from the broker: the coordinator drops it
//     after Config.SessionTimeout (6s by default); a rebalance waits at most
//     Config.RebalanceTimeout for the members to rejoin. Heartbeats every
//     Config.HeartbeatInterval (at most 1s) let members see a rebalance soon.
//   - A Kafka reader that stopped consuming (kafka-go's group session does
//     not always recover from cut connections or churn in the group):
//     after Config.RestartAfterErrors consecutive fetch or offset commit
//     failures, or when the consumer waited Config.StallTimeout for a
//     message with no batch in flight while the group has lag its committed
//     offsets do not reduce, the reader is closed (leaving the group) and a
//     new one joins; counted in <ns>_inbox_reader_restarts_total. Messages
//     fetched but not committed are redelivered and deduplicated.
//
// Because a dead-lettered message's inbox row is deleted, an operator can
// replay a dead-lettered record (same message id) to its original topic
// once the cause is fixed, and it will be handled.
//
// # Dead-letter records
//
// A dead-letter record goes to "<original topic><Config.DLQSuffix>" with the
// original key, value and headers, plus message.HeaderDLQReason (the error
// text), message.HeaderDLQTopic, message.HeaderDLQOffset and
// HeaderDLQPartition.
package inbox
