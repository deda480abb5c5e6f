package jsonlite

import (
	"bytes"
	"encoding/json"
	"maps"
	"testing"
)

func TestReadStringMapMatchesEncodingJSON(t *testing.T) {
	for _, in := range []string{
		`{"message-id": "6f1c2a4e-0d3b-4c1e-9a55-1f2e3d4c5b6a", "saga-id": "0b7d1e4f-9c2a-4d3e-8f11-2233445566aa", "content-type": "application/json"}`,
		`{"a":"b","c":"d"}`,
		` { "a" : "b" ,	"c":"d" } `,
		`{}`,
		`{"k": "é ünïcode ✓"}`,
		`{"k": "a\"b"}`,   // escape: encoding/json's path
		`{"k": "\u00e9"}`, // escape
		`{"k": "x", "k": "y"}`,
		`null`,
	} {
		var want map[string]string
		if err := json.Unmarshal([]byte(in), &want); err != nil {
			t.Fatalf("%s: encoding/json: %v", in, err)
		}
		got, err := ReadStringMap([]byte(in))
		if err != nil || !maps.Equal(got, want) || (got == nil) != (want == nil) {
			t.Errorf("ReadStringMap(%s) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{`{"a": 1}`, `{"a": "b"`, `{"a" "b"}`, `["a"]`, `{"a": "b"} x`, `{"a": "b",}`} {
		if got, err := ReadStringMap([]byte(in)); err == nil {
			t.Errorf("ReadStringMap(%s) = %v, want an error as encoding/json gives", in, got)
		}
	}
}

// ReadStringMap accepts what encoding/json accepts, and reads it the same.
func FuzzReadStringMap(f *testing.F) {
	f.Add([]byte(`{"message-id": "x", "saga-id": "y"}`))
	f.Add([]byte(`{"a":"b"}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"a": "\n", "\u00e9": "\ud83d\ude00"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := ReadStringMap(b)
		var want map[string]string
		jerr := json.Unmarshal(b, &want)
		switch {
		case (err == nil) != (jerr == nil):
			t.Fatalf("%q: ReadStringMap error %v, encoding/json error %v", b, err, jerr)
		case err == nil && (!maps.Equal(got, want) || (got == nil) != (want == nil)):
			t.Fatalf("%q: ReadStringMap %v, encoding/json %v", b, got, want)
		}
	})
}

func BenchmarkReadStringMap(b *testing.B) {
	h := []byte(`{"saga-id": "0b7d1e4f-9c2a-4d3e-8f11-2233445566aa", "message-id": "6f1c2a4e-0d3b-4c1e-9a55-1f2e3d4c5b6a", "content-type": "application/json"}`)
	b.Run("jsonlite", func(b *testing.B) {
		for b.Loop() {
			if _, err := ReadStringMap(h); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			var m map[string]string
			if err := json.Unmarshal(h, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// headerMaps are the golden inputs of AppendStringMap: what the outbox and
// the dead letters store (the envelope headers, a trace context), and the
// strings AppendString must escape, as names and as values.
func headerMaps() []map[string]string {
	ms := []map[string]string{
		nil,
		{},
		{"message-id": "6f1c2a4e-0d3b-4c1e-9a55-1f2e3d4c5b6a", "saga-id": "0b7d1e4f-9c2a-4d3e-8f11-2233445566aa", "content-type": "application/json",
			"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tracestate": "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"},
		{"b": "2", "a": "1", "B": "3", "": "empty name"},
	}
	for i, s := range tricky {
		ms = append(ms, map[string]string{s: tricky[(i+1)%len(tricky)], "v": s})
	}
	return ms
}

// AppendStringMap writes the bytes json.Marshal writes, so the headers
// column holds what it held when encoding/json wrote it.
func TestAppendStringMapMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, m := range headerMaps() {
		want, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if got := AppendStringMap([]byte("prefix"), m); !bytes.Equal(got, append([]byte("prefix"), want...)) {
			t.Errorf("AppendStringMap(%q) = %s, want %s", m, got[len("prefix"):], want)
		}
	}
	if got := string(AppendStringMap(nil, map[string]string{"k": "a\"b<\u2028"})); got != `{"k":"a\"b\u003c\u2028"}` {
		t.Errorf("golden: AppendStringMap = %s", got)
	}
}

// A map written by AppendStringMap reads back with ReadStringMap as
// encoding/json reads it back (invalid UTF-8 replaced by U+FFFD, as
// json.Marshal replaces it), and the bytes are json.Marshal's.
func FuzzStringMapRoundTrip(f *testing.F) {
	for i, s := range tricky {
		f.Add(s, tricky[(i+1)%len(tricky)], "saga-id", s)
	}
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		m := map[string]string{k1: v1, k2: v2}
		b := AppendStringMap(nil, m)
		want, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, want) {
			t.Fatalf("AppendStringMap(%q) = %s, json.Marshal %s", m, b, want)
		}
		got, err := ReadStringMap(b)
		if err != nil {
			t.Fatalf("ReadStringMap(%s): %v", b, err)
		}
		var back map[string]string
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(got, back) {
			t.Fatalf("ReadStringMap(%s) = %q, encoding/json %q", b, got, back)
		}
	})
}
