package message_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/message"
)

func TestDecodeStartRecord(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, body, wantErr string
	}{
		{"good", `{"type":"place-order","idempotency_key":"k","aggregate_id":"a","data":{"x":1}}`, ""},
		{"not JSON", `{"type":`, "not a valid JSON body"},
		{"unknown field", `{"type":"t","idempotency_key":"k","aggregate_id":"a","data":{},"extra":1}`, `unknown field "extra"`},
		{"text after", `{"type":"t","idempotency_key":"k","aggregate_id":"a","data":{}} {}`, "text after"},
		{"no type", `{"idempotency_key":"k","aggregate_id":"a","data":{}}`, `"type" is missing`},
		{"no idempotency key", `{"type":"t","aggregate_id":"a","data":{}}`, `"idempotency_key" is missing`},
		{"no aggregate id", `{"type":"t","idempotency_key":"k","data":{}}`, `"aggregate_id" is missing`},
		{"data an array", `{"type":"t","idempotency_key":"k","aggregate_id":"a","data":[1]}`, `"data" must be a JSON object`},
		{"data null", `{"type":"t","idempotency_key":"k","aggregate_id":"a","data":null}`, `"data" must be a JSON object`},
		{"oversize", `{"type":"` + strings.Repeat("x", message.MaxPayloadBytes) + `"}`, "too large"},
	}
	for _, c := range cases {
		s, err := message.DecodeStartRecord([]byte(c.body))
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.wantErr == "" && (s.Type != "place-order" || s.IdempotencyKey != "k" || s.AggregateID != "a" || string(s.Data) != `{"x":1}`):
			t.Errorf("%s: decoded %+v", c.name, s)
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr) || !errors.Is(err, message.ErrInvalid)):
			t.Errorf("%s: error %v, want one wrapping ErrInvalid naming %q", c.name, err, c.wantErr)
		}
	}
}

func TestDecodeEventRecord(t *testing.T) {
	t.Parallel()
	id, other := uuid.New(), uuid.New()
	cases := []struct {
		name, key, body, wantErr string
	}{
		{"saga id in the key", id.String(), `{"name":"approval","event_id":"e1","data":{"ok":true}}`, ""},
		{"saga id in the body, any key", "trip-1", `{"saga_id":"` + id.String() + `","name":"approval","event_id":"e1","data":{"ok":true}}`, ""},
		{"both, the same", id.String(), `{"saga_id":"` + id.String() + `","name":"approval","event_id":"e1","data":{"ok":true}}`, ""},
		{"both, different", other.String(), `{"saga_id":"` + id.String() + `","name":"approval","event_id":"e1"}`, "but the record key is"},
		{"neither", "", `{"name":"approval","event_id":"e1"}`, "missing from both"},
		{"key not a saga id", "trip-1", `{"name":"approval","event_id":"e1"}`, "not a saga id"},
		{"no name", id.String(), `{"event_id":"e1"}`, `"name" is missing`},
		{"blank event id", id.String(), `{"name":"approval","event_id":"  "}`, `"event_id" is missing`},
		{"not JSON", id.String(), `nope`, "not a valid JSON body"},
		{"saga_id not a UUID", id.String(), `{"saga_id":"x","name":"approval","event_id":"e1"}`, "not a valid JSON body"},
	}
	for _, c := range cases {
		e, err := message.DecodeEventRecord([]byte(c.key), []byte(c.body))
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.wantErr == "" && (e.SagaID != id || e.Name != "approval" || e.EventID != "e1" || string(e.Data) != `{"ok":true}`):
			t.Errorf("%s: decoded %+v", c.name, e)
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr) || !errors.Is(err, message.ErrInvalid)):
			t.Errorf("%s: error %v, want one wrapping ErrInvalid naming %q", c.name, err, c.wantErr)
		}
	}
}

func TestDecodeSagaOutcome(t *testing.T) {
	t.Parallel()
	id := uuid.New()
	good := `{"saga_id":"` + id.String() + `","type":"t","aggregate_id":"a","idempotency_key":"k","kind":"finished","state":"completed","data":{},"at":"2026-01-02T03:04:05Z"}`
	if o, err := message.DecodeSagaOutcome([]byte(good)); err != nil || o.SagaID != id || o.State != "completed" {
		t.Fatalf("good outcome: %+v %v", o, err)
	}
	for body, want := range map[string]string{
		`{"type":"t","kind":"finished"}`:                 `"saga_id" is missing`,
		strings.Replace(good, `"finished"`, `"done"`, 1): "kind",
	} {
		if _, err := message.DecodeSagaOutcome([]byte(body)); err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, message.ErrInvalid) {
			t.Errorf("%s: error %v, want one naming %q", body, err, want)
		}
	}
}
