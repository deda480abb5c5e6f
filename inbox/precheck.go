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
// relies on before the message reaches a SQL statement
// (message.CheckRecordHeadersLimits): every header key and value is text
// (UTF-8 without NUL), the envelope's headers (message id, saga id, content
// type) are short and appear at most once, and all headers together are
// within Config.MaxHeaderBytes. reason is non-empty when the message must
// be dead-lettered unhandled.
func (c *Consumer) precheck(m kafka.Message) (id uuid.UUID, reason string) {
	if err := message.CheckRecordHeadersLimits(m.Headers, message.HeaderLimits{MaxTotalBytes: c.cfg.MaxHeaderBytes}); err != nil {
		return uuid.Nil, err.Error()
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
