package jsonlite

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

var tricky = []string{
	"", "plain", `quote " and backslash \`, "tab\tnew\nline\rcr\bbs\fff", "\x00\x01\x1f\x7f",
	"<script>&amp;</script>", "é ü ß 中文 🙂", "\u2028 and \u2029", "bad \xff utf8 \xc3", "\xed\xa0\x80 encoded surrogate",
	strings.Repeat("x", 300),
}

func TestAppendStringMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, s := range tricky {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := AppendString([]byte("prefix"), s); !bytes.Equal(got, append([]byte("prefix"), want...)) {
			t.Errorf("AppendString(%q) = %s, want %s", s, got[len("prefix"):], want)
		}
	}
}

func FuzzAppendString(f *testing.F) {
	for _, s := range tricky {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := AppendString(nil, s); !bytes.Equal(got, want) {
			t.Fatalf("AppendString(%q) = %s, want %s", s, got, want)
		}
	})
}

// String reads what encoding/json reads into a string, and refuses what
// it refuses.
func FuzzReaderString(f *testing.F) {
	for _, s := range tricky {
		b, _ := json.Marshal(s)
		f.Add(b)
	}
	for _, s := range []string{`"\ud83d\ude42"`, `"\ud83d"`, `"\ude42\ud83d"`, `"\ud83dx"`, `"\ud83d\u0041"`, `"\u00e9\/"`,
		`"unterminated`, `"bad \x escape"`, "\"raw\ttab\"", `"\u12"`, ` "spaced" `, `"a" "b"`, `12`, `"x`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
			return // encoding/json leaves the string alone; String wants one
		}
		var want string
		wantErr := json.Unmarshal(b, &want)
		r := NewReader(b)
		got, err := r.String()
		if err == nil {
			err = r.End()
		}
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("%q: String error %v, encoding/json error %v", b, err, wantErr)
		}
		if err == nil && got != want {
			t.Fatalf("%q: String = %q, encoding/json %q", b, got, want)
		}
	})
}

// Skip accepts exactly the documents encoding/json calls valid.
func FuzzSkip(f *testing.F) {
	for _, s := range []string{`{"a":[1,2,{"b":null}],"c":"d"}`, `[]`, `{}`, ` [ 1 , -0.5e+3 , true , false ] `, `01`, `1.`, `-`, `1e`,
		`{"a" 1}`, `[1,]`, `{"a":1,}`, `tru`, `nul`, `"x"`, `[[[[]]]]`, `{"a":{"b":{"c":"\u00e9"}}}`, `1 2`, ``} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r := NewReader(b)
		err := r.Skip()
		if err == nil {
			err = r.End()
		}
		if want := json.Valid(b); (err == nil) != want {
			t.Fatalf("%q: Skip error %v, json.Valid %v", b, err, want)
		}
	})
}

func TestInt(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int{"0": 0, " 42": 42, "-7": -7, "1234567": 1234567} {
		if got, err := NewReader([]byte(in)).Int(); err != nil || got != want {
			t.Errorf("Int(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"1.5", "1e3", "-", "01x", `"1"`, "99999999999999999999999", ""} {
		r := NewReader([]byte(in))
		if _, err := r.Int(); err == nil && r.End() == nil {
			t.Errorf("Int(%q): no error", in)
		}
	}
}

func TestErrorsNameTheOffset(t *testing.T) {
	t.Parallel()
	r := NewReader([]byte(`{"a" 1}`))
	_ = r.Expect('{')
	_, err := r.Key()
	if err == nil || !strings.Contains(err.Error(), "offset 5") || !strings.Contains(err.Error(), `want ':'`) {
		t.Fatalf("Key error %v, want one naming offset 5 and the colon", err)
	}
}

func TestSkipDepthLimit(t *testing.T) {
	t.Parallel()
	deep := strings.Repeat("[", MaxDepth+2) + strings.Repeat("]", MaxDepth+2)
	if err := NewReader([]byte(deep)).Skip(); err == nil {
		t.Fatal("Skip of a too deep document: no error")
	}
}
