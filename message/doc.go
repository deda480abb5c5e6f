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
// a header that is present must match the body ([MatchRecordHeaders]). A record
// that fails to decode or validate is not processed: it goes to
// "<topic>.dlq" with the reason in the dlq-reason header (plus
// dlq-original-topic and dlq-original-offset).
//
// [EncodeCommand], [EncodeReply], [DecodeCommand] and [DecodeReply]
// validate; their errors wrap [ErrInvalid], and a *[FieldError] names the
// offending field. Decoding is fuzzed: no input makes it panic.
//
// "Invalid" includes everything Postgres or Kafka would refuse later, so
// that a decoded envelope's strings go into text columns and its payload
// into a jsonb column as they are, and a bad record is dead-lettered
// rather than stalling its consumer at the first INSERT: a NUL character
// (\u0000), invalid UTF-8 or an unpaired UTF-16 surrogate escape (\ud800)
// in any string of the value (member names and the payload's strings
// included), a number Postgres numeric cannot hold, a reply_to that is not
// a legal Kafka topic name ([CheckTopicName]), an attempt over
// [MaxAttempt], and fields over their bounds ([Limits]: 255 bytes for
// saga_type, step and aggregate_id, 1 KiB for reason, 960 KiB for the
// payload, 1 MiB for the value; [Limits] methods take other bounds).
// Encoding refuses the same, so we never send what we would refuse.
//
// [CheckRecordHeaders] checks a record's headers (text, bounded) before
// anything reads them, and [MatchRecordHeaders] checks them against the
// decoded body; both take a []kafka.Header as it is. Error texts are safe
// to store and print: at most [MaxErrorBytes] of valid UTF-8 without NUL,
// bad values quoted with Go escapes and cut short ([Truncate] does the
// same for other texts).
package message
