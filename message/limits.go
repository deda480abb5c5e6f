package message

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sagaflow/sagaflow/internal/jsonlite"
)

// What Postgres or Kafka would refuse later is refused when a message is
// decoded (and, so that we never send what we would refuse, when it is
// encoded): a decoded envelope's strings can go into text columns and its
// payload into a jsonb column as they are.
//
//   - Every string in the value (the envelope's fields, member names, the
//     payload's strings and names) is valid UTF-8 without NUL (U+0000,
//     written \u0000 in JSON) and without an unpaired UTF-16 surrogate
//     escape such as \ud800. encoding/json reads invalid UTF-8 and lone
//     surrogates as U+FFFD; Postgres refuses them in jsonb, and NUL in both
//     text and jsonb.
//   - Every number in the value fits Postgres numeric (jsonb stores numbers
//     as numeric): see jsonlite.NumericFits.
//   - The value, the payload, the reason and the names are bounded (Limits);
//     reply_to is a legal Kafka topic name; attempt fits a Postgres integer.

// Default bounds (Limits with a zero field uses these).
const (
	// MaxValueBytesDefault bounds a whole record value (MaxPayloadBytes, the
	// historical name of this bound).
	MaxValueBytesDefault = MaxPayloadBytes
	// MaxPayloadBytesDefault bounds the payload member's JSON text: 960 KiB,
	// which leaves 64 KiB of the value for the rest of the envelope (at most
	// about 12 KB even with every character escaped), so an oversized
	// payload is reported as such rather than as an oversized value.
	MaxPayloadBytesDefault = MaxValueBytesDefault - 64<<10
	// MaxReasonBytesDefault bounds a reply's reason.
	MaxReasonBytesDefault = 1 << 10
	// MaxNameBytesDefault bounds saga_type, step and aggregate_id. The
	// engine's own bounds are lower (saga and step names 100 characters,
	// aggregate ids 200 bytes).
	MaxNameBytesDefault = 255
)

// MaxSendHeadersBytes bounds all the header keys and values of a record
// written to an outbox (commands, replies, redriven dead letters): the
// bound every consumer of this project applies to a record's headers by
// default (MaxHeadersBytesDefault: the Go inbox's MaxHeaderBytesDefault,
// the orchestrator's reply consumer, the Node participant), so that no
// record is sent that a consumer must refuse for its headers. The outbox
// refuses more (see CheckHeaderMap); a consumer configured below it would
// dead-letter what is sent.
const MaxSendHeadersBytes = MaxHeadersBytesDefault

// Fixed bounds.
const (
	// MaxTopicBytes is the longest Kafka topic name (reply_to is one).
	MaxTopicBytes = 249
	// MaxAttempt is the largest attempt number: a Postgres integer (and
	// any 32-bit int) holds it.
	MaxAttempt = 1<<31 - 1
	// MaxErrorBytes bounds the text of every error of this package (and
	// FieldError's), so that it fits a dead-letter header as it is.
	MaxErrorBytes = 512
)

// Limits bounds what Decode* accept and Encode* produce. A zero (or
// negative) field means its default; the zero Limits is what DecodeCommand,
// DecodeReply, EncodeCommand and EncodeReply use.
type Limits struct {
	// MaxValueBytes bounds the whole record value (MaxValueBytesDefault).
	MaxValueBytes int
	// MaxPayloadBytes bounds the payload member's JSON text as it is in the
	// value (MaxPayloadBytesDefault). Not to be confused with the package's
	// MaxPayloadBytes constant, the default value bound.
	MaxPayloadBytes int
	// MaxReasonBytes bounds a reply's reason (MaxReasonBytesDefault).
	MaxReasonBytes int
	// MaxNameBytes bounds saga_type, step and aggregate_id
	// (MaxNameBytesDefault).
	MaxNameBytes int
}

func (l Limits) withDefaults() Limits {
	if l.MaxValueBytes <= 0 {
		l.MaxValueBytes = MaxValueBytesDefault
	}
	if l.MaxPayloadBytes <= 0 {
		l.MaxPayloadBytes = MaxPayloadBytesDefault
	}
	if l.MaxReasonBytes <= 0 {
		l.MaxReasonBytes = MaxReasonBytesDefault
	}
	if l.MaxNameBytes <= 0 {
		l.MaxNameBytes = MaxNameBytesDefault
	}
	return l
}

// text checks a string field: at most max bytes of text Postgres stores.
// read: decoded by a strict reader (and encoding/json reads strings the
// strict reader took as valid UTF-8 without NUL), so only the length is
// left to check.
func text(field, s string, max int, read bool) error {
	if len(s) > max {
		return tooLong(field, len(s), max)
	}
	if read {
		return nil
	}
	if p := textProblem(s); p != "" {
		return &FieldError{Field: field, Reason: p}
	}
	return nil
}

func tooLong(field string, n, max int) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf("is %d bytes, longer than the %d allowed", n, max)}
}

// textProblem says what keeps s out of a Postgres text column: its first
// NUL or invalid UTF-8 byte ("" if nothing).
func textProblem(s string) string {
	if utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return ""
	}
	for i := 0; i < len(s); {
		if s[i] == 0 {
			return fmt.Sprintf("contains a NUL character (U+0000) at byte %d", i)
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			return fmt.Sprintf("is not valid UTF-8 at byte %d", i)
		}
		i += size
	}
	return ""
}

// CheckTopicName reports whether name is a legal Kafka topic name: 1 to
// MaxTopicBytes bytes of ASCII letters, digits, '.', '_' and '-', and not
// "." or "..". The error wraps ErrInvalid.
func CheckTopicName(name string) error {
	if p := topicProblem(name); p != "" {
		return fmt.Errorf("%w: topic name %s %s", ErrInvalid, quote(name, 64), p)
	}
	return nil
}

func topicProblem(name string) string {
	switch {
	case name == "":
		return "is empty"
	case len(name) > MaxTopicBytes:
		return fmt.Sprintf("is %d bytes, longer than the %d Kafka allows for a topic name", len(name), MaxTopicBytes)
	case name == "." || name == "..":
		return "is not allowed by Kafka as a topic name"
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' {
			continue
		}
		what := fmt.Sprintf("byte 0x%02x", c)
		if r, _ := utf8.DecodeRuneInString(name[i:]); r != utf8.RuneError {
			what = strconv.QuoteRune(r)
		}
		return fmt.Sprintf("contains %s at byte %d; a Kafka topic name has only ASCII letters, digits, '.', '_' and '-'", what, i)
	}
	return ""
}

// payload checks a payload: empty, null or an object, within the bound.
// read says that a strict reader has read it (while decoding), so its text
// is known to be good JSON.
func (l Limits) payload(p json.RawMessage, read bool) error {
	p = bytes.TrimSpace(p)
	if len(p) == 0 || bytes.Equal(p, []byte("null")) {
		return nil
	}
	if len(p) > l.MaxPayloadBytes {
		return tooLong("payload", len(p), l.MaxPayloadBytes)
	}
	if p[0] != '{' {
		return &FieldError{Field: "payload", Reason: "must be a JSON object"}
	}
	if read {
		return nil
	}
	rd := jsonlite.NewStrictReader(p)
	err := rd.Skip()
	if err == nil {
		err = rd.End()
	}
	if err != nil {
		var te *jsonlite.TextError
		if errors.As(err, &te) {
			return memberTextError("payload", te, 0, false)
		}
		return &FieldError{Field: "payload", Reason: "is not valid JSON: " + err.Error()}
	}
	return nil
}

// memberTextError describes what a strict reader refused (te) in the value
// of a member of the envelope: field names the member, start is the
// offset of its value in the document and str says whether the value is a
// string (then the position is in its unescaped text, else in its JSON).
func memberTextError(field string, te *jsonlite.TextError, start int, str bool) error {
	if str && !te.Key && te.Problem != jsonlite.NumberRange {
		var reason string
		switch te.Problem {
		case jsonlite.NUL:
			reason = fmt.Sprintf("contains a NUL character (U+0000) at byte %d", te.At)
		case jsonlite.InvalidUTF8:
			reason = fmt.Sprintf("is not valid UTF-8 at byte %d", te.At)
		default:
			reason = fmt.Sprintf("contains an unpaired UTF-16 surrogate escape %s at byte %d (not a character)", te.Text, te.At)
		}
		return &FieldError{Field: field, Reason: reason}
	}
	in, pos := "a string", te.Offset-start
	if te.Key {
		in = "a member name"
	}
	var reason string
	switch te.Problem {
	case jsonlite.NUL:
		reason = fmt.Sprintf("contains a NUL character (U+0000, escaped \\u0000) in %s at byte %d of its JSON text", in, pos)
	case jsonlite.InvalidUTF8:
		reason = fmt.Sprintf("contains invalid UTF-8 in %s at byte %d of its JSON text", in, pos)
	case jsonlite.LoneSurrogate:
		reason = fmt.Sprintf("contains an unpaired UTF-16 surrogate escape %s (not a character) in %s at byte %d of its JSON text", te.Text, in, pos)
	default:
		reason = fmt.Sprintf("has the number %s at byte %d of its JSON text, outside the range of Postgres numeric", te.Text, pos)
	}
	return &FieldError{Field: field, Reason: reason}
}

// keyTextError describes a refused member name of the envelope itself.
func keyTextError(te *jsonlite.TextError) error {
	what := te.Problem.String()
	if te.Problem == jsonlite.LoneSurrogate {
		what += " " + te.Text
	}
	return fmt.Errorf("%w: a member name of the value contains %s at byte %d", ErrInvalid, what, te.Offset)
}

// memberName is the envelope field encoding/json matches key with (names
// are matched in any case), or key.
func memberName(key []byte) string {
	for _, f := range envelopeFields {
		if strings.EqualFold(string(key), f) {
			return f
		}
	}
	return string(key)
}

// Truncate returns s as safe text of at most n bytes, for error texts,
// log lines, headers and text columns: invalid UTF-8 and NUL characters
// become U+FFFD, and a longer s is cut at a character boundary, the cut
// marked with "...(N bytes)" (N the length of s; just "..." when n is too
// small for that). A short valid s is returned as it is.
func Truncate(s string, n int) string {
	if len(s) <= n && utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s
	}
	if n <= 0 {
		return ""
	}
	clean := strings.ToValidUTF8(s, "\uFFFD")
	if strings.IndexByte(clean, 0) >= 0 {
		clean = strings.ReplaceAll(clean, "\x00", "\uFFFD")
	}
	if len(clean) <= n {
		return clean
	}
	mark := fmt.Sprintf("...(%d bytes)", len(s))
	if len(mark) >= n {
		mark = "..."
	}
	if len(mark) >= n {
		mark = ""
	}
	cut := n - len(mark)
	for cut > 0 && !utf8.RuneStart(clean[cut]) {
		cut--
	}
	return clean[:cut] + mark
}

// quote is s quoted as strconv.Quote quotes it (NUL, control characters
// and invalid UTF-8 escaped), cut to its first n bytes, the cut marked
// "...(N bytes)" after the closing quote.
func quote(s string, n int) string {
	if len(s) <= n {
		return strconv.Quote(s)
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s...(%d bytes)", strconv.Quote(s[:cut]), len(s))
}

// safeError bounds and cleans the text of an error it wraps.
type safeError struct {
	prefix string
	err    error
}

func (e *safeError) Error() string { return Truncate(e.prefix+e.err.Error(), MaxErrorBytes) }
func (e *safeError) Unwrap() error { return e.err }
