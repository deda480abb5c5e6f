package message

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Action says which side of a step a command asks for.
type Action string

const (
	Forward    Action = "forward"
	Compensate Action = "compensate"
)

// Valid reports whether a is one of the known actions.
func (a Action) Valid() bool { return a == Forward || a == Compensate }

// Outcome is a participant's answer to a command.
type Outcome string

const (
	// Success: the action took effect (or had already taken effect).
	Success Outcome = "success"
	// Failure: a definite business "no"; nothing of the action remains done.
	Failure Outcome = "failure"
	// Retry: a transient problem; nothing was changed; send the command again later.
	Retry Outcome = "retry"
)

// Valid reports whether o is one of the known outcomes.
func (o Outcome) Valid() bool { return o == Success || o == Failure || o == Retry }

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

// MaxPayloadBytes bounds an envelope's encoded size. Larger values are
// rejected on decode (and go to the dead-letter topic) rather than stored.
const MaxPayloadBytes = 1 << 20

// Sentinel errors. Decode errors wrap ErrInvalid, so callers can route them
// to a dead-letter topic with errors.Is.
var (
	ErrInvalid  = errors.New("invalid message")
	ErrOversize = fmt.Errorf("%w: larger than %d bytes", ErrInvalid, MaxPayloadBytes)
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
}

// FieldError names the field of an envelope that was wrong.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("%v: field %q %s", ErrInvalid, e.Field, e.Reason)
}
func (e *FieldError) Unwrap() error { return ErrInvalid }

func missing(field string) error { return &FieldError{Field: field, Reason: "is missing"} }

// Validate checks that every field a participant needs is present and known.
func (c *Command) Validate() error {
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
		return &FieldError{Field: "action", Reason: fmt.Sprintf("is %q, want forward or compensate", c.Action)}
	case c.Attempt < 1:
		return &FieldError{Field: "attempt", Reason: fmt.Sprintf("is %d, want >= 1", c.Attempt)}
	case c.ReplyTo == "":
		return missing("reply_to")
	case c.SentAt.Year() < 0 || c.SentAt.Year() > 9999:
		return &FieldError{Field: "sent_at", Reason: fmt.Sprintf("has year %d, want 0 to 9999 (RFC 3339)", c.SentAt.Year())}
	}
	return validPayload(c.Payload)
}

// Validate checks that every field the orchestrator needs is present and known.
func (r *Reply) Validate() error {
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
		return &FieldError{Field: "action", Reason: fmt.Sprintf("is %q, want forward or compensate", r.Action)}
	case !r.Outcome.Valid():
		return &FieldError{Field: "outcome", Reason: fmt.Sprintf("is %q, want success, failure or retry", r.Outcome)}
	}
	return validPayload(r.Payload)
}

func validPayload(p json.RawMessage) error {
	p = bytes.TrimSpace(p)
	if len(p) == 0 || bytes.Equal(p, []byte("null")) {
		return nil
	}
	if p[0] != '{' {
		return &FieldError{Field: "payload", Reason: "must be a JSON object"}
	}
	if !json.Valid(p) {
		return &FieldError{Field: "payload", Reason: "is not valid JSON"}
	}
	return nil
}

// EncodeCommand validates and encodes c.
func EncodeCommand(c Command) ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("encode command for saga %s step %q: %w", c.SagaID, c.Step, err)
	}
	b, err := appendCommand(make([]byte, 0, 320+len(c.Payload)), &c)
	if err != nil {
		return nil, fmt.Errorf("encode command for saga %s step %q: %w: %v", c.SagaID, c.Step, ErrInvalid, err)
	}
	return b, nil
}

// EncodeReply validates and encodes r.
func EncodeReply(r Reply) ([]byte, error) {
	if err := r.Validate(); err != nil {
		return nil, fmt.Errorf("encode reply for saga %s step %q: %w", r.SagaID, r.Step, err)
	}
	b, err := appendReply(make([]byte, 0, 256+len(r.Payload)), &r)
	if err != nil {
		return nil, fmt.Errorf("encode reply for saga %s step %q: %w: %v", r.SagaID, r.Step, ErrInvalid, err)
	}
	return b, nil
}

// DecodeCommand parses and validates a command record value. Every error
// wraps ErrInvalid.
func DecodeCommand(b []byte) (Command, error) {
	var c Command
	if !plain(b) || !decodeFast(b, &c, nil) {
		c = Command{}
		if err := decode(b, &c); err != nil {
			return Command{}, fmt.Errorf("decode command: %w", err)
		}
	}
	if err := c.Validate(); err != nil {
		return Command{}, fmt.Errorf("decode command: %w", err)
	}
	return c, nil
}

// DecodeReply parses and validates a reply record value. Every error wraps
// ErrInvalid.
func DecodeReply(b []byte) (Reply, error) {
	var r Reply
	if !plain(b) || !decodeFast(b, nil, &r) {
		r = Reply{}
		if err := decode(b, &r); err != nil {
			return Reply{}, fmt.Errorf("decode reply: %w", err)
		}
	}
	if err := r.Validate(); err != nil {
		return Reply{}, fmt.Errorf("decode reply: %w", err)
	}
	return r, nil
}

// plain: within the size bounds decode checks first.
func plain(b []byte) bool { return len(b) > 0 && len(b) <= MaxPayloadBytes }

func decode(b []byte, v any) error {
	if len(b) > MaxPayloadBytes {
		return ErrOversize
	}
	if len(b) == 0 {
		return fmt.Errorf("%w: empty value", ErrInvalid)
	}
	if err := json.Unmarshal(b, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			if te.Field == "" {
				return fmt.Errorf("%w: value is a JSON %s, want an object", ErrInvalid, te.Value)
			}
			return &FieldError{Field: te.Field, Reason: fmt.Sprintf("has JSON type %s, want %s", te.Value, te.Type)}
		}
		var se *json.SyntaxError
		if !errors.As(err, &se) {
			// A value's own decoder (UUID, time) failed: encoding/json does
			// not say which field it was, so find it.
			if field := failingField(b, v); field != "" {
				return &FieldError{Field: field, Reason: fmt.Sprintf("is not valid: %v", err)}
			}
		}
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return nil
}

// failingField returns the JSON name of the first field of the struct v
// points to whose value in the object b does not decode on its own.
func failingField(b []byte, v any) string {
	var obj map[string]json.RawMessage
	if json.Unmarshal(b, &obj) != nil {
		return ""
	}
	t := reflect.TypeOf(v).Elem()
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		// encoding/json matches keys case-insensitively; the last one wins.
		var raw json.RawMessage
		for k, r := range obj {
			if strings.EqualFold(k, name) {
				raw = r
			}
		}
		if raw == nil {
			continue
		}
		if json.Unmarshal(raw, reflect.New(f.Type).Interface()) != nil {
			return name
		}
	}
	return ""
}

// CheckHeaders verifies that the record's headers, when present, agree with
// the envelope's ids. Headers are optional on input (a participant written in
// another language may omit them); when present they must match.
func CheckHeaders(headers map[string]string, messageID, sagaID uuid.UUID) error {
	if h, ok := headers[HeaderMessageID]; ok && !sameUUID(h, messageID) {
		return &FieldError{Field: "header " + HeaderMessageID, Reason: fmt.Sprintf("is %q but body message_id is %s", h, messageID)}
	}
	if h, ok := headers[HeaderSagaID]; ok && !sameUUID(h, sagaID) {
		return &FieldError{Field: "header " + HeaderSagaID, Reason: fmt.Sprintf("is %q but body saga_id is %s", h, sagaID)}
	}
	return nil
}

// sameUUID compares by value, so an upper-case header from another
// language's UUID type still matches.
func sameUUID(h string, id uuid.UUID) bool {
	got, err := uuid.Parse(h)
	return err == nil && got == id
}

// Headers returns the headers every produced record carries.
func Headers(messageID, sagaID uuid.UUID) map[string]string {
	return map[string]string{
		HeaderMessageID:   messageID.String(),
		HeaderSagaID:      sagaID.String(),
		HeaderContentType: ContentTypeJSON,
	}
}
