// Package message is the wire contract between the orchestrator and
// participants: the JSON envelopes of commands and replies, the Kafka
// headers, and their validation. It imports nothing of ours.
//
// A participant that does not use the SDK reads a command and answers it
// like this (the SDK in package participants does the same):
//
//	if err := message.CheckRecordHeaders(rec.Headers); err != nil {
//		return err // wraps ErrInvalid: dead-letter the record
//	}
//	cmd, err := message.DecodeCommand(rec.Value)
//	if err != nil {
//		return err // wraps ErrInvalid; a *FieldError names the field
//	}
//	if err := message.MatchRecordHeaders(rec.Headers, cmd.MessageID, cmd.SagaID); err != nil {
//		return err
//	}
//	// ... execute cmd.Step / cmd.Action at most once per (saga, step, action) ...
//	reply := message.Reply{
//		MessageID: uuid.New(), InReplyTo: cmd.MessageID, SagaID: cmd.SagaID,
//		Step: cmd.Step, Action: cmd.Action, Outcome: message.Success,
//	}
//	value, err := message.EncodeReply(reply)
//	headers := message.Headers(reply.MessageID, reply.SagaID)
//	// produce value with headers to cmd.ReplyTo, keyed by the saga id
//
// A [Command] goes to "<prefix><participant>.commands" keyed by the saga's
// aggregate id; a [Reply] goes to the command's reply_to (default
// "saga.replies") keyed by the saga id, with the outcome [Success],
// [Failure] (a definite business "no") or [Retry] (nothing changed: send
// again later). Every record carries the headers message-id, saga-id and
// content-type; consumers dedupe on message-id.
//
// [EncodeCommand], [EncodeReply], [DecodeCommand] and [DecodeReply]
// validate, and refuse everything Postgres or Kafka would refuse later
// (NUL, invalid UTF-8, numbers outside numeric, fields over their
// [Limits], a reply_to that is not a topic name); their errors wrap
// [ErrInvalid]. Error texts are safe to store and print ([Truncate]).
//
// The contract itself (topics, keys, headers, every field, the duties of a
// participant): docs/DESIGN.md, "The wire contract"; how this package
// validates: docs/DESIGN.md, "Inside the packages", package message.
package message
