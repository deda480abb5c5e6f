package inbox

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/message"
)

// precheck reads the message id header and checks what every handler
// relies on before the message reaches a SQL statement: header keys are
// text (UTF-8 without NUL), the headers of the envelope (message id, saga
// id, content type) are short text, and all headers together are within
// Config.MaxHeaderBytes. reason is non-empty when the message must be
// dead-lettered unhandled.
func (c *Consumer) precheck(m kafka.Message) (id uuid.UUID, reason string) {
	total := 0
	for i, h := range m.Headers {
		total += len(h.Key) + len(h.Value)
		if p := badText(h.Key); p != "" {
			return uuid.Nil, fmt.Sprintf("%v: header %d's key %s", message.ErrInvalid, i, p)
		}
		switch h.Key {
		case message.HeaderMessageID, message.HeaderSagaID, message.HeaderContentType:
			if len(h.Value) > 256 {
				return uuid.Nil, fmt.Sprintf("%v: header %q is %d bytes, more than the 256 allowed", message.ErrInvalid, h.Key, len(h.Value))
			}
			if p := badText(string(h.Value)); p != "" {
				return uuid.Nil, fmt.Sprintf("%v: header %q %s", message.ErrInvalid, h.Key, p)
			}
		}
	}
	if total > c.cfg.MaxHeaderBytes {
		return uuid.Nil, fmt.Sprintf("%v: the headers are %d bytes, more than the %d allowed", message.ErrInvalid, total, c.cfg.MaxHeaderBytes)
	}
	for _, h := range m.Headers {
		if h.Key != message.HeaderMessageID {
			continue
		}
		id, err := uuid.Parse(string(h.Value))
		if err != nil {
			return uuid.Nil, fmt.Sprintf("%v: header %q is %q, not a UUID", message.ErrInvalid, message.HeaderMessageID, cleanText(string(h.Value), 80))
		}
		if id == uuid.Nil {
			return uuid.Nil, fmt.Sprintf("%v: header %q is the nil UUID", message.ErrInvalid, message.HeaderMessageID)
		}
		return id, ""
	}
	return uuid.Nil, fmt.Sprintf("%v: header %q is missing", message.ErrInvalid, message.HeaderMessageID)
}

// badText says what is wrong with s as text ("" if nothing).
func badText(s string) string {
	if !utf8.ValidString(s) {
		return "is not valid UTF-8"
	}
	if i := strings.IndexByte(s, 0); i >= 0 {
		return fmt.Sprintf("contains a NUL character at byte %d", i)
	}
	return ""
}

// cleanText makes s safe to put in a header, a log line or a database text
// column: invalid UTF-8 and NUL become U+FFFD, and it is cut to at most n
// bytes at a character boundary, marked with "...(N bytes)".
func cleanText(s string, n int) string {
	if utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 && len(s) <= n {
		return s
	}
	var b strings.Builder
	for _, r := range strings.ToValidUTF8(s, "\uFFFD") {
		if r == 0 {
			r = utf8.RuneError
		}
		b.WriteRune(r)
	}
	out := b.String()
	if len(out) <= n {
		return out
	}
	suffix := fmt.Sprintf("...(%d bytes)", len(s))
	cut := max(n-len(suffix), 0)
	for cut > 0 && !utf8.RuneStart(out[cut]) {
		cut--
	}
	return out[:cut] + suffix
}
