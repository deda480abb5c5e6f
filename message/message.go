package message

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Action says which side of a step a command asks for.
type Action string

const (
	Forward    Action = "forward"
	Compensate Action = "compensate"
	// Query asks a participant what its barrier recorded for the step's
	// forward; the answer's payload is a QueryAnswer (see query.go).
	Query Action = "query"
)

// Valid reports whether a is one of the known actions.
func (a Action) Valid() bool { return a == Forward || a == Compensate || a == Query }

// Outcome is a participant's answer to a command.
type Outcome string

const (
	// Success: the action took effect (or had already taken effect).
	Success Outcome = "success"
	// Failure: a definite business "no"; nothing of the action remains done.
	Failure Outcome = "failure"
	// Retry: a transient problem; nothing was changed; send the command again later.
	Retry Outcome = "retry"
	// Accepted (forward only): the participant took the command and will
	// answer success or failure later, in a reply of its own to the same
	// command; stop re-sending it and wait up to the step's accepted
	// deadline. The payload, optional, is an AcceptedAnswer.
	Accepted Outcome = "accepted"
)

// Valid reports whether o is one of the known outcomes.
func (o Outcome) Valid() bool { return o == Success || o == Failure || o == Retry || o == Accepted }

// Header names carried on every Kafka record we produce.
const (
	HeaderMessageID   = "message-id"
	HeaderSagaID      = "saga-id"
	HeaderContentType = "content-type"
	HeaderDLQReason   = "dlq-reason"
	HeaderDLQTopic    = "dlq-original-topic"
	HeaderDLQOffset   = "dlq-original-offset"
	ContentTypeJSON   = "application/json"
)

// MaxPayloadBytes bounds an envelope's encoded size (the whole record
// value, despite the name: see Limits for the payload's own bound). Larger
// values are rejected on decode (and go to the dead-letter topic) rather
// than stored, and never encoded.
const MaxPayloadBytes = 1 << 20

// Sentinel errors. Decode errors wrap ErrInvalid, so callers can route them
// to a dead-letter topic with errors.Is.
var (
	ErrInvalid  = errors.New("invalid message")
	ErrOversize = fmt.Errorf("%w: the value is too large", ErrInvalid)
)

// Command is what the orchestrator sends to a participant's command topic.
type Command struct {
	MessageID   uuid.UUID       `json:"message_id"`
	SagaID      uuid.UUID       `json:"saga_id"`
	SagaType    string          `json:"saga_type"`
	AggregateID string          `json:"aggregate_id"`
	Step        string          `json:"step"`
	Action      Action          `json:"action"`
	Attempt     int             `json:"attempt"`
	ReplyTo     string          `json:"reply_to"`
	SentAt      time.Time       `json:"sent_at"`
	Payload     json.RawMessage `json:"payload,omitempty"`
}

// Reply is what a participant sends back to the orchestrator's reply topic.
type Reply struct {
	MessageID uuid.UUID       `json:"message_id"`
	InReplyTo uuid.UUID       `json:"in_reply_to"`
	SagaID    uuid.UUID       `json:"saga_id"`
	Step      string          `json:"step"`
	Action    Action          `json:"action"`
	Outcome   Outcome         `json:"outcome"`
	Reason    string          `json:"reason,omitempty"`
	Payload   json.RawMessage `json:"payload,omitempty"`
	// SignedBy is not on the wire: the receiver sets it to the owner of
	// the key that signed the reply's record, once verified (see Verify);
	// "" when the record is unsigned or was not checked.
	SignedBy string `json:"-"`
}

// FieldError names the field of an envelope (or, with a Field "header
// <name>", the header) that was wrong. Its text is safe to store and
// print: bad values appear quoted with Go escapes and cut short, and the
// whole is valid UTF-8 without NUL, at most MaxErrorBytes bytes.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string {
	what, name := "field", e.Field
	if h, ok := strings.CutPrefix(e.Field, "header "); ok {
		what, name = "header", h // Field "header saga-id": header "saga-id" ...
	}
	return Truncate(fmt.Sprintf("%v: %s %s %s", ErrInvalid, what, quote(name, 64), e.Reason), MaxErrorBytes)
}
func (e *FieldError) Unwrap() error { return ErrInvalid }

func missing(field string) error { return &FieldError{Field: field, Reason: "is missing"} }

// Validate checks that every field a participant needs is present and
// known, and that the command is within the default Limits and storable
// (see Limits).
func (c *Command) Validate() error { return Limits{}.ValidateCommand(c) }

// Validate checks that every field the orchestrator needs is present and
// known, and that the reply is within the default Limits and storable.
func (r *Reply) Validate() error { return Limits{}.ValidateReply(r) }

// ValidateCommand is Command.Validate with the bounds of l.
func (l Limits) ValidateCommand(c *Command) error { return l.withDefaults().command(c, false) }

// ValidateReply is Reply.Validate with the bounds of l.
func (l Limits) ValidateReply(r *Reply) error { return l.withDefaults().reply(r, false) }

// command validates c (l has its defaults); read: decoded by a strict
// reader, so the payload's text was checked.
func (l Limits) command(c *Command, read bool) error {
	switch {
	case c.MessageID == uuid.Nil:
		return missing("message_id")
	case c.SagaID == uuid.Nil:
		return missing("saga_id")
	case c.SagaType == "":
		return missing("saga_type")
	case c.Step == "":
		return missing("step")
	case !c.Action.Valid():
		return &FieldError{Field: "action", Reason: fmt.Sprintf("is %s, want forward, compensate or query", quote(string(c.Action), 64))}
	case c.Attempt < 1:
		return &FieldError{Field: "attempt", Reason: fmt.Sprintf("is %d, want >= 1", c.Attempt)}
	case c.Attempt > MaxAttempt:
		return &FieldError{Field: "attempt", Reason: fmt.Sprintf("is %d, more than the %d allowed", c.Attempt, MaxAttempt)}
	case c.ReplyTo == "":
		return missing("reply_to")
	case c.SentAt.Year() < 0 || c.SentAt.Year() > 9999:
		return &FieldError{Field: "sent_at", Reason: fmt.Sprintf("has year %d, want 0 to 9999 (RFC 3339)", c.SentAt.Year())}
	}
	if err := text("saga_type", c.SagaType, l.MaxNameBytes, read); err != nil {
		return err
	}
	if err := text("aggregate_id", c.AggregateID, l.MaxNameBytes, read); err != nil {
		return err
	}
	if err := text("step", c.Step, l.MaxNameBytes, read); err != nil {
		return err
	}
	if p := topicProblem(c.ReplyTo); p != "" {
		return &FieldError{Field: "reply_to", Reason: p}
	}
	return l.payload(c.Payload, read)
}

// reply validates r (l has its defaults); read as for command.
func (l Limits) reply(r *Reply, read bool) error {
	switch {
	case r.MessageID == uuid.Nil:
		return missing("message_id")
	case r.InReplyTo == uuid.Nil:
		return missing("in_reply_to")
	case r.SagaID == uuid.Nil:
		return missing("saga_id")
	case r.Step == "":
		return missing("step")
	case !r.Action.Valid():
		return &FieldError{Field: "action", Reason: fmt.Sprintf("is %s, want forward, compensate or query", quote(string(r.Action), 64))}
	case !r.Outcome.Valid():
		return &FieldError{Field: "outcome", Reason: fmt.Sprintf("is %s, want success, failure, retry or accepted", quote(string(r.Outcome), 64))}
	case r.Outcome == Accepted && r.Action != Forward:
		return &FieldError{Field: "outcome", Reason: fmt.Sprintf("is accepted for action %s; only a forward is answered accepted", r.Action)}
	}
	if err := text("step", r.Step, l.MaxNameBytes, read); err != nil {
		return err
	}
	if err := text("reason", r.Reason, l.MaxReasonBytes, read); err != nil {
		return err
	}
	if err := l.payload(r.Payload, read); err != nil {
		return err
	}
	if r.Action == Query && r.Outcome == Success {
		if _, err := DecodeQueryAnswer(r.Payload); err != nil {
			return err
		}
	}
	if r.Outcome == Accepted {
		if _, err := DecodeAcceptedAnswer(r.Payload); err != nil {
			return err
		}
	}
	return nil
}

// EncodeCommand validates and encodes c.
func EncodeCommand(c Command) ([]byte, error) { return Limits{}.EncodeCommand(c) }

// EncodeReply validates and encodes r.
func EncodeReply(r Reply) ([]byte, error) { return Limits{}.EncodeReply(r) }

// EncodeCommand validates and encodes c within the bounds of l.
func (l Limits) EncodeCommand(c Command) ([]byte, error) {
	l = l.withDefaults()
	if err := l.command(&c, false); err != nil {
		return nil, encodeError("command", c.SagaID, c.Step, err)
	}
	b := appendCommand(make([]byte, 0, 320+len(c.Payload)), &c)
	if len(b) > l.MaxValueBytes {
		return nil, encodeError("command", c.SagaID, c.Step, oversize(len(b), l.MaxValueBytes))
	}
	return b, nil
}

// EncodeReply validates and encodes r within the bounds of l.
func (l Limits) EncodeReply(r Reply) ([]byte, error) {
	l = l.withDefaults()
	if err := l.reply(&r, false); err != nil {
		return nil, encodeError("reply", r.SagaID, r.Step, err)
	}
	b := appendReply(make([]byte, 0, 256+len(r.Payload)), &r)
	if len(b) > l.MaxValueBytes {
		return nil, encodeError("reply", r.SagaID, r.Step, oversize(len(b), l.MaxValueBytes))
	}
	return b, nil
}

func encodeError(what string, sagaID uuid.UUID, step string, err error) error {
	return &safeError{prefix: fmt.Sprintf("encode %s for saga %s step %s: ", what, sagaID, quote(step, 64)), err: err}
}

func oversize(n, max int) error {
	return fmt.Errorf("%w: %d bytes, more than the %d allowed", ErrOversize, n, max)
}

// DecodeCommand parses and validates a command record value within the
// default Limits. Every error wraps ErrInvalid.
func DecodeCommand(b []byte) (Command, error) { return Limits{}.DecodeCommand(b) }

// DecodeReply parses and validates a reply record value within the default
// Limits. Every error wraps ErrInvalid.
func DecodeReply(b []byte) (Reply, error) { return Limits{}.DecodeReply(b) }

// DecodeCommand parses and validates a command record value within the
// bounds of l. Every error wraps ErrInvalid; its text is at most
// MaxErrorBytes of valid UTF-8 without NUL.
func (l Limits) DecodeCommand(b []byte) (Command, error) {
	l = l.withDefaults()
	c, err := l.decodeCommand(b)
	if err != nil {
		return Command{}, &safeError{prefix: "decode command: ", err: err}
	}
	return c, nil
}

func (l Limits) decodeCommand(b []byte) (Command, error) {
	if err := l.valueSize(b); err != nil {
		return Command{}, err
	}
	var c Command
	if err := decodeEnvelope(b, &c, nil); err != nil {
		return Command{}, err
	}
	if err := l.command(&c, true); err != nil {
		return Command{}, err
	}
	return c, nil
}

// DecodeReply parses and validates a reply record value within the bounds
// of l. Every error wraps ErrInvalid; its text is at most MaxErrorBytes of
// valid UTF-8 without NUL.
func (l Limits) DecodeReply(b []byte) (Reply, error) {
	l = l.withDefaults()
	r, err := l.decodeReply(b)
	if err != nil {
		return Reply{}, &safeError{prefix: "decode reply: ", err: err}
	}
	return r, nil
}

func (l Limits) decodeReply(b []byte) (Reply, error) {
	if err := l.valueSize(b); err != nil {
		return Reply{}, err
	}
	var r Reply
	if err := decodeEnvelope(b, nil, &r); err != nil {
		return Reply{}, err
	}
	if err := l.reply(&r, true); err != nil {
		return Reply{}, err
	}
	return r, nil
}

func (l Limits) valueSize(b []byte) error {
	if len(b) > l.MaxValueBytes {
		return oversize(len(b), l.MaxValueBytes)
	}
	if len(b) == 0 {
		return fmt.Errorf("%w: empty value", ErrInvalid)
	}
	return nil
}

// Headers returns the headers every produced record carries.
func Headers(messageID, sagaID uuid.UUID) map[string]string {
	return map[string]string{
		HeaderMessageID:   messageID.String(),
		HeaderSagaID:      sagaID.String(),
		HeaderContentType: ContentTypeJSON,
	}
}
