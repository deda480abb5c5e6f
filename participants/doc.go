// Package participants is the participant SDK: it turns a participant
// service's step handlers into a process that honours the sagaflow wire
// contract (see docs/DESIGN.md, "The wire contract"). The reference
// participants live in subfolders (participants/inventory and so on) and
// are built on it.
//
// # What the SDK owns
//
// A Participant owns three tables in its Postgres schema (Config.Schema,
// default the participant's name), created by Migrations: the outbox (replies
// waiting for the relay), the inbox (message ids already consumed) and the
// barrier (one row per (saga_id, step, action) ever decided). The business
// tables are the service's own; handlers write them through the transaction
// the SDK passes in, so a business effect, its barrier row and its reply
// commit together or not at all.
//
// Run consumes the command topic (Config.CommandTopic, default
// "<name>.commands") with an inbox consumer whose handler is
// HandleCommands, and publishes the outbox with a relay. For one command,
// HandleMessage decodes the record,
// checks its headers against the body, runs Execute and enqueues the reply
// for the command's reply_to topic (key = saga id, headers message-id,
// saga-id, content-type), all in the inbox transaction. A record that cannot
// be decoded, whose headers contradict the body, or that names a step this
// participant never registered is an error wrapping message.ErrInvalid: the
// command is dead-lettered to "<topic>.dlq" with the reason and the rest of
// its batch goes on. A command whose effects Postgres refuses (a NUL in a
// handler's text, say) is isolated by the inbox and dead-lettered too.
//
// # Duties from the wire contract
//
//   - The idempotency key of a command is (saga_id, step, action), never the
//     message id: the orchestrator sends a new message id on every re-send.
//   - Each action executes at most once; every copy is answered with the
//     recorded outcome (and, for a success, the recorded payload).
//   - A forward failure leaves no effect: the handler's writes are rolled back.
//   - A retry records nothing, so the next copy executes afresh.
//   - A compensation that finds no forward (never arrived, or failed) records
//     "closed" and answers success with reason "empty", without calling the
//     handler (empty compensation).
//   - A forward arriving after its compensation is not executed and answers
//     failure with reason "compensated" (anti-hanging).
//   - A query (action "query", for any registered step) answers what the
//     barrier recorded for the forward: done (with its output), failed,
//     compensated, or closed; closed is recorded when nothing was (reason
//     "closed_by_query"), so a forward arriving later is refused with that
//     reason. Queries record nothing of their own.
//   - Replies are published right after the inbox transaction commits (the
//     reply dispatcher, see relay.Dispatcher; Config.NoDispatch turns it off);
//     the relay publishes what a crash left behind.
//
// # The barrier protocol
//
// Execute runs in the caller's transaction, which must be READ COMMITTED
// (Postgres' default). All barrier inserts are INSERT ... ON CONFLICT DO
// NOTHING on the primary key (saga_id, step, action); an insert that meets an
// uncommitted row of another transaction waits for it, which serialises
// copies of one command and a forward with its compensation.
//
// Forward:
//
//  1. Savepoint S1; insert the forward row with outcome pending.
//  2. Conflict: the row was decided before. Answer it: closed -> failure
//     "compensated"; success -> success with the recorded payload;
//     failure -> failure with the recorded reason.
//  3. Otherwise run the forward handler in a nested savepoint S2.
//     Success: keep S2, record success and the JSON payload.
//     Failure: roll back S2 (no effect remains), record failure and reason.
//     Retry: roll back S1 (not even the barrier row remains), answer retry.
//     Handler error: return it; the caller rolls back the transaction.
//
// Compensate:
//
//  1. Savepoint S1; insert the compensate row with outcome pending.
//     Conflict: answer the recorded outcome.
//  2. Insert the forward row as (failure, "compensated", closed=true).
//     Inserted: the forward never ran; record an empty compensation
//     (success, "empty") without calling the handler. Any later forward
//     finds the closed row and is refused.
//  3. The forward row exists with failure: empty compensation as above.
//  4. It exists with success: run the compensate handler in savepoint S2.
//     Success: record success. Retry or Failure: roll back S1 (nothing is
//     recorded) and answer retry: compensations are retried until they
//     succeed, the orchestrator re-sends.
//
// # The batch fast path
//
// HandleCommands tries HandleBatch first for the new commands of each
// consumed batch: when every one is a well-formed
// first-time forward of a registered step and every handler answers
// success, it runs the handlers (one BatchFunc call for all the commands of
// a step registered with HandleForwardBatch, the Func per command
// otherwise), then records all the success barrier rows in one statement
// (skipping any row a copy or a compensation got first) and enqueues all
// the replies in another (one round trip for both when no handler returned
// a payload; otherwise the replies carry the payloads as stored, read back
// first). Anything else, a skipped barrier row
// included, declines the batch: HandleCommands undoes its writes
// (inbox.Undo) and runs HandleMessage for each command in a savepoint, so the protocol above decides every
// unplain case, and at most one execution of a forward ever commits.
//
// A step registered with a nil compensate handler (the pivot, or a step
// after it) answers a compensate command with failure "step has no
// compensation" and records nothing: the orchestrator never sends one for
// a correct definition, so this flags a definition bug.
//
// A handler error wrapping message.ErrInvalid (typically from Decode on a
// payload that does not fit) is a definite, repeatable "no": its writes are
// rolled back and the action is recorded as failure with reason
// "invalid_payload: <error>" (logged at Warn), so the saga compensates or is
// flagged instead of waiting for a timeout. For a compensation this is
// recorded too, and the orchestrator flags the saga for an operator.
//
// A handler's Result.Payload must encode to a JSON object or null; anything
// else, and a Result with an unknown outcome, is a programming error returned
// from Execute. Replies to duplicates carry the payload as Postgres stored it
// (jsonb), and so does the first reply, so every copy is answered with the
// same bytes.
//
// # Failure windows covered
//
//   - The same command delivered twice (redelivery, orchestrator re-send,
//     concurrent consumers): the barrier row answers the copy.
//   - Crash after the participant's commit, before the reply was published:
//     the reply is in the outbox and the relay sends it after restart.
//   - Crash before commit: nothing of the command remains (effect, barrier
//     row, reply and inbox row roll back together); the record is consumed
//     again.
//   - Command timed out but actually executed: the compensation finds the
//     successful forward row and undoes it.
//   - Compensation before (or racing) its forward: the closed forward row
//     makes the late forward a refused no-op; a forward that commits first is
//     seen by the compensation and undone. Never a forward effect without its
//     compensation.
//   - Malformed or unknown commands: dead-letter topic, partition not
//     blocked.
package participants
