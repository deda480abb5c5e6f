// Package jsonlite reads and writes JSON without reflection, for the few
// documents sagaflow encodes and decodes on every message (a saga's step
// list): a Reader that walks one document token by token and validates it
// as it goes, and AppendString, which escapes a string the way
// encoding/json does. Values it produces decode with encoding/json to the
// same Go values, and it accepts everything encoding/json writes (and
// Postgres returns from a jsonb column: other key order, spaces).
package jsonlite

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxDepth bounds the nesting of a skipped value, as encoding/json does.
const MaxDepth = 10000

// Reader reads one JSON document. Its methods skip the whitespace before
// what they read; an error names what was expected and the byte offset.
type Reader struct {
	b      []byte
	i      int
	strict bool
}

// NewReader reads b.
func NewReader(b []byte) *Reader { return &Reader{b: b} }

// NewStrictReader reads b and refuses, with a *[TextError], what a
// Postgres jsonb column (or, for strings, a text column) refuses although
// encoding/json accepts it: invalid UTF-8 (encoding/json reads it as
// U+FFFD), the escape \u0000, unpaired UTF-16 surrogate escapes
// (encoding/json reads them as U+FFFD) and numbers outside the range of
// Postgres numeric. Everything else reads as with [NewReader].
func NewStrictReader(b []byte) *Reader { return &Reader{b: b, strict: true} }

// Offset is the byte offset of the next byte to read (after the whitespace
// a Peek skipped).
func (r *Reader) Offset() int { return r.i }

func (r *Reader) ws() {
	for r.i < len(r.b) {
		switch r.b[r.i] {
		case ' ', '\t', '\n', '\r':
			r.i++
		default:
			return
		}
	}
}

// errorf is a syntax error at the current offset.
func (r *Reader) errorf(format string, args ...any) error {
	what := "end of input"
	if r.i < len(r.b) {
		what = strconv.QuoteRune(rune(r.b[r.i]))
		if r.b[r.i] >= utf8.RuneSelf {
			what = fmt.Sprintf("byte 0x%02x", r.b[r.i])
		}
	}
	return fmt.Errorf("json: offset %d: %s, found %s", r.i, fmt.Sprintf(format, args...), what)
}

// Peek returns the next byte after whitespace, 0 at the end.
func (r *Reader) Peek() byte {
	r.ws()
	if r.i >= len(r.b) {
		return 0
	}
	return r.b[r.i]
}

// Expect consumes c (after whitespace) or fails.
func (r *Reader) Expect(c byte) error {
	if r.Peek() != c {
		return r.errorf("want %q", c)
	}
	r.i++
	return nil
}

// Null consumes a null literal if one comes next.
func (r *Reader) Null() bool {
	if r.Peek() == 'n' && r.hasLiteral("null") {
		r.i += 4
		return true
	}
	return false
}

func (r *Reader) hasLiteral(lit string) bool {
	return len(r.b)-r.i >= len(lit) && string(r.b[r.i:r.i+len(lit)]) == lit
}

// End fails unless only whitespace is left.
func (r *Reader) End() error {
	if r.ws(); r.i < len(r.b) {
		return r.errorf("want the end of the document")
	}
	return nil
}

// More is for the loop over the members of an object or the elements of an
// array whose opening brace or bracket was consumed: it consumes the comma
// before every member but the first and reports whether one comes, having
// consumed the closing close (a '}' or ']') when not.
func (r *Reader) More(first bool, close byte) (bool, error) {
	c := r.Peek()
	if c == close {
		r.i++
		return false, nil
	}
	if first {
		return true, nil
	}
	if c != ',' {
		return false, r.errorf("want ',' or %q", close)
	}
	r.i++
	return true, nil
}

// Key reads an object member's name and its colon.
func (r *Reader) Key() (string, error) {
	k, err := r.KeyBytes()
	return string(k), err
}

// KeyBytes is Key without a copy when the name has no escapes: the bytes
// are the document's, valid until it changes.
func (r *Reader) KeyBytes() ([]byte, error) {
	k, err := r.stringBytes()
	if err != nil {
		if te, ok := err.(*TextError); ok {
			te.Key = true
		}
		return nil, err
	}
	if err := r.Expect(':'); err != nil {
		return nil, err
	}
	return k, nil
}

// Object reads an object: for each member it reads the name and colon and
// calls member, which must read the value (or fail). A null is not an
// object here; check Null first where one is allowed.
func (r *Reader) Object(member func(name []byte) error) error {
	if err := r.Expect('{'); err != nil {
		return err
	}
	for first := true; ; first = false {
		more, err := r.More(first, '}')
		if err != nil || !more {
			return err
		}
		name, err := r.KeyBytes()
		if err != nil {
			return err
		}
		if err := member(name); err != nil {
			return err
		}
	}
}

// String reads a string, unescaped. Invalid UTF-8 and lone surrogates
// become U+FFFD, as with encoding/json.
func (r *Reader) String() (string, error) {
	b, err := r.stringBytes()
	return string(b), err
}

// stringBytes reads a string: a view of the document's bytes when it has
// no escapes and is valid UTF-8, else an unescaped copy.
func (r *Reader) stringBytes() ([]byte, error) {
	if r.Peek() != '"' {
		return nil, r.errorf("want a string")
	}
	r.i++
	start := r.i
	// Fast path: no escapes, plain ASCII or valid UTF-8.
	for r.i < len(r.b) {
		c := r.b[r.i]
		if c == '"' {
			s := r.b[start:r.i]
			if utf8.Valid(s) {
				r.i++
				return s, nil
			}
			break
		}
		if c == '\\' || c < 0x20 {
			break
		}
		r.i++
	}
	r.i = start
	out := []byte{}
	for {
		if r.i >= len(r.b) {
			return nil, r.errorf("unterminated string")
		}
		c := r.b[r.i]
		switch {
		case c == '"':
			r.i++
			return out, nil
		case c < 0x20:
			return nil, r.errorf("control character in a string")
		case c == '\\':
			var err error
			if out, err = r.escape(out); err != nil {
				return nil, err
			}
		case c < utf8.RuneSelf:
			out = append(out, c)
			r.i++
		default:
			ru, size := utf8.DecodeRune(r.b[r.i:])
			if ru == utf8.RuneError && size == 1 && r.strict {
				return nil, &TextError{Problem: InvalidUTF8, Offset: r.i, At: len(out)}
			}
			out = utf8.AppendRune(out, ru) // RuneError for invalid bytes
			r.i += size
		}
	}
}

// escape decodes the escape sequence at r.i onto out.
func (r *Reader) escape(out []byte) ([]byte, error) {
	if r.i+1 >= len(r.b) {
		r.i = len(r.b)
		return nil, r.errorf("unterminated escape")
	}
	r.i++
	c := r.b[r.i]
	switch c {
	case '"', '\\', '/':
		r.i++
		return append(out, c), nil
	case 'b':
		r.i++
		return append(out, '\b'), nil
	case 'f':
		r.i++
		return append(out, '\f'), nil
	case 'n':
		r.i++
		return append(out, '\n'), nil
	case 'r':
		r.i++
		return append(out, '\r'), nil
	case 't':
		r.i++
		return append(out, '\t'), nil
	case 'u':
		start := r.i - 1
		r.i++
		ru, ok := r.hex4()
		if !ok {
			return nil, r.errorf("want 4 hex digits after \\u")
		}
		if ru == 0 && r.strict {
			return nil, &TextError{Problem: NUL, Offset: start, At: len(out)}
		}
		if utf16.IsSurrogate(ru) {
			// A high surrogate followed by an escaped low one is one
			// character; anything else is a lone surrogate.
			if r.hasLiteral(`\u`) {
				save := r.i
				r.i += 2
				if lo, ok := r.hex4(); ok {
					if dec := utf16.DecodeRune(ru, lo); dec != utf8.RuneError {
						return utf8.AppendRune(out, dec), nil
					}
				}
				r.i = save
			}
			if r.strict {
				return nil, &TextError{Problem: LoneSurrogate, Offset: start, At: len(out), Text: string(r.b[start:r.i])}
			}
			ru = utf8.RuneError
		}
		return utf8.AppendRune(out, ru), nil
	default:
		return nil, r.errorf("invalid escape")
	}
}

func (r *Reader) hex4() (rune, bool) {
	if len(r.b)-r.i < 4 {
		return 0, false
	}
	var v rune
	for _, c := range r.b[r.i : r.i+4] {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			v = v<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	r.i += 4
	return v, true
}

// Int reads a number that must be an integer fitting in an int.
func (r *Reader) Int() (int, error) {
	r.ws()
	start := r.i
	if err := r.number(); err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(string(r.b[start:r.i]))
	if err != nil {
		r.i = start
		return 0, r.errorf("want an integer")
	}
	return n, nil
}

// number consumes a JSON number.
func (r *Reader) number() error {
	start := r.i
	if r.i < len(r.b) && r.b[r.i] == '-' {
		r.i++
	}
	switch {
	case r.i < len(r.b) && r.b[r.i] == '0':
		r.i++
	case r.i < len(r.b) && r.b[r.i] >= '1' && r.b[r.i] <= '9':
		r.digits()
	default:
		r.i = start
		return r.errorf("want a number")
	}
	if r.i < len(r.b) && r.b[r.i] == '.' {
		r.i++
		if !r.digits() {
			return r.errorf("want a digit after the decimal point")
		}
	}
	if r.i < len(r.b) && (r.b[r.i] == 'e' || r.b[r.i] == 'E') {
		r.i++
		if r.i < len(r.b) && (r.b[r.i] == '+' || r.b[r.i] == '-') {
			r.i++
		}
		if !r.digits() {
			return r.errorf("want a digit in the exponent")
		}
	}
	if r.strict && !NumericFits(r.b[start:r.i]) {
		text := string(r.b[start:r.i])
		if len(text) > 40 {
			text = text[:37] + "..."
		}
		return &TextError{Problem: NumberRange, Offset: start, Text: text}
	}
	return nil
}

func (r *Reader) digits() bool {
	start := r.i
	for r.i < len(r.b) && r.b[r.i] >= '0' && r.b[r.i] <= '9' {
		r.i++
	}
	return r.i > start
}

// Raw reads any value and returns its bytes (not copied), validated.
func (r *Reader) Raw() ([]byte, error) {
	r.ws()
	start := r.i
	if err := r.skip(0); err != nil {
		return nil, err
	}
	return r.b[start:r.i], nil
}

var errTooDeep = errors.New("json: nesting deeper than 10000")

func (r *Reader) skip(depth int) error {
	if depth > MaxDepth {
		return errTooDeep
	}
	switch c := r.Peek(); c {
	case '{':
		return r.Object(func([]byte) error { return r.skip(depth + 1) })
	case '[':
		r.i++
		for first := true; ; first = false {
			more, err := r.More(first, ']')
			if err != nil {
				return err
			}
			if !more {
				return nil
			}
			if err := r.skip(depth + 1); err != nil {
				return err
			}
		}
	case '"':
		_, err := r.stringBytes()
		return err
	case 't', 'f', 'n':
		for _, lit := range [...]string{"true", "false", "null"} {
			if r.hasLiteral(lit) {
				r.i += len(lit)
				return nil
			}
		}
		return r.errorf("want a value")
	default:
		return r.number()
	}
}

// Skip reads and discards any value.
func (r *Reader) Skip() error { return r.skip(0) }

// AppendString appends s as a JSON string, escaped as encoding/json
// escapes it: quote, backslash and control characters, '<', '>' and '&'
// (as \u003c, \u003e, \u0026), U+2028 and U+2029, and invalid UTF-8 as
// U+FFFD.
func AppendString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		ru, size := utf8.DecodeRuneInString(s[i:])
		if ru == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if ru == '\u2028' || ru == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[ru&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
