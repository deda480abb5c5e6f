package outboxdb

import (
	"encoding/json"
	"maps"
	"testing"
)

func TestDecodeHeadersMatchesEncodingJSON(t *testing.T) {
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
		got, err := DecodeHeaders([]byte(in))
		if err != nil || !maps.Equal(got, want) || (got == nil) != (want == nil) {
			t.Errorf("DecodeHeaders(%s) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{`{"a": 1}`, `{"a": "b"`, `{"a" "b"}`, `["a"]`, `{"a": "b"} x`, `{"a": "b",}`} {
		if got, err := DecodeHeaders([]byte(in)); err == nil {
			t.Errorf("DecodeHeaders(%s) = %v, want an error as encoding/json gives", in, got)
		}
	}
}

// decodeHeaders accepts what encoding/json accepts, and reads it the same.
func FuzzDecodeHeaders(f *testing.F) {
	f.Add([]byte(`{"message-id": "x", "saga-id": "y"}`))
	f.Add([]byte(`{"a":"b"}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"a": "\n", "\u00e9": "\ud83d\ude00"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := DecodeHeaders(b)
		var want map[string]string
		jerr := json.Unmarshal(b, &want)
		switch {
		case (err == nil) != (jerr == nil):
			t.Fatalf("%q: decodeHeaders error %v, encoding/json error %v", b, err, jerr)
		case err == nil && (!maps.Equal(got, want) || (got == nil) != (want == nil)):
			t.Fatalf("%q: decodeHeaders %v, encoding/json %v", b, got, want)
		}
	})
}

func BenchmarkDecodeHeaders(b *testing.B) {
	h := []byte(`{"saga-id": "0b7d1e4f-9c2a-4d3e-8f11-2233445566aa", "message-id": "6f1c2a4e-0d3b-4c1e-9a55-1f2e3d4c5b6a", "content-type": "application/json"}`)
	b.Run("jsonlite", func(b *testing.B) {
		for b.Loop() {
			if _, err := DecodeHeaders(h); err != nil {
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
