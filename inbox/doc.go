// Package inbox consumes Kafka topics through a consumer group and hands
// batches of messages to a Handler inside one Postgres transaction that also
// records their message ids in the inbox table, so at-least-once delivery
// has the effect of exactly once. There is one path: a single message is a
// batch of one.
//
// # What it owns
//
// The Consumer owns a kafka-go ConsumerGroup (membership, generations,
// offset commits: at most one per Config.CommitInterval, covering every
// batch handled since the one before, sent by a committer goroutine so a
// lane never waits for Kafka), one kafka-go Reader per assigned partition,
// a kafka-go Writer for the dead-letter topics and the rows of the "inbox"
// table of one Postgres schema (created by the "messaging" migration set).
// It owns no other table: the Handler writes its own effects through the
// transaction it is given.
//
// # Files
//
//	consumer.go   Consumer, New, Run; a session = one group membership
//	lanes.go      a generation: per-partition fetchers, queues, lanes, offset commits
//	batch.go      one batch: precheck, dedupe, Handler, isolation, commit, retries
//	classify.go   what an error says about the message (permanent, transient, unavailable)
//	precheck.go   header checks before anything else reads a record
//	dedupe.go     BEGIN with the inbox table statement (and Prefetch's reads); beginLazy
//	tx.go         the batch transaction the Handler gets (CommitWith, savepoints)
//	prefetch.go   Prefetch, Prefetched
//	aftercommit.go AfterCommit, CommitWith, CanDefer
//	deadletter.go dead-letter records that are always writable
//	watchdog.go   recreating a membership that holds partitions but consumes nothing
//	handler.go    Handler, Result, EachMessage, Permanent, Undo
//	config.go     Config and its defaults
//
// # Fetching: no partition holds up another
//
// Each partition the group assigns gets a fetcher that fills a queue of its
// own, bounded in messages (Config.QueueMessages) and bytes
// (Config.QueueBytes). Each partition belongs to one lane (Config.Lanes),
// which takes batches of up to Config.BatchSize messages and
// Config.BatchBytes bytes from its partitions' queues, in order per
// partition, round robin across them. A full queue pauses only its own
// partition's fetcher; a lane busy with a batch (retrying it while the
// database is down, say) holds up only its own partitions. Memory is about
// the number of assigned partitions times (QueueBytes + FetchBytes).
//
// # How a batch is processed
//
// Each batch is one Postgres transaction:
//
//  1. Precheck: the "message-id" header must be a UUID, header keys and the
//     envelope's headers (message-id, saga-id, content-type) UTF-8 text
//     without NUL and short, all headers within Config.MaxHeaderBytes. A
//     record that fails goes to the dead-letter topic unhandled.
//  2. One round trip begins the transaction, inserts every id into the
//     inbox table, sets a savepoint and runs the handler's reads queued by
//     Config.Prefetch; ids already there are duplicates and are skipped (a
//     plain INSERT first; one that a redelivered id fails is sent again
//     with ON CONFLICT DO NOTHING). An id repeated inside one batch is
//     handled once. Without Prefetch, a batch of well-formed records is
//     lazy instead: BEGIN and the savepoint go with the handler's first
//     statement and the insert of ids with COMMIT, every id taken as new;
//     a copy of a message seen before then fails the commit, and a lazy
//     batch that does anything but apply every message, or fails, runs
//     again at once from this step the usual way (counted in
//     inbox_batch_reruns_total), so no answer the handler gave for a copy
//     is kept.
//  3. The Handler gets the new messages and returns a Result per message:
//     Applied, Duplicate, DeadLetter (with a reason; it wrote nothing for
//     it) or RetryLater.
//  4. If the Handler fails (an error, a panic, a RetryLater), its writes are
//     rolled back to the savepoint and the error is classified (Classify).
//     Permanent (Permanent, message.ErrInvalid, a panic, Postgres SQLSTATE
//     classes 22, 23, 54): the batch is split in halves, each run again
//     under a new savepoint, until the failing message stands alone; it is
//     dead-lettered with the error, the rest applied, in the same
//     transaction. Transient: the transaction is rolled back and the batch
//     retried with capped exponential backoff and jitter; after
//     Config.IsolateAfter such failures the next attempt splits the batch
//     the same way, and a message that fails alone singleTries times is
//     dead-lettered with its last error. Unavailable (connection errors,
//     SQLSTATE 08, 53, 57P0x): retried for as long as it takes, never a
//     dead letter.
//  5. Dead-lettered messages' inbox rows are deleted (an operator can replay
//     the record once its cause is fixed), their dead-letter records are
//     published, then the transaction commits, the handler's writes
//     deferred with CommitWith sent in the same round trip as COMMIT (when
//     they fail, the batch runs again at once with nothing deferred, so
//     the failing write fails in the handler's own call and is classified
//     as above), then the
//     offsets.
//
// # Guarantees
//
//   - A message's Handler effects and its inbox row commit together or not at
//     all; a message id that committed is never handled again.
//   - The consumer never advances past a message that was neither handled nor
//     dead-lettered: offsets are committed only after the database commit.
//   - No message stalls its partition or its neighbours: a bad message
//     (unusable headers, an invalid envelope, a permanent error, a panic,
//     content Postgres refuses, a message that keeps failing) is
//     dead-lettered and the rest of its batch applied; the process never
//     crashes on it.
//   - A dead letter is always writable: the reason (cut to MaxReasonBytes,
//     made valid UTF-8 without NUL) and copied header values (cut to
//     MaxDeadHeaderBytes) are bounded; a record over Config.DeadLetterBytes,
//     or one the broker refuses as too large or invalid, is replaced by a
//     shortened one (original coordinates, headers cut to fit, the first KB
//     of the key and value, the reason, HeaderDLQShortened); if even that
//     is refused it is logged and counted (<ns>_dlq_lost_total), never
//     retried in a loop. Only an unreachable broker makes the batch wait.
//   - Run returns nil when its context is cancelled, after the in-flight
//     batches have finished (committed, or rolled back if one was waiting
//     to retry), and leaves no goroutine behind.
//
// # Failure windows
//
//   - Crash before the database commit: nothing of the batch is kept, the
//     offsets were not committed; the batch is redelivered and handled.
//   - Crash after the database commit, before the offset commit: the batch
//     (with the others handled since the last commit: at most
//     Config.CommitInterval's worth) is redelivered; the inbox rows make
//     every message a duplicate, so the Handler does not run again
//     (duplicates are counted).
//   - Crash after the dead-letter publish, before the database commit: the
//     message is redelivered and dead-lettered again. Dead-lettering is at
//     least once, never lost.
//   - Rebalance: the generation ends, the fetchers stop, each lane finishes
//     its batch in flight, the committer commits what the lanes handed it
//     (this may fail: logged; the next owner gets those batches again and
//     dedupes them), and what was queued is dropped, to be fetched by the
//     partition's next owner. A clean stop commits the same way, so a
//     restart redelivers nothing.
//   - A member killed or cut off from the broker: the coordinator drops it
//     after Config.SessionTimeout (6s by default); a rebalance waits at most
//     Config.RebalanceTimeout for the members to rejoin. Heartbeats every
//     Config.HeartbeatInterval (at most 1s) let members see a rebalance soon.
//   - A membership that stopped consuming: after Config.RestartAfterErrors
//     consecutive join or offset commit failures, or when the consumer had
//     nothing to do for Config.StallTimeout while the group has lag its
//     committed offsets do not reduce, the group is left and joined anew;
//     counted in <ns>_inbox_reader_restarts_total.
//
// # Dead-letter records
//
// A dead-letter record goes to "<original topic><Config.DLQSuffix>" with the
// original key, value and headers, plus message.HeaderDLQReason (the error
// text), message.HeaderDLQTopic, message.HeaderDLQOffset,
// HeaderDLQPartition and HeaderDLQShortened.
package inbox
