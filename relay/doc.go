// Package relay publishes the rows of one transactional outbox (one Postgres
// schema, see package outbox) to Kafka with segmentio/kafka-go, and deletes
// them once Kafka acknowledged them (or, with Config.KeepSent, marks them
// sent and keeps them as history for retention to purge).
//
// # Dispatch after commit
//
// A process that commits outbox rows itself (the saga engine, a participant)
// usually does not wait for the relay: it writes them leased
// (outbox.EnqueueDirect: due only after a lease, no NOTIFY) and hands them to
// its Dispatcher right after the commit, which publishes them at once (one
// produce request per partition, over its own kafka-go Conn to the
// partition's leader: see direct.go; the same partitioner as the relay's
// Writer, so a key lands on one partition whichever publishes it) and
// deletes them after the acknowledgement (gathered for 50 ms, in a
// transaction that does not wait for its WAL flush:
// outbox.ForgetPublished). The relay then only publishes what
// a dispatcher left behind (a crash between commit and publish or between
// publish and delete, a Kafka refusal, a full queue) once the lease ends, and
// every row written the plain way (outbox.Enqueue). See Dispatcher for the
// order it keeps.
//
// # How it runs
//
// A Relay opens a dedicated Postgres connection of its own (not a pooled one)
// and tries pg_try_advisory_lock(hashtext('sagaflow.relay.' || schema)) on
// it. Only the holder of that session lock publishes; other relays of the
// same outbox, in this process or others, are standbys that retry the lock
// every PollInterval. Leader reports which one holds it.
//
// The leader LISTENs on the outbox's channel (outbox.Enqueue notifies it in
// the inserting transaction) and then loops: claim up to BatchSize due rows
// in id order (outbox.Claim, on the lock connection), hand them to Kafka
// with one WriteMessages call (topic per message, key = row key, headers from
// the row; hash balancer, acks=all, 10µs batch timeout: the claim is the
// batch), delete the acknowledged rows (mark them sent with KeepSent). The
// delete is sent in the same round trip as the next claim (the claim that finds nothing before
// the relay waits records the last batch, and so does shutdown), so a cycle
// costs one round trip to Postgres instead of two. Deleting is the default
// because it is the cheaper write: marking rewrites the whole row, payload
// included, and adds an index entry, where a delete only stamps the old
// version (measured: docs/perf/figures.md#relay-keep-sent).
//
// Producers notify only while the relay holds the outbox's listen lock
// (see outbox.ListenOp), and the relay takes and releases that lock in the
// round trip of a claim, never in one of its own. After a partial batch it
// pauses Linger (3ms) and claims again, trying to take the lock on the way:
// the try succeeds only when no transaction that enqueued without notifying
// is still open, and the claim, run after the try, sees every row committed
// before it. When a claim finds nothing: holding the lock, the relay waits
// for a notification, at most PollInterval (the poll fallback, which also
// picks up rows whose available_at has come), and keeps the lock after
// waking; not holding it (producers were busy, their rows come next), it
// claims again after BusyPoll (2ms). When a claim made while listening
// returns more than one row, rows are flowing: the next claim releases the
// lock and the relay polls. So under load producers notify only between a
// claim that took the lock and the next one, which releases it (Postgres
// serializes the commits of notifying transactions, WAL flush included);
// when idle a new row still wakes the relay at once; and a wake-up costs
// two round trips (claim, then the empty claim before the wait) instead of
// the six of separate lock calls. (Holding the lock through busy periods,
// or taking it only after one-row claims, were both slower under load;
// measured: docs/perf/figures.md#relay-listen-lock.)
//
// # Guarantees
//
//   - At least once. A row is deleted or marked sent ("marked" below) only
//     after Kafka acknowledged it.
//     A crash (or a lost lock connection) between publish and mark leaves the
//     row unsent, and the next leader publishes it again: receivers dedupe by
//     the message-id header. Shutdown (cancelling Run's context) finishes the
//     batch in flight, marks it, and releases the lock.
//   - One publisher per outbox. Every claim and mark runs on the lock
//     connection, so the lock session is checked alive before each batch:
//     if that connection dies (the session and its lock with it) the claim or
//     mark fails, the relay stops publishing at once, closes the connection
//     and competes for the lock again on a new one.
//   - Per-key order. Rows are claimed and published in id order by a single
//     publisher, and rows of one key go to one partition, so a key's rows
//     reach Kafka in id order, also across a failover. After a failover the
//     new leader may re-publish a tail of rows the old one published but had
//     not marked: these are exact repeats of messages already delivered.
//   - A poison row does not block the rest. Rows whose topic Kafka cannot
//     accept, or larger than MaxMessageBytes, are refused before the write;
//     rows Kafka refuses (kafka.WriteErrors, per message) are marked failed
//     while the others of the batch are marked sent. A failed row becomes due
//     again after RetryBackoff, doubling per attempt up to MaxRetryBackoff,
//     and is parked dead (dead_at, for an operator) after MaxAttempts. A row
//     that failed before is always published alone on its next attempt, so
//     it cannot drag down its neighbours twice.
//   - Kafka outages do not burn attempts. When nothing of a batch gets
//     through because Kafka did not answer, no row is marked; the relay backs
//     off (RetryBackoff doubling, capped at MaxRetryBackoff), logs the error,
//     counts it in <ns>_relay_publish_errors_total and retries.
//
// # What per-key order does not cover
//
//   - A row marked failed is overtaken: later rows of its key that are due
//     are published before its retry (and forever, if it is parked dead).
//   - Order is id order, which is the order rows were inserted, not the
//     order their transactions committed. Two concurrent transactions that
//     insert rows for one key may commit in the other order, and a row with a
//     smaller id that commits late is published after a larger id already
//     published. Callers that need order per key must serialise their writes
//     per key (the saga engine does, by its version check on the saga row).
//   - Rows with a future available_at are published when due, after rows of
//     their key enqueued later without a delay.
//
// # Metrics
//
// NewMetrics registers the publish counters and histograms and the outbox
// gauges (pending rows, age of the oldest unsent row, dead rows), labelled
// by outbox schema; every relay of a process shares one *Metrics. The gauges
// are refreshed from outbox.Stats every StatsInterval by leader and standby
// alike.
package relay
