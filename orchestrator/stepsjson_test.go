package orchestrator

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/saga"
)

// randomSteps builds step lists with every field set or left zero, the
// times in assorted zones and precisions, and strings that need escaping.
func randomSteps(rng *rand.Rand) []saga.StepState {
	strs := []string{"", "reserve", `quo"te\`, "tab\tnl\n<&>", "é中🙂", "\u2028"}
	outs := []json.RawMessage{nil, json.RawMessage(`{"a": 1, "b": [true, null, "x"]}`), json.RawMessage(`null`), json.RawMessage(`"s"`)}
	zones := []*time.Location{time.UTC, time.FixedZone("plus", 5*3600+1800), time.FixedZone("minus", -7*3600)}
	tm := func() *time.Time {
		if rng.IntN(3) == 0 {
			return nil
		}
		t := time.Unix(rng.Int64N(4e9), rng.Int64N(1e9)*int64(rng.IntN(2))).In(zones[rng.IntN(len(zones))])
		return &t
	}
	tm0 := func() *time.Time {
		t := time.Unix(rng.Int64N(4e9), rng.Int64N(1e9)).In(zones[rng.IntN(len(zones))])
		return &t
	}
	n := rng.IntN(5)
	steps := make([]saga.StepState, n)
	for i := range steps {
		st := saga.StepState{
			Name: strs[rng.IntN(len(strs))], Kind: saga.Kind(strs[rng.IntN(len(strs))]), State: saga.StepStatus(strs[rng.IntN(len(strs))]),
			Attempts: rng.IntN(1000) - 10, CompAttempts: rng.IntN(3), RetryAnswers: rng.IntN(4) * (rng.IntN(2)*2 - 1), QueryAttempts: rng.IntN(3), QueryUntil: rng.IntN(2) * 5,
			DueAt: tm(), StartedAt: tm(), FinishedAt: tm(), CompStartedAt: tm(), CompFinishedAt: tm(), AcceptedAt: tm(), Cancellable: rng.IntN(2) == 0,
			LastError: strs[rng.IntN(len(strs))], Output: outs[rng.IntN(len(outs))], CompensationNote: strs[rng.IntN(len(strs))],
		}
		if rng.IntN(2) == 0 {
			st.AwaitID = uuid.New()
		}
		st.Seq = rng.IntN(3)
		for range rng.IntN(3) {
			ev := saga.ReceivedEvent{ID: strs[rng.IntN(len(strs))], At: *tm0(), Taken: rng.IntN(2) == 0}
			if rng.IntN(2) == 0 {
				ev.Data = json.RawMessage(`{"approved": true}`)
			}
			st.Events = append(st.Events, ev)
		}
		steps[i] = st
	}
	return steps
}

// canonical is encoding/json's encoding, the reference both ways.
func canonical(t *testing.T, steps []saga.StepState) []byte {
	t.Helper()
	b, err := json.Marshal(steps)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Both directions agree with encoding/json: what appendSteps writes
// encoding/json reads back to the same steps, what encoding/json writes
// decodeSteps reads back to the same steps.
func TestStepsJSONAgreesWithEncodingJSON(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		steps := randomSteps(rng)
		want := canonical(t, steps)

		ours, err := appendSteps(nil, steps)
		if err != nil {
			t.Fatalf("appendSteps: %v", err)
		}
		var viaStd []saga.StepState
		if err := json.Unmarshal(ours, &viaStd); err != nil {
			t.Fatalf("encoding/json cannot read %s: %v", ours, err)
		}
		if got := canonical(t, viaStd); !bytes.Equal(got, want) {
			t.Fatalf("appendSteps then encoding/json:\n got %s\nwant %s", got, want)
		}

		for _, in := range [][]byte{want, ours} {
			back, err := decodeSteps(in)
			if err != nil {
				t.Fatalf("decodeSteps(%s): %v", in, err)
			}
			if got := canonical(t, back); !bytes.Equal(got, want) {
				t.Fatalf("decodeSteps(%s):\n got %s\nwant %s", in, got, want)
			}
		}
	}
}

// What Postgres returns from the jsonb column: keys by length, spaces; a
// member this version does not know is skipped, nulls leave fields unset, a
// member an older version did not write (retry_answers) reads as zero.
func TestDecodeStepsReadsJSONB(t *testing.T) {
	t.Parallel()
	in := `[{"kind": "compensable", "name": "reserve", "state": "succeeded", "output": {"sku": "A-1", "qty": 2}, "attempts": 1, "await_id": "6ba7b810-9dad-11d1-80b4-00c04fd430c8", "started_at": "2026-12-01T10:00:00.123456+00:00", "finished_at": null, "future_field": {"x": [1, 2]}, "compensation_attempts": 0}, {"name": "charge", "kind": "pivot", "state": "retrying", "attempts": 4, "retry_answers": 3, "compensation_attempts": 0, "last_error": null}]`
	steps, err := decodeSteps([]byte(in))
	if err != nil {
		t.Fatalf("decodeSteps: %v", err)
	}
	if len(steps) != 2 || steps[0].Name != "reserve" || steps[0].Kind != "compensable" || steps[0].State != "succeeded" ||
		steps[0].Attempts != 1 || steps[0].AwaitID.String() != "6ba7b810-9dad-11d1-80b4-00c04fd430c8" ||
		steps[0].StartedAt == nil || steps[0].StartedAt.Nanosecond() != 123456000 || steps[0].FinishedAt != nil ||
		string(steps[0].Output) != `{"sku": "A-1", "qty": 2}` || steps[1].Name != "charge" || steps[1].LastError != "" ||
		steps[0].RetryAnswers != 0 || steps[1].RetryAnswers != 3 {
		t.Fatalf("decoded %+v", steps)
	}
	var std []saga.StepState
	if err := json.Unmarshal([]byte(in), &std); err != nil {
		t.Fatal(err)
	}
	if got, want := canonical(t, steps), canonical(t, std); !bytes.Equal(got, want) {
		t.Fatalf("decodeSteps %s, encoding/json %s", got, want)
	}
}

func TestDecodeStepsRefusesMalformedInput(t *testing.T) {
	t.Parallel()
	for in, wantErr := range map[string]string{
		``:                                  "want '['",
		`{}`:                                "want '['",
		`[{"name": "a"}`:                    "want ',' or ']'",
		`[{"name": "a"},]`:                  "step 1: json: offset 15: want '{'",
		`[{"name": 1}]`:                     "step 0: name",
		`[{"attempts": "1"}]`:               "step 0: attempts",
		`[{"attempts": 1.5}]`:               "step 0: attempts",
		`[{"retry_answers": "2"}]`:          "step 0: retry_answers",
		`[{"await_id": "not-a-uuid"}]`:      "step 0: await_id",
		`[{"due_at": "yesterday"}]`:         "step 0: due_at",
		`[{"name": "a"}, {"output": [1,}]`:  "step 1: output",
		`[{"name": "a"}] trailing`:          "want the end of the document",
		`[{"name": "a" "kind": "pivot"}]`:   "want ',' or '}'",
		`[{"name": "unterminated}]`:         "unterminated string",
		`[{"last_error": "bad \q escape"}]`: "invalid escape",
		"[{\"name\": \"ctl\x01char\"}]":     "control character",
	} {
		_, err := decodeSteps([]byte(in))
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("decodeSteps(%q) error %v, want one containing %q", in, err, wantErr)
		}
		var std []saga.StepState
		if json.Unmarshal([]byte(in), &std) == nil {
			t.Errorf("%q: encoding/json accepts it (the case is not malformed)", in)
		}
	}
}

func TestAppendStepsRefusesWhatEncodingJSONRefuses(t *testing.T) {
	t.Parallel()
	year10k := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, steps := range [][]saga.StepState{
		{{Name: "a", DueAt: &year10k}},
		{{Name: "a", Output: json.RawMessage(`{"a":`)}},
	} {
		if _, err := json.Marshal(steps); err == nil {
			t.Fatalf("encoding/json accepts %+v", steps)
		}
		if _, err := appendSteps(nil, steps); err == nil {
			t.Errorf("appendSteps(%+v): no error", steps)
		}
	}
	if b, err := appendSteps(nil, nil); err != nil || string(b) != "null" {
		t.Errorf("appendSteps(nil) = %s, %v; want null", b, err)
	}
}

// Whatever decodeSteps accepts, encoding/json accepts and reads the same
// way (for inputs without upper case letters: encoding/json also matches
// member names case-insensitively, decodeSteps does not).
func FuzzDecodeSteps(f *testing.F) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 20 {
		b, _ := json.Marshal(randomSteps(rng))
		f.Add(b)
	}
	f.Add([]byte(`[{"name": "a", "x": {"y": [1, "2", null]}, "attempts": 3}, null]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := decodeSteps(b)
		if err != nil || bytes.ContainsFunc(b, func(r rune) bool { return r >= 'A' && r <= 'Z' }) {
			return
		}
		var want []saga.StepState
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatalf("decodeSteps accepts %q, encoding/json does not: %v", b, err)
		}
		gb, err1 := json.Marshal(got)
		wb, err2 := json.Marshal(want)
		if err1 != nil || err2 != nil || !bytes.Equal(gb, wb) {
			t.Fatalf("%q: decodeSteps %s (%v), encoding/json %s (%v)", b, gb, err1, wb, err2)
		}
	})
}

func BenchmarkStepsJSON(b *testing.B) {
	rng := rand.New(rand.NewPCG(5, 6))
	steps := randomSteps(rng)
	for len(steps) < 5 {
		steps = append(steps, randomSteps(rng)...)
	}
	enc, _ := json.Marshal(steps)
	b.Run("decode/encoding-json", func(b *testing.B) {
		for b.Loop() {
			var s []saga.StepState
			if err := json.Unmarshal(enc, &s); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode/jsonlite", func(b *testing.B) {
		for b.Loop() {
			if _, err := decodeSteps(enc); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encode/encoding-json", func(b *testing.B) {
		for b.Loop() {
			if _, err := json.Marshal(steps); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encode/jsonlite", func(b *testing.B) {
		for b.Loop() {
			if _, err := appendSteps(nil, steps); err != nil {
				b.Fatal(err)
			}
		}
	})
}
