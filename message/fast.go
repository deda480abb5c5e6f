package message

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/internal/jsonlite"
)

// Every command and reply is encoded once and decoded at least once, on
// every hop, so reflection there is paid on the hot path
// (docs/perf/figures.md#message-envelope-json). The envelope has one codec,
// here, without reflection, which gives the bytes and values encoding/json
// gives:
//
//   - appendCommand and appendReply write what json.Marshal writes (the
//     struct tags above are the wire contract; golden tests compare bytes);
//   - decodeEnvelope reads what encoding/json reads into the same struct
//     (member names in any case, the last of repeated ones winning; a null
//     leaving its field alone), with a strict reader (so strings and numbers
//     are what Postgres stores, see Limits), and refuses the rest with an
//     error naming the member and what was wrong, or the byte offset of a
//     syntax error.

// appendCommand appends c as JSON (c is already validated).
func appendCommand(dst []byte, c *Command) []byte {
	dst = appendUUIDMember(dst, `{"message_id":`, c.MessageID)
	dst = appendUUIDMember(dst, `,"saga_id":`, c.SagaID)
	dst = jsonlite.AppendString(append(dst, `,"saga_type":`...), c.SagaType)
	dst = jsonlite.AppendString(append(dst, `,"aggregate_id":`...), c.AggregateID)
	dst = jsonlite.AppendString(append(dst, `,"step":`...), c.Step)
	dst = jsonlite.AppendString(append(dst, `,"action":`...), string(c.Action))
	dst = strconv.AppendInt(append(dst, `,"attempt":`...), int64(c.Attempt), 10)
	dst = jsonlite.AppendString(append(dst, `,"reply_to":`...), c.ReplyTo)
	dst = append(dst, `,"sent_at":"`...)
	dst = append(c.SentAt.AppendFormat(dst, time.RFC3339Nano), '"')
	return append(appendPayload(dst, c.Payload), '}')
}

// appendReply appends r as JSON (r is already validated).
func appendReply(dst []byte, r *Reply) []byte {
	dst = appendUUIDMember(dst, `{"message_id":`, r.MessageID)
	dst = appendUUIDMember(dst, `,"in_reply_to":`, r.InReplyTo)
	dst = appendUUIDMember(dst, `,"saga_id":`, r.SagaID)
	dst = jsonlite.AppendString(append(dst, `,"step":`...), r.Step)
	dst = jsonlite.AppendString(append(dst, `,"action":`...), string(r.Action))
	dst = jsonlite.AppendString(append(dst, `,"outcome":`...), string(r.Outcome))
	if r.Reason != "" {
		dst = jsonlite.AppendString(append(dst, `,"reason":`...), r.Reason)
	}
	return append(appendPayload(dst, r.Payload), '}')
}

func appendUUIDMember(dst []byte, member string, id uuid.UUID) []byte {
	dst = append(append(dst, member...), '"')
	return append(append(dst, id.String()...), '"')
}

// appendPayload writes a non-empty payload (valid JSON: validated) as
// json.Marshal writes a json.RawMessage.
func appendPayload(dst []byte, p json.RawMessage) []byte {
	if len(p) == 0 {
		return dst
	}
	return appendCompactHTML(append(dst, `,"payload":`...), p)
}

// appendCompactHTML appends the valid JSON src as json.Compact followed by
// json.HTMLEscape would: without the whitespace between tokens, and with
// '<', '>', '&', U+2028 and U+2029 in strings written \u003c, \u003e,
// \u0026, \u2028 and \u2029. One pass over src, no validation (json.Compact
// validated it again).
func appendCompactHTML(dst, src []byte) []byte {
	const hex = "0123456789abcdef"
	start, inString := 0, false
	for i := 0; i < len(src); i++ {
		c := src[i]
		if !inString {
			switch c {
			case '"':
				inString = true
			case ' ', '\t', '\n', '\r':
				dst = append(dst, src[start:i]...)
				start = i + 1
			}
			continue
		}
		switch {
		case c == '\\':
			i++ // the escaped byte is never one of those below
		case c == '"':
			inString = false
		case c == '<' || c == '>' || c == '&':
			dst = append(dst, src[start:i]...)
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			start = i + 1
		case c == 0xE2 && i+2 < len(src) && src[i+1] == 0x80 && src[i+2]&^1 == 0xA8:
			dst = append(dst, src[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[src[i+2]&0xF])
			i += 2
			start = i + 1
		}
	}
	return append(dst, src[start:]...)
}

// envelopeFields are the member names of Command and Reply, read from their
// struct tags (the wire contract), so a field added there is seen here.
var envelopeFields = func() []string {
	var names []string
	for _, t := range []reflect.Type{reflect.TypeFor[Command](), reflect.TypeFor[Reply]()} {
		for f := range t.Fields() {
			if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" && name != "-" && !slices.Contains(names, name) {
				names = append(names, name)
			}
		}
	}
	return names
}()

// decodeEnvelope reads b, a JSON object, into c or r (one of them nil).
func decodeEnvelope(b []byte, c *Command, r *Reply) error {
	rd := jsonlite.NewStrictReader(b)
	if t := jsonType(rd.Peek()); t != "object" && t != "null" && t != "" {
		return fmt.Errorf("%w: value is a JSON %s, want an object", ErrInvalid, t)
	}
	if rd.Null() {
		// encoding/json leaves the struct alone: what is missing is said
		// by the validation.
		if err := rd.End(); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		return nil
	}
	var bad error
	err := rd.Object(func(key []byte) error {
		name := memberName(key)
		next := rd.Peek()
		if next == 'n' && name != "payload" {
			// A null leaves the field as it is, as encoding/json does.
			if rd.Null() {
				return nil
			}
		}
		start := rd.Offset()
		var err error
		if c != nil {
			err = commandField(rd, c, name)
		} else {
			err = replyField(rd, r, name)
		}
		var te *jsonlite.TextError
		switch {
		case err == nil:
			return nil
		case errors.As(err, &te):
			bad = memberTextError(name, te, start, next == '"')
		case errors.As(err, new(*FieldError)):
			bad = err
		}
		return err
	})
	if bad != nil {
		return bad
	}
	var te *jsonlite.TextError
	if errors.As(err, &te) {
		return keyTextError(te) // in a member name of the envelope
	}
	if err == nil {
		err = rd.End()
	}
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return nil
}

// jsonType names the JSON type of a value that starts with c ("" if none
// does).
func jsonType(c byte) string {
	switch {
	case c == '{':
		return "object"
	case c == '[':
		return "array"
	case c == '"':
		return "string"
	case c == 't' || c == 'f':
		return "bool"
	case c == 'n':
		return "null"
	case c == '-' || c >= '0' && c <= '9':
		return "number"
	}
	return ""
}

// typeError is encoding/json's refusal of a value of the wrong JSON type
// for field, which is of Go type want.
func typeError(field, got, want string) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf("has JSON type %s, want %s", got, want)}
}

// commandField reads the value of member name (an envelope field's, or
// unknown) into c.
func commandField(rd *jsonlite.Reader, c *Command, name string) error {
	switch name {
	case "message_id":
		return uuidValue(rd, name, &c.MessageID)
	case "saga_id":
		return uuidValue(rd, name, &c.SagaID)
	case "saga_type":
		return stringValue(rd, name, "string", &c.SagaType)
	case "aggregate_id":
		return stringValue(rd, name, "string", &c.AggregateID)
	case "step":
		return stringValue(rd, name, "string", &c.Step)
	case "action":
		return stringValue(rd, name, "message.Action", (*string)(&c.Action))
	case "attempt":
		return intValue(rd, name, &c.Attempt)
	case "reply_to":
		return stringValue(rd, name, "string", &c.ReplyTo)
	case "sent_at":
		raw, err := rd.Raw()
		if err != nil {
			return err
		}
		var t time.Time
		if err := t.UnmarshalJSON(raw); err != nil {
			return &FieldError{Field: name, Reason: fmt.Sprintf("is not valid: %v", err)}
		}
		c.SentAt = t
		return nil
	case "payload":
		return payloadValue(rd, &c.Payload)
	}
	return rd.Skip()
}

func replyField(rd *jsonlite.Reader, r *Reply, name string) error {
	switch name {
	case "message_id":
		return uuidValue(rd, name, &r.MessageID)
	case "in_reply_to":
		return uuidValue(rd, name, &r.InReplyTo)
	case "saga_id":
		return uuidValue(rd, name, &r.SagaID)
	case "step":
		return stringValue(rd, name, "string", &r.Step)
	case "action":
		return stringValue(rd, name, "message.Action", (*string)(&r.Action))
	case "outcome":
		return stringValue(rd, name, "message.Outcome", (*string)(&r.Outcome))
	case "reason":
		return stringValue(rd, name, "string", &r.Reason)
	case "payload":
		return payloadValue(rd, &r.Payload)
	}
	return rd.Skip()
}

// wrongType reads the value of field, not of the JSON type its Go type
// want takes, and returns the error naming both (or the reader's own).
func wrongType(rd *jsonlite.Reader, field, want string) error {
	got := jsonType(rd.Peek())
	if err := rd.Skip(); err != nil {
		return err
	}
	return typeError(field, got, want)
}

func stringValue(rd *jsonlite.Reader, field, want string, s *string) error {
	if rd.Peek() != '"' {
		return wrongType(rd, field, want)
	}
	v, err := rd.String()
	if err == nil {
		*s = v
	}
	return err
}

func intValue(rd *jsonlite.Reader, field string, n *int) error {
	if jsonType(rd.Peek()) != "number" {
		return wrongType(rd, field, "int")
	}
	raw, err := rd.Raw()
	if err != nil {
		return err
	}
	v, err := strconv.ParseInt(string(raw), 10, strconv.IntSize)
	if err != nil {
		return typeError(field, "number "+string(raw), "int")
	}
	*n = int(v)
	return nil
}

func uuidValue(rd *jsonlite.Reader, field string, id *uuid.UUID) error {
	if rd.Peek() != '"' {
		return wrongType(rd, field, "uuid.UUID")
	}
	v, err := rd.String()
	if err != nil {
		return err
	}
	if err := id.UnmarshalText([]byte(v)); err != nil {
		return &FieldError{Field: field, Reason: fmt.Sprintf("is not valid: %v", err)}
	}
	return nil
}

func payloadValue(rd *jsonlite.Reader, p *json.RawMessage) error {
	raw, err := rd.Raw()
	if err != nil {
		return err
	}
	*p = append(json.RawMessage(nil), raw...)
	return nil
}
