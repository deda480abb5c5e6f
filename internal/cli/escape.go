package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// Whatever the commands print that comes from the database or the API
// (keys, reasons, aggregate ids, topics, headers, values, errors) goes
// through safe (text) or writeJSON / safeJSON (JSON), so that a terminal
// escape in an aggregate_id cannot rewrite the operator's screen.

// unsafeRune reports whether r must not reach a terminal raw: C0 and C1
// controls, DEL, and the bidirectional controls that reorder what is shown
// (U+061C, U+200E, U+200F, U+202A to U+202E, U+2066 to U+2069).
func unsafeRune(r rune) bool {
	switch {
	case r < 0x20, r >= 0x7f && r <= 0x9f:
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	}
	return false
}

// safe returns s for a terminal: every control character (tab and newline
// included: a field stays on its line and in its column) and bidi control
// written as a Go escape (\x1b, \n, \u202e), every byte that is not UTF-8
// as \xNN; the rest as is.
func safe(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || unsafeRune(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x80 && unsafeRune(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case unsafeRune(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// safeLines is safe for text of several lines (an error joining others):
// its newlines kept, each line escaped.
func safeLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = safe(l)
	}
	return strings.Join(lines, "\n")
}

// safeJSON returns the JSON text j with every control character other than
// newline and tab (JSON's whitespace between tokens; inside a string the
// encoder escapes them), DEL, C1 and bidi controls written as \u escapes:
// the same JSON for a parser, nothing a terminal acts on. Bytes that are
// not UTF-8 become U+FFFD.
func safeJSON(j []byte) []byte {
	var b strings.Builder
	b.Grow(len(j))
	s := string(j)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			b.WriteString(`\ufffd`)
		case r == '\n', r == '\t':
			b.WriteRune(r)
		case unsafeRune(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return []byte(b.String())
}

// writeJSON writes v as indented JSON through safeJSON.
func writeJSON(w io.Writer, v any, indent bool) error {
	var (
		j   []byte
		err error
	)
	if indent {
		j, err = json.MarshalIndent(v, "", "  ")
	} else {
		j, err = json.Marshal(v)
	}
	if err != nil {
		return err
	}
	_, err = w.Write(append(safeJSON(j), '\n'))
	return err
}
