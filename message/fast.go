package message

import (
	"encoding/json"
	"errors"
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
// (docs/perf/figures.md#message-envelope-json). The functions here do the common case
// without reflection and give the same bytes and values as encoding/json:
//
//   - appendCommand and appendReply write what json.Marshal writes (the
//     struct tags above are the wire contract; tests compare bytes);
//   - decodeFast reads an envelope in the plain form every encoder writes:
//     one object, member names spelled as in the contract, every known
//     member of its JSON type and not null (but the payload). Anything else (a name in other
//     case, which encoding/json would match; a null; a wrong type; any
//     syntax error) makes it give up, and decode runs encoding/json, so
//     errors and edge cases stay exactly what they were.

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

// decodeFast reads b into c or r (one of them nil) with a strict reader
// (so its strings and numbers are what Postgres stores, see Limits). ok
// false with a nil error means "let encoding/json do it", never
// "invalid"; an error is a definite refusal, of text the strict reader
// refused (NUL, invalid UTF-8, a lone surrogate, a number out of range).
func decodeFast(b []byte, c *Command, r *Reply) (ok bool, err error) {
	rd := jsonlite.NewStrictReader(b)
	var bad error
	err = rd.Object(func(key []byte) error {
		next := rd.Peek()
		if next == 'n' && string(key) != "payload" {
			// A null (or worse): encoding/json leaves the field alone, or
			// fails. A null payload is kept as the literal, as there.
			return errGiveUp
		}
		start := rd.Offset()
		var err error
		if c != nil {
			err = commandField(rd, c, key)
		} else {
			err = replyField(rd, r, key)
		}
		if err == nil {
			return nil
		}
		if te, isText := err.(*jsonlite.TextError); isText {
			bad = memberTextError(string(key), te, start, next == '"')
		}
		return errGiveUp
	})
	if bad != nil {
		return false, bad
	}
	if te, isText := err.(*jsonlite.TextError); isText {
		return false, keyTextError(te) // in a member name of the envelope
	}
	return err == nil && rd.End() == nil, nil
}

// errGiveUp stops decodeFast's walk.
var errGiveUp = errors.New("message: not the plain form")

// commandField reads the value of member key into c: a nil error, a
// *jsonlite.TextError or another error (give up).
func commandField(rd *jsonlite.Reader, c *Command, key []byte) error {
	switch string(key) {
	case "message_id":
		return uuidValue(rd, &c.MessageID)
	case "saga_id":
		return uuidValue(rd, &c.SagaID)
	case "saga_type":
		return stringValue(rd, &c.SagaType)
	case "aggregate_id":
		return stringValue(rd, &c.AggregateID)
	case "step":
		return stringValue(rd, &c.Step)
	case "action":
		return stringValue(rd, (*string)(&c.Action))
	case "attempt":
		n, err := rd.Int()
		c.Attempt = n
		return err
	case "reply_to":
		return stringValue(rd, &c.ReplyTo)
	case "sent_at":
		raw, err := rd.Raw()
		if err != nil {
			return err
		}
		if c.SentAt.UnmarshalJSON(raw) != nil {
			return errGiveUp
		}
		return nil
	case "payload":
		return payloadValue(rd, &c.Payload)
	}
	return unknownMember(rd, key)
}

func replyField(rd *jsonlite.Reader, r *Reply, key []byte) error {
	switch string(key) {
	case "message_id":
		return uuidValue(rd, &r.MessageID)
	case "in_reply_to":
		return uuidValue(rd, &r.InReplyTo)
	case "saga_id":
		return uuidValue(rd, &r.SagaID)
	case "step":
		return stringValue(rd, &r.Step)
	case "action":
		return stringValue(rd, (*string)(&r.Action))
	case "outcome":
		return stringValue(rd, (*string)(&r.Outcome))
	case "reason":
		return stringValue(rd, &r.Reason)
	case "payload":
		return payloadValue(rd, &r.Payload)
	}
	return unknownMember(rd, key)
}

// unknownMember skips the value of a member no field has, unless its name
// matches one in another case: encoding/json would use it.
func unknownMember(rd *jsonlite.Reader, key []byte) error {
	for _, f := range envelopeFields {
		if strings.EqualFold(string(key), f) {
			return errGiveUp
		}
	}
	return rd.Skip()
}

func stringValue(rd *jsonlite.Reader, s *string) error {
	v, err := rd.String()
	*s = v
	return err
}

func uuidValue(rd *jsonlite.Reader, id *uuid.UUID) error {
	v, err := rd.String()
	if err != nil {
		return err
	}
	if id.UnmarshalText([]byte(v)) != nil {
		return errGiveUp
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
