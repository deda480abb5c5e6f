// Package dlq repairs messages that could not be delivered: the dead
// letters an inbox consumer set aside (kept in the dead_letters table of
// its schema beside the <topic>.dlq record) and the outbox rows a relay
// parked dead after its publish attempts ran out. It works on any schema
// the messaging migrations created: the orchestrator's and each
// participant's.
//
// A redrive re-inserts the dead letter's original topic, key, value and
// headers into the same schema's outbox, in one transaction with the mark
// on the dead letter (redriven_at, by whom, why) and a row of the ops_audit
// table. The relay of that schema then publishes it to its original topic
// and the record takes the normal consumer path: precheck, inbox dedupe by
// its unchanged message-id, the handler, the barrier. This keeps the
// guarantees:
//
//   - the inbox forgot the message id when it dead-lettered the record, so
//     the redriven copy is handled once; a record redriven twice (or also
//     replayed from Kafka) is a duplicate by message id;
//   - nothing is published unless the mark and the audit commit, and no
//     mark stays without its outbox row (a direct publish from the CLI
//     could do one without the other, and would need Kafka credentials);
//   - a dead letter is redriven at most once: the row is locked and must be
//     unredriven. If the copy dies again it is a new dead letter.
//
// A redrive publishes only to the topics the schema's consumer reads (given
// to New): a dead letter naming any other topic, a row written by hand or a
// topic no longer consumed, is refused with ErrTopicNotConsumed, and a bulk
// redrive that matches one redrives nothing.
//
// Requeue clears the dead mark of outbox rows (attempts back to zero) so
// the relay publishes them again, audited the same way. Nothing here
// deletes a dead letter or an outbox row.
package dlq
