package message

import (
	"bytes"
	"encoding/json"
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

// fastTakes reports whether decodeFast read b (rather than giving up or
// refusing it).
func fastTakes(b []byte, c *Command, r *Reply) bool {
	ok, _ := decodeFast(b, c, r)
	return ok
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

// The fast decoder gives up on what encoding/json reads differently or
// refuses: names in other case, nulls, wrong types, syntax errors.
func TestDecodeFastGivesUp(t *testing.T) {
	t.Parallel()
	base := `"message_id":"6ba7b810-9dad-11d1-80b4-00c04fd430c8","saga_id":"6ba7b811-9dad-11d1-80b4-00c04fd430c8","saga_type":"t","aggregate_id":"a","step":"s","action":"forward","reply_to":"r","sent_at":"2026-12-01T10:00:00Z"`
	for _, in := range []string{
		`{` + base + `,"attempt":1,"Step":"other"}`,
		`{` + base + `,"attempt":null}`,
		`{` + base + `,"attempt":"1"}`,
		`{` + base + `,"attempt":1.0}`,
		`{` + base + `,"attempt":1,"payload":{"a":}}`,
		`{` + base + `,"attempt":1} trailing`,
		`[` + base + `]`,
		`{` + strings.Replace(base, `"6ba7b810-9dad-11d1-80b4-00c04fd430c8"`, `"nope"`, 1) + `,"attempt":1}`,
		`{` + strings.Replace(base, `"2026-12-01T10:00:00Z"`, `"yesterday"`, 1) + `,"attempt":1}`,
	} {
		var c Command
		if fastTakes([]byte(in), &c, nil) {
			t.Errorf("decodeFast took %s", in)
		}
	}
	var c Command
	if !fastTakes([]byte(`{`+base+`,"attempt":2,"future_member":{"x":[1]}}`), &c, nil) || c.Attempt != 2 || c.Step != "s" {
		t.Errorf("decodeFast did not take an envelope with an unknown member: %+v", c)
	}
}

// Whenever the fast decoder takes an input, encoding/json reads the same.
func FuzzDecodeFast(f *testing.F) {
	rng := rand.New(rand.NewPCG(9, 10))
	for range 10 {
		b, _ := json.Marshal(randomCommand(rng))
		f.Add(b)
		b, _ = json.Marshal(randomReply(rng))
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var fc Command
		if fastTakes(b, &fc, nil) {
			var sc Command
			if err := json.Unmarshal(b, &sc); err != nil {
				t.Fatalf("decodeFast took %q, encoding/json refuses it: %v", b, err)
			}
			sameCommand(t, b, fc, sc)
		}
		var fr Reply
		if fastTakes(b, nil, &fr) {
			var sr Reply
			if err := json.Unmarshal(b, &sr); err != nil {
				t.Fatalf("decodeFast took %q, encoding/json refuses it: %v", b, err)
			}
			if fb, sb := mustJSON(t, fr), mustJSON(t, sr); !bytes.Equal(fb, sb) || !bytes.Equal(fr.Payload, sr.Payload) {
				t.Fatalf("%q: fast %s, encoding/json %s", b, fb, sb)
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
