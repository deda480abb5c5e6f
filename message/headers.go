package message

import (
	"bytes"
	"fmt"
	"slices"
	"unicode/utf8"

	"github.com/google/uuid"
)

// Header is a Kafka record header. kafka-go's kafka.Header has the same
// fields, so the functions below take a []kafka.Header as it is (they take
// any []H with H a RecordHeader), and this package imports no Kafka client.
type Header struct {
	Key   string
	Value []byte
}

// RecordHeader is a header type with the fields of Header, such as
// Header itself or kafka-go's kafka.Header.
type RecordHeader interface {
	~struct {
		Key   string
		Value []byte
	}
}

// Default header bounds (HeaderLimits with a zero field uses these).
const (
	// MaxHeaderValueBytesDefault bounds the value of each header this
	// package names (message-id, saga-id, content-type and the dlq-*
	// headers, dlq-reason included).
	MaxHeaderValueBytesDefault = 1 << 10
	// MaxHeadersBytesDefault bounds all of a record's header keys and
	// values together.
	MaxHeadersBytesDefault = 16 << 10
)

// HeaderLimits bounds a record's headers; a zero (or negative) field means
// its default.
type HeaderLimits struct {
	// MaxValueBytes bounds the value of each header this package names
	// (MaxHeaderValueBytesDefault).
	MaxValueBytes int
	// MaxTotalBytes bounds the sum of the lengths of every key and value
	// (MaxHeadersBytesDefault).
	MaxTotalBytes int
}

// ownHeaders are the headers this package names.
var ownHeaders = []string{HeaderMessageID, HeaderSagaID, HeaderContentType, HeaderDLQReason, HeaderDLQTopic, HeaderDLQOffset}

// CheckRecordHeaders checks a record's headers, within the default
// HeaderLimits, before anything else reads them; see
// CheckRecordHeadersLimits.
func CheckRecordHeaders[H RecordHeader](hs []H) error {
	return CheckRecordHeadersLimits(hs, HeaderLimits{})
}

// CheckRecordHeadersLimits checks a record's headers before anything else
// reads them: all keys and values together are at most l.MaxTotalBytes;
// every key and every value is text (valid UTF-8 without NUL), so it can
// go into a log line, a dead-letter header or a Postgres text or jsonb
// column; the headers this package names are at most l.MaxValueBytes
// each (the error names the header and its size, without quoting it) and
// message-id, saga-id and content-type appear at most once. Headers stay
// optional: none is required here. The error wraps ErrInvalid and is a
// *FieldError when it concerns one header.
func CheckRecordHeadersLimits[H RecordHeader](hs []H, l HeaderLimits) error {
	if l.MaxValueBytes <= 0 {
		l.MaxValueBytes = MaxHeaderValueBytesDefault
	}
	if l.MaxTotalBytes <= 0 {
		l.MaxTotalBytes = MaxHeadersBytesDefault
	}
	// Sizes first, cheap and what matters most: the header of ours that is
	// too long is named rather than the sum it makes too large.
	total := 0
	var seen [3]int // message-id, saga-id, content-type
	for _, hh := range hs {
		h := Header(hh)
		total += len(h.Key) + len(h.Value)
		for j, name := range ownHeaders {
			if h.Key != name {
				continue
			}
			if len(h.Value) > l.MaxValueBytes {
				return &FieldError{Field: "header " + name, Reason: fmt.Sprintf("is %d bytes, longer than the %d allowed", len(h.Value), l.MaxValueBytes)}
			}
			if j < len(seen) {
				if seen[j]++; seen[j] > 1 {
					return &FieldError{Field: "header " + name, Reason: "appears more than once"}
				}
			}
		}
	}
	if total > l.MaxTotalBytes {
		return fmt.Errorf("%w: the record's %d headers are %d bytes (keys and values), more than the %d allowed", ErrInvalid, len(hs), total, l.MaxTotalBytes)
	}
	for _, hh := range hs {
		h := Header(hh)
		if p := textProblem(h.Key); p != "" {
			return &FieldError{Field: "header " + h.Key, Reason: "has a key that " + p}
		}
		if utf8.Valid(h.Value) && bytes.IndexByte(h.Value, 0) < 0 {
			continue
		}
		return &FieldError{Field: "header " + h.Key, Reason: textProblem(string(h.Value))}
	}
	return nil
}

// MatchRecordHeaders checks a record's headers as they come against the body:
// every message-id and saga-id header present must carry the envelope's
// id (compared as UUIDs, so case does not matter). Check the headers
// with CheckRecordHeaders first.
func MatchRecordHeaders[H RecordHeader](hs []H, messageID, sagaID uuid.UUID) error {
	for _, hh := range hs {
		h := Header(hh)
		var want uuid.UUID
		var body string
		switch h.Key {
		case HeaderMessageID:
			want, body = messageID, "message_id"
		case HeaderSagaID:
			want, body = sagaID, "saga_id"
		default:
			continue
		}
		if got, err := uuid.ParseBytes(h.Value); err != nil || got != want {
			if h.Key == HeaderMessageID {
				// The body's message id (a command's is what a reply
				// quotes) is named by its hash, as in logs and spans.
				return &FieldError{Field: "header " + h.Key, Reason: fmt.Sprintf("is %s but body %s has hash %s", quote(string(h.Value), 64), body, IDHash(want))}
			}
			return &FieldError{Field: "header " + h.Key, Reason: fmt.Sprintf("is %s but body %s is %s", quote(string(h.Value), 64), body, want)}
		}
	}
	return nil
}

// CheckHeaderMap checks headers about to be written as a record's (a map,
// as the outbox keeps them) by the rules of CheckRecordHeadersLimits, in
// the order of the sorted keys so the error is stable: every key and
// value is text, the headers this package names are at most
// l.MaxValueBytes each and all keys and values together at most
// l.MaxTotalBytes. The error wraps ErrInvalid.
func CheckHeaderMap(h map[string]string, l HeaderLimits) error {
	if l.MaxValueBytes <= 0 {
		l.MaxValueBytes = MaxHeaderValueBytesDefault
	}
	if l.MaxTotalBytes <= 0 {
		l.MaxTotalBytes = MaxHeadersBytesDefault
	}
	total := 0
	for k, v := range h {
		total += len(k) + len(v)
	}
	for _, name := range ownHeaders {
		if v, ok := h[name]; ok && len(v) > l.MaxValueBytes {
			return &FieldError{Field: "header " + name, Reason: fmt.Sprintf("is %d bytes, longer than the %d allowed", len(v), l.MaxValueBytes)}
		}
	}
	if total > l.MaxTotalBytes {
		return fmt.Errorf("%w: the record's %d headers are %d bytes (keys and values), more than the %d a consumer accepts", ErrInvalid, len(h), total, l.MaxTotalBytes)
	}
	var bad []string
	for k, v := range h {
		if textProblem(k) != "" || textProblem(v) != "" {
			bad = append(bad, k)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	slices.Sort(bad)
	k := bad[0]
	if p := textProblem(k); p != "" {
		return &FieldError{Field: "header " + Truncate(k, 64), Reason: "has a key that " + p}
	}
	return &FieldError{Field: "header " + k, Reason: textProblem(h[k])}
}
