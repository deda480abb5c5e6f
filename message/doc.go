// Package message is the wire contract between the orchestrator and
// participants: the JSON envelopes of commands and replies, the Kafka
// headers, and their validation. It imports nothing of ours.
//
// A [Command] goes to the participant's topic "<prefix><participant>.commands"
// keyed by the saga's aggregate id (so one aggregate's commands stay in
// order). Fields: message_id (UUID, distinct for every send, retries
// included), saga_id, saga_type, aggregate_id, step, action ("forward" or
// "compensate"), attempt (1, 2, ...), reply_to (the reply topic), sent_at
// (RFC 3339) and payload (a JSON object built by the step).
//
// A [Reply] goes to the command's reply_to topic (default "saga.replies")
// keyed by saga id. Fields: message_id (a new UUID), in_reply_to (the
// command's message_id), saga_id, step, action (copied from the command),
// outcome and, optionally, reason and payload (a JSON object merged into
// the saga's data on success). Outcomes: [Success] (the action took effect,
// now or earlier), [Failure] (a definite business "no": nothing of the
// action remains) and [Retry] (a transient problem, nothing changed: send
// the command again later).
//
// Every record carries the headers message-id and saga-id (equal to the
// envelope's ids) and content-type: application/json. Consumers dedupe on
// the message-id header, so it is required; saga-id may be left out, but
// a header that is present must match the body ([CheckHeaders]). A record
// that fails to decode or validate is not processed: it goes to
// "<topic>.dlq" with the reason in the dlq-reason header (plus
// dlq-original-topic and dlq-original-offset).
//
// [EncodeCommand], [EncodeReply], [DecodeCommand] and [DecodeReply]
// validate; their errors wrap [ErrInvalid], and a *[FieldError] names the
// offending field. Decoding is fuzzed: no input makes it panic.
package message
