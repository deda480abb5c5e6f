package message

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"
)

func TestDecodeQueryAnswer(t *testing.T) {
	cases := []struct {
		name, payload, wantErr string
		want                   QueryState
		output                 string
	}{
		{name: "done with output", payload: `{"state":"done","output":{"reservation_id":"r1"}}`, want: QueryDone, output: `{"reservation_id":"r1"}`},
		{name: "done without output", payload: `{"state":"done"}`, want: QueryDone},
		{name: "done with null output", payload: `{"state":"done","output":null}`, want: QueryDone},
		{name: "failed", payload: `{"state":"failed"}`, want: QueryFailed},
		{name: "compensated", payload: `{"state":"compensated"}`, want: QueryCompensated},
		{name: "closed", payload: `{"state":"closed"}`, want: QueryClosed},
		{name: "accepted", payload: `{"state":"accepted"}`, want: QueryAccepted},
		{name: "output with accepted", payload: `{"state":"accepted","output":{"a":1}}`, wantErr: `only done carries an output`},
		{name: "missing", payload: ``, wantErr: `field "payload" is missing`},
		{name: "null", payload: `null`, wantErr: `field "payload" is missing`},
		{name: "no state", payload: `{}`, wantErr: `field "payload.state" is ""`},
		{name: "unknown state", payload: `{"state":"maybe"}`, wantErr: `"payload.state" is "maybe"`},
		{name: "unknown field", payload: `{"state":"done","extra":1}`, wantErr: `unknown field`},
		{name: "output not an object", payload: `{"state":"done","output":[1]}`, wantErr: `"payload.output" is not a JSON object`},
		{name: "output with failed", payload: `{"state":"failed","output":{"a":1}}`, wantErr: `only done carries an output`},
		{name: "not an object", payload: `"done"`, wantErr: `of a query answer`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, err := DecodeQueryAnswer([]byte(c.payload))
			if c.wantErr != "" {
				if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err = %v, want ErrInvalid containing %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if a.State != c.want || string(a.Output) != c.output {
				t.Fatalf("got %+v (output %s), want %s %s", a, a.Output, c.want, c.output)
			}
		})
	}
}

func TestQueryAnswerEncodeRoundTrip(t *testing.T) {
	for _, a := range []QueryAnswer{{State: QueryDone, Output: []byte(`{"x":1}`)}, {State: QueryClosed}, {State: QueryFailed}, {State: QueryCompensated}} {
		b, err := a.Encode()
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeQueryAnswer(b)
		if err != nil || got.State != a.State || string(got.Output) != string(a.Output) {
			t.Fatalf("%s: round trip gave %+v, %v", b, got, err)
		}
	}
	if _, err := (QueryAnswer{State: "nope"}).Encode(); err == nil {
		t.Fatal("Encode accepted an unknown state")
	}
	if _, err := (QueryAnswer{State: QueryClosed, Output: []byte(`{}`)}).Encode(); err == nil {
		t.Fatal("Encode accepted an output with closed")
	}
}

func TestQueryReplyValidation(t *testing.T) {
	base := Reply{MessageID: uuid.New(), InReplyTo: uuid.New(), SagaID: uuid.New(), Step: "charge-payment", Action: Query, Outcome: Success}
	ok := base
	ok.Payload = []byte(`{"state":"done","output":{"charge_id":"c1"}}`)
	b, err := EncodeReply(ok)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeReply(b)
	if err != nil || got.Action != Query {
		t.Fatalf("decode query reply: %+v, %v", got, err)
	}
	bad := base
	bad.Payload = []byte(`{"state":"unsure"}`)
	if _, err := EncodeReply(bad); err == nil || !strings.Contains(err.Error(), "payload.state") {
		t.Fatalf("encode of a bad query answer: %v", err)
	}
	none := base
	if _, err := EncodeReply(none); err == nil || !strings.Contains(err.Error(), `"payload" is missing`) {
		t.Fatalf("encode of a query success without payload: %v", err)
	}
	retry := base
	retry.Outcome, retry.Reason = Retry, "busy"
	if _, err := EncodeReply(retry); err != nil {
		t.Fatalf("a query answered retry needs no payload: %v", err)
	}
	cmd := Command{MessageID: uuid.New(), SagaID: uuid.New(), SagaType: "t", AggregateID: "a", Step: "s", Action: Query, Attempt: 1, ReplyTo: "saga.replies"}
	if _, err := EncodeCommand(cmd); err != nil {
		t.Fatalf("query command: %v", err)
	}
	cmd.Action = "peek"
	if _, err := EncodeCommand(cmd); err == nil || !strings.Contains(err.Error(), "want forward, compensate or query") {
		t.Fatalf("unknown action: %v", err)
	}
}
