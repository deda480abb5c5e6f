package message

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"
)

func TestAcceptedReplyValidation(t *testing.T) {
	base := Reply{MessageID: uuid.New(), InReplyTo: uuid.New(), SagaID: uuid.New(), Step: "charge", Action: Forward, Outcome: Accepted}
	cases := []struct {
		name    string
		edit    func(r *Reply)
		wantErr string
		want    AcceptedAnswer
	}{
		{name: "forward without payload", edit: func(*Reply) {}},
		{name: "forward cancellable", edit: func(r *Reply) { r.Payload = []byte(`{"cancellable":true}`) }, want: AcceptedAnswer{Cancellable: true}},
		{name: "compensate", edit: func(r *Reply) { r.Action = Compensate }, wantErr: `only a forward is answered accepted`},
		{name: "query", edit: func(r *Reply) { r.Action = Query }, wantErr: `only a forward is answered accepted`},
		{name: "unknown payload field", edit: func(r *Reply) { r.Payload = []byte(`{"later":1}`) }, wantErr: `of an accepted reply`},
		{name: "payload not an object", edit: func(r *Reply) { r.Payload = []byte(`[true]`) }, wantErr: `must be a JSON object`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := base
			tc.edit(&r)
			b, err := EncodeReply(r)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, ErrInvalid) {
					t.Fatalf("EncodeReply: %v, want an invalid error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("EncodeReply: %v", err)
			}
			got, err := DecodeReply(b)
			if err != nil {
				t.Fatalf("DecodeReply: %v", err)
			}
			if got.Outcome != Accepted {
				t.Fatalf("outcome %q, want accepted", got.Outcome)
			}
			a, err := DecodeAcceptedAnswer(got.Payload)
			if err != nil || a != tc.want {
				t.Fatalf("accepted answer %+v, %v; want %+v", a, err, tc.want)
			}
		})
	}
}

func TestAcceptedAnswerEncodeRoundTrip(t *testing.T) {
	for _, a := range []AcceptedAnswer{{}, {Cancellable: true}} {
		got, err := DecodeAcceptedAnswer(a.Encode())
		if err != nil || got != a {
			t.Fatalf("round trip of %+v: %+v, %v", a, got, err)
		}
	}
}
