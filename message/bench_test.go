package message_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/message"
)

func benchCommand() message.Command {
	return message.Command{
		MessageID: uuid.New(), SagaID: uuid.New(), SagaType: "place-order", AggregateID: "order-1-000001",
		Step: "reserve-inventory", Action: message.Forward, Attempt: 1, ReplyTo: "saga.replies",
		SentAt: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Payload: json.RawMessage(`{"order_id":"order-1-000001","sku":"sku-apple","qty":2}`),
	}
}

func benchReply() message.Reply {
	return message.Reply{
		MessageID: uuid.New(), InReplyTo: uuid.New(), SagaID: uuid.New(), Step: "reserve-inventory",
		Action: message.Forward, Outcome: message.Success, Payload: json.RawMessage(`{"reservation_id":"res-1"}`),
	}
}

// BenchmarkEnvelope measures encoding and decoding (with validation) of the
// wire envelopes, once per command and once per reply on the hot path.
func BenchmarkEnvelope(b *testing.B) {
	c, r := benchCommand(), benchReply()
	cb, err := message.EncodeCommand(c)
	if err != nil {
		b.Fatal(err)
	}
	rb, err := message.EncodeReply(r)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("encode-command", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := message.EncodeCommand(c); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode-command", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(cb)))
		for b.Loop() {
			got, err := message.DecodeCommand(cb)
			if err != nil || got.MessageID != c.MessageID {
				b.Fatalf("decode = %v, %v", got.MessageID, err)
			}
		}
	})
	b.Run("encode-reply", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := message.EncodeReply(r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode-reply", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(rb)))
		for b.Loop() {
			got, err := message.DecodeReply(rb)
			if err != nil || got.MessageID != r.MessageID {
				b.Fatalf("decode = %v, %v", got.MessageID, err)
			}
		}
	})
}
