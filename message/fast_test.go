package message

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

var fastStrings = []string{"reserve", "x", `quo"te\`, "tab\tnl\n<&>", "é中🙂", "\u2028", strings.Repeat("k", 70)}

// fastTopics are legal Kafka topic names (reply_to must be one).
var fastTopics = []string{"saga.replies", "r", "Replies_2-x", strings.Repeat("t", 249)}

var fastPayloads = []json.RawMessage{nil, json.RawMessage(`{}`), json.RawMessage(`{"a": 1, "b": [true, null, "<x>&"], "c": {"d": -1.5e3}}`),
	json.RawMessage("{\n  \"sku\" : \"A-1\",\t\"qty\" : 2\n}"), json.RawMessage(`null`)}

func randomCommand(rng *rand.Rand) Command {
	pick := func() string { return fastStrings[rng.IntN(len(fastStrings))] }
	zones := []*time.Location{time.UTC, time.FixedZone("p", 19800), time.FixedZone("m", -25200)}
	return Command{
		MessageID: uuid.New(), SagaID: uuid.New(), SagaType: pick(), AggregateID: pick(), Step: pick(),
		Action: []Action{Forward, Compensate}[rng.IntN(2)], Attempt: 1 + rng.IntN(1000), ReplyTo: fastTopics[rng.IntN(len(fastTopics))],
		SentAt:  time.Unix(rng.Int64N(4e9), rng.Int64N(1e9)*int64(rng.IntN(2))).In(zones[rng.IntN(len(zones))]),
		Payload: fastPayloads[rng.IntN(len(fastPayloads))],
	}
}

func randomReply(rng *rand.Rand) Reply {
	pick := func() string { return fastStrings[rng.IntN(len(fastStrings))] }
	r := Reply{
		MessageID: uuid.New(), InReplyTo: uuid.New(), SagaID: uuid.New(), Step: pick(),
		Action: []Action{Forward, Compensate}[rng.IntN(2)], Outcome: []Outcome{Success, Failure, Retry}[rng.IntN(3)],
		Payload: fastPayloads[rng.IntN(len(fastPayloads))],
	}
	if rng.IntN(2) == 0 {
		r.Reason = pick()
	}
	return r
}

// The encoders write json.Marshal's bytes; the fast decoder takes what
// they write (and the same with spaces and members reordered) and reads
// what encoding/json reads.
func TestEnvelopesMatchEncodingJSON(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 8))
	for range 2000 {
		c := randomCommand(rng)
		want, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		got, err := EncodeCommand(c)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("EncodeCommand = %s, %v\n json.Marshal %s", got, err, want)
		}
		for _, in := range [][]byte{want, respace(t, want)} {
			var fast, std Command
			if !fastTakes(in, &fast, nil) {
				t.Fatalf("decodeFast gave up on %s", in)
			}
			if err := json.Unmarshal(in, &std); err != nil {
				t.Fatal(err)
			}
			sameCommand(t, in, fast, std)
		}

		r := randomReply(rng)
		if want, err = json.Marshal(r); err != nil {
			t.Fatal(err)
		}
		if got, err = EncodeReply(r); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("EncodeReply = %s, %v\n json.Marshal %s", got, err, want)
		}
		for _, in := range [][]byte{want, respace(t, want)} {
			var fast, std Reply
			if !fastTakes(in, nil, &fast) {
				t.Fatalf("decodeFast gave up on %s", in)
			}
			if err := json.Unmarshal(in, &std); err != nil {
				t.Fatal(err)
			}
			if fb, sb := mustJSON(t, fast), mustJSON(t, std); !bytes.Equal(fb, sb) || !bytes.Equal(fast.Payload, std.Payload) {
				t.Fatalf("%s: fast %s, encoding/json %s", in, fb, sb)
			}
		}
	}
}

// fastTakes reports whether decodeEnvelope read b (rather than refusing
// it).
func fastTakes(b []byte, c *Command, r *Reply) bool {
	return decodeEnvelope(b, c, r) == nil
}

// respace rewrites an object with its members in reverse order and spaces
// around every token, as another language's encoder might.
func respace(t *testing.T, b []byte) []byte {
	t.Helper()
	var members map[string]json.RawMessage
	if err := json.Unmarshal(b, &members); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range members {
		keys = append(keys, k)
	}
	var out bytes.Buffer
	out.WriteString(" {\n")
	for i := len(keys) - 1; i >= 0; i-- {
		k := keys[i]
		out.WriteString("  " + `"` + k + `"` + " : ")
		out.Write(members[k])
		if i > 0 {
			out.WriteString(" ,\n")
		}
	}
	out.WriteString("\n} ")
	return out.Bytes()
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sameCommand(t *testing.T, in []byte, fast, std Command) {
	t.Helper()
	fb, sb := mustJSON(t, fast), mustJSON(t, std)
	if !bytes.Equal(fb, sb) || !bytes.Equal(fast.Payload, std.Payload) || !fast.SentAt.Equal(std.SentAt) ||
		fast.SentAt.Location().String() != std.SentAt.Location().String() {
		t.Fatalf("%s: fast %s, encoding/json %s", in, fb, sb)
	}
}

// The decoder reads the forms other encoders may write as encoding/json
// reads them (names in other case, the last of repeated ones winning,
// nulls, unknown members), and refuses what encoding/json refuses with an
// error naming the member and what was wrong.
func TestDecodeEnvelopeAsEncodingJSON(t *testing.T) {
	t.Parallel()
	base := `"message_id":"6ba7b810-9dad-11d1-80b4-00c04fd430c8","saga_id":"6ba7b811-9dad-11d1-80b4-00c04fd430c8","saga_type":"t","aggregate_id":"a","step":"s","action":"forward","reply_to":"r","sent_at":"2026-12-01T10:00:00Z"`
	for _, in := range []string{
		`{` + base + `,"attempt":1,"Step":"other"}`,
		`{` + base + `,"attempt":1,"STEP":"other","step":"again"}`,
		`{` + base + `,"attempt":null}`,
		`{` + base + `,"attempt":2,"step":null}`,
		`{` + base + `,"attempt":1,"sent_at":null}`,
		`{` + base + `,"attempt":1,"payload":null}`,
		`{` + base + `,"attempt":-0}`,
		`{` + base + `,"attempt":2,"future_member":{"x":[1]}}`,
		`null`,
	} {
		var fast, std Command
		if err := decodeEnvelope([]byte(in), &fast, nil); err != nil {
			t.Errorf("decodeEnvelope(%s): %v", in, err)
			continue
		}
		if err := json.Unmarshal([]byte(in), &std); err != nil {
			t.Fatal(err)
		}
		sameCommand(t, []byte(in), fast, std)
	}
	for _, tc := range []struct{ in, want string }{
		{`{` + base + `,"attempt":"1"}`, `"attempt" has JSON type string, want int`},
		{`{` + base + `,"attempt":1.0}`, `"attempt" has JSON type number 1.0, want int`},
		{`{` + base + `,"attempt":1e2}`, `"attempt" has JSON type number 1e2, want int`},
		{`{` + base + `,"attempt":1,"Step":7}`, `"step" has JSON type number, want string`},
		{`{` + base + `,"attempt":1,"action":[]}`, `"action" has JSON type array, want message.Action`},
		{`{` + base + `,"attempt":1,"saga_id":true}`, `"saga_id" has JSON type bool, want uuid.UUID`},
		{`{` + base + `,"attempt":1,"payload":{"a":}}`, "offset"},
		{`{` + base + `,"attempt":1} trailing`, "offset"},
		{`[` + base + `]`, "value is a JSON array, want an object"},
		{`"x"`, "value is a JSON string, want an object"},
		{`{` + strings.Replace(base, `"6ba7b810-9dad-11d1-80b4-00c04fd430c8"`, `"nope"`, 1) + `,"attempt":1}`, `"message_id" is not valid: invalid UUID length: 4`},
		{`{` + strings.Replace(base, `"2026-12-01T10:00:00Z"`, `"yesterday"`, 1) + `,"attempt":1}`, `"sent_at" is not valid`},
		{`{` + strings.Replace(base, `"2026-12-01T10:00:00Z"`, `12`, 1) + `,"attempt":1}`, `"sent_at" is not valid`},
	} {
		var c Command
		err := decodeEnvelope([]byte(tc.in), &c, nil)
		if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("decodeEnvelope(%s) = %v, want an ErrInvalid saying %q", tc.in, err, tc.want)
		}
		if json.Unmarshal([]byte(tc.in), new(Command)) == nil {
			t.Errorf("encoding/json takes %s, which decodeEnvelope refuses", tc.in)
		}
	}
}

// Whenever the decoder takes an input, encoding/json reads the same; what
// encoding/json refuses, it refuses.
func FuzzDecodeEnvelope(f *testing.F) {
	rng := rand.New(rand.NewPCG(9, 10))
	for range 10 {
		b, _ := json.Marshal(randomCommand(rng))
		f.Add(b)
		b, _ = json.Marshal(randomReply(rng))
		f.Add(b)
	}
	f.Add([]byte(`{"Message_ID":"6ba7b810-9dad-11d1-80b4-00c04fd430c8","attempt":null,"step":7}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var fc, sc Command
		ferr, serr := decodeEnvelope(b, &fc, nil), json.Unmarshal(b, &sc)
		switch {
		case ferr == nil && serr != nil:
			t.Fatalf("decodeEnvelope took %q, encoding/json refuses it: %v", b, serr)
		case ferr == nil:
			sameCommand(t, b, fc, sc)
		}
		var fr, sr Reply
		ferr, serr = decodeEnvelope(b, nil, &fr), json.Unmarshal(b, &sr)
		switch {
		case ferr == nil && serr != nil:
			t.Fatalf("decodeEnvelope took %q, encoding/json refuses it: %v", b, serr)
		case ferr == nil:
			if fb, sb := mustJSON(t, fr), mustJSON(t, sr); !bytes.Equal(fb, sb) || !bytes.Equal(fr.Payload, sr.Payload) {
				t.Fatalf("%q: decodeEnvelope %s, encoding/json %s", b, fb, sb)
			}
		}
	})
}

func TestEnvelopeFieldsAreTheContractsMembers(t *testing.T) {
	t.Parallel()
	want := []string{"message_id", "saga_id", "saga_type", "aggregate_id", "step", "action",
		"attempt", "reply_to", "sent_at", "payload", "in_reply_to", "outcome", "reason"}
	if !slices.Equal(envelopeFields, want) {
		t.Fatalf("envelopeFields = %v, want %v", envelopeFields, want)
	}
}

// appendCompactHTML writes what json.Compact and json.HTMLEscape write
// (what json.Marshal writes for a json.RawMessage), for any valid JSON.
func FuzzAppendCompactHTML(f *testing.F) {
	for _, p := range fastPayloads {
		f.Add([]byte(p))
	}
	for _, s := range []string{` { "a" : "<\u2028>" , "b\\"" : [ 1 , "\\\\<&" ] } `, "{\"x\":\"\u2028\u2029 \xe2\x80\"}", `"\\"<"`, "[\t\n\r1]", `{"é":"&amp;"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) {
			return
		}
		var compact, want bytes.Buffer
		if err := json.Compact(&compact, b); err != nil {
			t.Fatal(err)
		}
		json.HTMLEscape(&want, compact.Bytes())
		if got := appendCompactHTML([]byte("x"), b); !bytes.Equal(got[1:], want.Bytes()) {
			t.Fatalf("appendCompactHTML(%q) = %q, want %q", b, got[1:], want.Bytes())
		}
	})
}
