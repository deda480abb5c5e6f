package jsonlite

import (
	"errors"
	"strings"
	"testing"
)

func TestStrictRefusesWhatPostgresRefuses(t *testing.T) {
	t.Parallel()
	cases := []struct {
		doc     string
		problem Problem
		offset  int // of the problem in doc
		at      int // in the string's unescaped text
		key     bool
	}{
		{`"declined\u0000x"`, NUL, 9, 8, false},
		{`{"a\u0000":1}`, NUL, 3, 1, true},
		{`["ok", {"x": "\u0000"}]`, NUL, 14, 0, false},
		{"\"ab\xffc\"", InvalidUTF8, 3, 2, false},
		{"\"\\n\xc3\"", InvalidUTF8, 3, 1, false},
		{"\"\xed\xa0\x80\"", InvalidUTF8, 1, 0, false}, // an encoded surrogate
		{"{\"\xff\":1}", InvalidUTF8, 2, 0, true},
		{`"\ud800"`, LoneSurrogate, 1, 0, false},
		{`"x\udc00"`, LoneSurrogate, 2, 1, false},
		{`"\ud800x"`, LoneSurrogate, 1, 0, false},
		{`"\ud800\u0041"`, LoneSurrogate, 1, 0, false},
		{`"\ud800\ud800"`, LoneSurrogate, 1, 0, false},
		{`"\udc00\ud800"`, LoneSurrogate, 1, 0, false},
		{`{"n":1e131072}`, NumberRange, 5, 0, false},
		{`[10e131071]`, NumberRange, 1, 0, false},
		{`[1e-16384]`, NumberRange, 1, 0, false},
		{`[0e-16384]`, NumberRange, 1, 0, false},
		{`[0.0e-16383]`, NumberRange, 1, 0, false},
		{`[1.55e-16382]`, NumberRange, 1, 0, false},
		{`[0e1073741823]`, NumberRange, 1, 0, false},
		{`[0e-1073741823]`, NumberRange, 1, 0, false},
		{`[1e-99999999999999999999]`, NumberRange, 1, 0, false},
	}
	for _, tc := range cases {
		if err := NewReader([]byte(tc.doc)).Skip(); err != nil {
			t.Errorf("%q: the lax reader refuses it too: %v", tc.doc, err)
		}
		err := NewStrictReader([]byte(tc.doc)).Skip()
		var te *TextError
		if !errors.As(err, &te) {
			t.Errorf("%q: strict Skip = %v, want a TextError", tc.doc, err)
			continue
		}
		if te.Problem != tc.problem || te.Offset != tc.offset || te.Key != tc.key || (tc.problem != NumberRange && te.At != tc.at) {
			t.Errorf("%q: %+v, want problem %v offset %d at %d key %v", tc.doc, *te, tc.problem, tc.offset, tc.at, tc.key)
		}
		if msg := err.Error(); !strings.Contains(msg, tc.problem.String()) && tc.problem != NumberRange {
			t.Errorf("%q: error %q does not say %q", tc.doc, msg, tc.problem)
		}
	}
	if err := NewStrictReader([]byte(`"\ud800"`)).Skip(); err == nil || !strings.Contains(err.Error(), `\ud800`) {
		t.Errorf("a lone surrogate's error %v does not quote the escape", err)
	}
	long := "[1" + strings.Repeat("0", 200000) + "]"
	if err := NewStrictReader([]byte(long)).Skip(); err == nil || len(err.Error()) > 120 {
		t.Errorf("a 200000-digit number: error %q, want a short one", err)
	}
}

func TestStrictAcceptsWhatPostgresAccepts(t *testing.T) {
	t.Parallel()
	for _, doc := range []string{
		`"plain"`, `"\ud83d\ude00"`, `"\uD83D\uDE00"`, `"\ufffd"`, "\"\uFFFD\"", `"\uffff"`, `"\ufffe"`, `"\u0001"`, `"é中🙂"`,
		`[1e131071]`, `[9.9e131071]`, `[1e-16383]`, `[0e-16383]`, `[1.5e-16382]`, `[0e1073741822]`, `[-0]`, `[100e-2]`,
		`[1e00000000000000000000005]`, `[1E+2]`, `[-0e-16383]`, `[0.000e5]`,
		"[1" + strings.Repeat("0", 131071) + "]", "[0." + strings.Repeat("0", 16382) + "1]",
	} {
		if err := NewStrictReader([]byte(doc)).Skip(); err != nil {
			t.Errorf("%.60q: strict Skip = %v", doc, err)
		}
	}
	for _, doc := range []string{"[1" + strings.Repeat("0", 131072) + "]", "[0." + strings.Repeat("0", 16383) + "1]"} {
		if NumericFits([]byte(doc[1 : len(doc)-1])) {
			t.Errorf("NumericFits(%.30q...) = true", doc[1:])
		}
	}
}

func TestStrictReaderStillReadsStrings(t *testing.T) {
	t.Parallel()
	r := NewStrictReader([]byte(`{"k":"a\"b\u00e9\ud83d\ude00","n":-1.5e3}`))
	var got []string
	err := r.Object(func(name []byte) error {
		got = append(got, string(name))
		if string(name) == "k" {
			s, err := r.String()
			got = append(got, s)
			return err
		}
		return r.Skip()
	})
	if err != nil || strings.Join(got, "|") != "k|a\"bé😀|n" {
		t.Fatalf("got %q, %v", got, err)
	}
}

// The strict reader takes what the lax one takes, less the TextErrors:
// same syntax errors, same values.
func FuzzStrictSkip(f *testing.F) {
	for _, s := range []string{`{"a":[1,2,{"b":null}],"c":"d"}`, `"\u0000"`, `"\ud800"`, "\"\xff\"", `[1e131072]`, `[1e-16384]`,
		`{"\ud83d\ude00":"\ud83d"}`, `[0e1073741823, "x"`, `"\ud800\u00"`, `[1.5e-16382]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		lax, strict := NewReader(b), NewStrictReader(b)
		lerr, serr := lax.Skip(), strict.Skip()
		if lerr == nil {
			lerr = lax.End()
		}
		if serr == nil {
			serr = strict.End()
		}
		var te *TextError
		switch {
		case errors.As(serr, &te):
			if te.Offset < 0 || te.Offset >= len(b) {
				t.Fatalf("%q: TextError offset %d out of the document", b, te.Offset)
			}
		case serr == nil && lerr != nil:
			t.Fatalf("%q: strict took it, lax: %v", b, lerr)
		case serr != nil && (lerr == nil || lerr.Error() != serr.Error()):
			t.Fatalf("%q: strict %v, lax %v", b, serr, lerr)
		}
	})
}
