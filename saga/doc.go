// Package saga defines sagas in Go and runs them: typed definitions checked
// against the pivot rules, the pure state machine [Decide], and the
// [Engine] that applies events to sagas in Postgres.
//
// # Definitions
//
// A [Definition] over saga data T lists steps, each with a stable external
// name, a participant (commands go to "<prefix><participant>.commands"), a
// [Kind], a command builder, an optional compensation builder, a reply
// merger (OnSuccess), a timeout and a [RetryPolicy]. [Definition.Build]
// validates it and erases its types; the error is a *[DefinitionError]
// naming the saga and step when: there is more than one [Pivot], a step
// before the pivot has no compensation, a step at or after the pivot has
// one, a step after the pivot is not [Retryable], two steps share a name,
// or there are no steps. A definition without a pivot is all-compensable. A
// [Registry] holds built definitions by name and version; per-step timeouts
// and retry policies can be overridden from configuration
// ([Registry.Override]) without recompiling.
//
// # The one door
//
// Every state change passes through [Decide](definition, instance, event),
// which returns the next instance, the commands to send and the journal
// entries. It does no I/O and is deterministic (command ids are derived
// from the saga id, step, action and attempt under the saga's secret,
// Instance.Secret, drawn at start: see Instance.CommandID; backoff jitter
// from the saga id, step and attempt). Events come from
// three sources: a participant's reply, a timer (step timeout, retry
// backoff due, saga deadline) and an operator action. An event the
// transition table does not allow (a late or duplicate reply to a command
// the saga did send, an event after a terminal state) changes nothing: it is
// journaled as ignored and counted, never applied. A reply whose
// in_reply_to is not a command the saga sent for that step and action is
// stray: Decide returns [ErrStrayReply], which wraps message.ErrInvalid, so
// the reply consumer dead-letters it with the reason.
//
// # States
//
// A saga is [Running], then [Completed], or [Compensating] then
// [Compensated]; or [Failed], which needs an operator (a step after the
// pivot answered a business failure, or the pivot got no definite answer
// within its retry answers or deadline). Terminal states absorb every event
// but an audited operator resolve. A step is pending, running (command
// sent), retrying (waiting for backoff), succeeded, failed, querying (given
// up without a definite answer: its participant is asked what its barrier
// recorded), unknown (given up for good), compensating,
// compensation_retrying or compensated.
//
// # Transition table (summary)
//
//	event              before the pivot               the pivot                         after the pivot
//	success            next step                      next step, no way back            next step; last: completed
//	failure            compensate done steps,         compensate the steps before it    failed (definition error)
//	                   reverse order: compensated
//	retry answer       re-send after the backoff;     re-send after the backoff;        re-send after the backoff,
//	                   at MaxAttempts retry answers   at MaxAttempts retry answers      forever; flagged after
//	                   give up (see step deadline)    failed                            MaxAttempts sends
//	timeout (outcome   re-send the same action after  same                              same
//	unknown)           the backoff (idempotent at
//	                   the barrier)
//	step deadline (or  query the participant (see     query the participant: done,      none (never given up)
//	MaxAttempts retry  below); no answer to its       failed, closed, compensated
//	answers)           queries: give up (unknown),    settle it; no answer: failed,
//	                   compensate it too, then the    nothing compensated (an
//	                   done ones                      operator resolves it)
//	query answer       done: as success with the      same                              (not queried)
//	                   recorded output; failed or
//	                   closed: as failure;
//	                   compensated: step undone
//	saga deadline      compensate as for a give-up    no longer applies                 no longer applies
//	answer to an       journaled as ignored (only     same                              same
//	earlier send       the latest send is awaited;
//	(attempt, compen-  the barrier answers it alike)
//	sation or query)
//	late reply         journaled as ignored           same                              same
//	stray reply        dead-lettered (ErrStrayReply)  same                              same
//
// A timeout is not a failure: the send's outcome is unknown (it may have
// executed, or be waiting in a lagging participant's topic), so the same
// action is re-sent under a new message id (CommandID with the next
// attempt) and the participant's barrier, keyed by (saga, step, action),
// executes it at most once. At most one re-send is outstanding per step: a
// timeout starts the backoff (Backoff, growing with the attempt) and only
// its end sends again; the n-th send is awaited for the step's timeout plus
// the backoff before it, so a participant that lags is asked ever less
// often. Timeouts alone never give a step up: its deadline does
// (StepDef.GiveUpAfter, counted from the first send: by default the longer
// of StepDeadlineDefault, PivotDeadlineDefault for the pivot, and
// StepDeadlineTimeouts timeouts), and a step's wake-ups never outlast it.
// Retry.MaxAttempts bounds definite retry answers (StepState.RetryAnswers),
// not sends. The saga's own Deadline still bounds the whole phase before
// the pivot.
//
// Compensations are retried with backoff until they succeed, one send
// outstanding at a time, awaited like forward re-sends; after
// CompensationFlagAfter attempts the saga is flagged (Instance.Flag) and
// keeps retrying. Operator actions: retry (re-send the active command now),
// compensate (refused once the pivot was sent) and resolve (a failed saga
// to completed or compensated, with actor and reason in the journal); a
// refused action returns a *[RefusedError] and writes nothing.
//
// # The engine's transaction
//
// [Engine.ApplyReply] (called inside the reply consumer's inbox
// transaction, which has already deduplicated the message id),
// [Engine.FireDue] and [Engine.Operate] each do in one Postgres
// transaction: load the saga, [Decide], a conditional update
// (WHERE id = $1 AND version = $2; zero rows means another writer moved
// the saga: reload and decide again, never overwrite), append the journal,
// and enqueue the commands in the outbox (package outbox), which a relay
// publishes after commit. [Engine.Start] and [Engine.StartTx] create a saga
// and its first command the same way; StartTx runs in the caller's
// transaction, so a service can start a saga atomically with its own write.
// A second start with the same type and idempotency key returns the first
// saga. Concurrent Start calls are committed together (group commit, up to
// Config.StartBatch per transaction, Config.StartLanes transactions at
// once): one multi-row insert of the sagas, one of the journal and one of
// the outbox per batch, and a lone caller still commits at once. If a batch
// fails, its starts are retried one per transaction, so a bad one fails
// alone. [Engine.ApplyReplies] applies a whole inbox batch with one load, one
// version-checked update of every changed saga, one journal and one outbox
// insert; on a version conflict or a bad reply it writes nothing and the
// caller falls back to ApplyReply one by one. [Engine.ApplyReplyBatch]
// leaves a reply refused by its content (stray: [ErrStrayReply]; invalid)
// out of the batch alone and applies the rest as one.
//
// # Timers
//
// A saga's next wake-up time (the active step's timeout or backoff, or the
// pre-pivot deadline) is kept in the timers table, one row per saga that
// has one, written in the same statement as the saga row (and, for
// information, in the saga row's unindexed next_wakeup_at). Writes move a
// timer row only earlier, so it is never later than the saga's wake-up and
// a step's later timeout costs no write; a timer that fires early finds
// nothing due and the timer path sets it to the real wake-up.
// [Engine.RunTimers] reads due timers in due order and locks their saga
// rows with FOR UPDATE SKIP LOCKED, so replicas share the work, and feeds
// each a timer event through the same door. Every writer locks the saga row
// before its timer row, so timers and replies cannot deadlock.
//
// Why a separate table: Postgres updates a row in place (HOT: no new index
// entries) only when no indexed column changes and its page has room. A
// step changes the wake-up time and the current step, so neither is indexed
// on the saga table, and the table keeps half of each page free
// (fillfactor 50), so every update of a saga but the last (to a terminal
// state, which changes indexed columns) can be HOT (measured:
// docs/perf/figures.md#saga-fillfactor). Delayed re-sends are plain outbox
// rows written when the backoff ends (rather than outbox rows with a future
// available_at written at once): an operator's "retry now" then only moves
// the saga's wake-up, and no stray delayed copy is left in the outbox.
//
// # Guarantees
//
//   - A state change, its journal row and the commands it causes commit
//     together or not at all; nothing is lost between them.
//   - Replies are applied at most once (inbox dedupe plus the version
//     check); duplicates and late replies are journaled and ignored.
//   - No step at or after a succeeded pivot is ever compensated, and
//     compensations run in reverse order of completion.
//   - Every saga reaches a terminal state within bounded time, or is
//     failed or flagged with evidence in its steps and journal.
//
// Status queries: [Engine.Get] (one saga and its journal), [Engine.List]
// (filters and keyset pagination), [Engine.InFlight], [Engine.Stats];
// [Metrics] registers the engine's Prometheus metrics.
package saga
