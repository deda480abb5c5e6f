package saga_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps"
)

// BenchmarkDecide measures the pure state machine on the place-order saga:
// the start, and a successful reply to the current step (the hot path of
// every reply).
func BenchmarkDecide(b *testing.B) {
	def, err := steps.PlaceOrder()
	if err != nil {
		b.Fatal(err)
	}
	data, _ := json.Marshal(steps.Order{OrderID: "o1", Customer: "c1", SKU: "sku-1", Qty: 1, AmountCents: 1000})
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	in := saga.NewInstance(def, uuid.New(), "o1", "k1", data, now)
	started, err := saga.Decide(def, in, saga.Event{Kind: saga.EventStart, At: now})
	if err != nil {
		b.Fatal(err)
	}
	if len(started.Send) != 1 {
		b.Fatalf("start sent %d commands, want 1", len(started.Send))
	}
	cmd := started.Send[0].Command
	reply := &message.Reply{MessageID: uuid.New(), InReplyTo: cmd.MessageID, SagaID: cmd.SagaID, Step: cmd.Step,
		Action: cmd.Action, Outcome: message.Success, Payload: json.RawMessage(`{"reservation_id":"r1"}`)}

	b.Run("start", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := saga.Decide(def, in, saga.Event{Kind: saga.EventStart, At: now}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("reply-success", func(b *testing.B) {
		b.ReportAllocs()
		at := now.Add(time.Millisecond)
		for b.Loop() {
			d, err := saga.Decide(def, started.Next, saga.Event{Kind: saga.EventReply, At: at, Reply: reply})
			if err != nil {
				b.Fatal(err)
			}
			if !d.Changed {
				b.Fatal("the reply did not move the saga")
			}
		}
	})
}
