package jsonlite

import "fmt"

// Problem is what a strict Reader refuses (see NewStrictReader).
type Problem uint8

const (
	// NUL: the escape \u0000. Postgres text cannot hold U+0000, and jsonb
	// refuses the escape ("unsupported Unicode escape sequence").
	NUL Problem = iota + 1
	// InvalidUTF8: bytes in a string that are not UTF-8 (this includes the
	// encoded surrogates ED A0 80 to ED BF BF).
	InvalidUTF8
	// LoneSurrogate: a \uD800 to \uDFFF escape that is not a high
	// surrogate followed by an escaped low one. jsonb refuses it ("Unicode
	// low surrogate must follow a high surrogate").
	LoneSurrogate
	// NumberRange: a number Postgres numeric (so jsonb) cannot hold
	// ("value overflows numeric format"); see NumericFits.
	NumberRange
)

func (p Problem) String() string {
	switch p {
	case NUL:
		return "a NUL character (U+0000)"
	case InvalidUTF8:
		return "invalid UTF-8"
	case LoneSurrogate:
		return "an unpaired UTF-16 surrogate escape"
	case NumberRange:
		return "a number outside the range of Postgres numeric"
	}
	return fmt.Sprintf("problem %d", uint8(p))
}

// TextError is what a strict Reader returns for a document that is valid
// JSON but not storable in Postgres. Its text is plain ASCII.
type TextError struct {
	Problem Problem
	// Offset is the byte offset in the document of the offending byte,
	// escape or number.
	Offset int
	// At is, in a string, the byte offset of the problem in the string's
	// unescaped text (what encoding/json would give); 0 for a number.
	At int
	// Key reports that the string is an object member's name.
	Key bool
	// Text is the offending escape (LoneSurrogate) or number (NumberRange,
	// cut to 40 bytes).
	Text string
}

func (e *TextError) Error() string {
	where := "string"
	if e.Key {
		where = "member name"
	}
	switch e.Problem {
	case NumberRange:
		return fmt.Sprintf("json: offset %d: the number %s is outside the range of Postgres numeric", e.Offset, e.Text)
	case LoneSurrogate:
		return fmt.Sprintf("json: offset %d: %s %s in a %s", e.Offset, e.Problem, e.Text, where)
	}
	return fmt.Sprintf("json: offset %d: %s in a %s", e.Offset, e.Problem, where)
}

// Limits of Postgres numeric (src/backend/utils/adt/numeric.c), which
// jsonb uses for every number.
const (
	// NumericMaxScale is the most digits after the decimal point
	// (NUMERIC_DSCALE_MAX).
	NumericMaxScale = 0x3FFF
	// NumericMaxExponent is the largest power of ten of a nonzero
	// number's most significant digit: weights are int16 in base 10000,
	// so 4*32767+3.
	NumericMaxExponent = 4*32767 + 3
	// numericMaxExponentLiteral: numeric_in refuses an exponent of
	// INT_MAX/2 or more (or -INT_MAX/2 or less) whatever the digits.
	numericMaxExponentLiteral = 1<<31/2 - 1
)

// NumericFits reports whether the JSON number num (valid JSON number
// syntax) is accepted by Postgres numeric input: its scale (digits after
// the point, less the exponent, trailing zeros included) is at most
// NumericMaxScale, a nonzero number's most significant digit is at most
// 10^NumericMaxExponent, and the exponent's magnitude is below 2^30-1.
// (Checked against Postgres 15: 1e131071 and 1e-16383 are accepted,
// 10e131071, 1e-16384, 0.0e-16383 and 0e1073741823 are refused.)
func NumericFits(num []byte) bool {
	i := 0
	if i < len(num) && num[i] == '-' {
		i++
	}
	intStart := i
	for i < len(num) && isDigit(num[i]) {
		i++
	}
	intEnd, fracStart, fracEnd := i, i, i
	if i < len(num) && num[i] == '.' {
		i++
		fracStart = i
		for i < len(num) && isDigit(num[i]) {
			i++
		}
		fracEnd = i
	}
	exp := 0
	if i < len(num) && (num[i] == 'e' || num[i] == 'E') {
		i++
		neg := false
		if i < len(num) && (num[i] == '+' || num[i] == '-') {
			neg = num[i] == '-'
			i++
		}
		for ; i < len(num) && isDigit(num[i]); i++ {
			if exp < 1<<40 { // saturate: anything this large is refused
				exp = exp*10 + int(num[i]-'0')
			}
		}
		if neg {
			exp = -exp
		}
	}
	if exp >= numericMaxExponentLiteral || exp <= -numericMaxExponentLiteral {
		return false
	}
	if scale := (fracEnd - fracStart) - exp; scale > NumericMaxScale {
		return false
	}
	// The most significant nonzero digit's power of ten.
	for j := intStart; j < intEnd; j++ {
		if num[j] != '0' {
			return (intEnd-1-j)+exp <= NumericMaxExponent
		}
	}
	for j := fracStart; j < fracEnd; j++ {
		if num[j] != '0' {
			return -(j-fracStart+1)+exp <= NumericMaxExponent
		}
	}
	return true // zero
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
