package message_test

import (
	"encoding/json"
	"fmt"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/message"
)

// ExampleEncodeReply encodes the reply a participant sends after executing
// a command, with the headers its Kafka record carries.
func ExampleEncodeReply() {
	sagaID := uuid.MustParse("0b6d5c1e-6a43-4c59-9d3e-5a1f2f5ad001")
	r := message.Reply{
		MessageID: uuid.MustParse("7f1c2a9e-3b1d-4f3e-8f7a-2c9d4e5f6a02"),
		InReplyTo: uuid.MustParse("c3a1e4b2-9d8f-5e6a-b7c4-1d2e3f4a5b03"),
		SagaID:    sagaID,
		Step:      "reserve-inventory",
		Action:    message.Forward,
		Outcome:   message.Success,
		Payload:   json.RawMessage(`{"reservation_id":"res-42"}`),
	}
	b, err := message.EncodeReply(r)
	if err != nil {
		panic(err)
	}
	fmt.Println(string(b))

	h := message.Headers(r.MessageID, sagaID)
	fmt.Println(h[message.HeaderMessageID], h[message.HeaderContentType])

	// A reply without an outcome is refused, naming the field.
	r.Outcome = ""
	_, err = message.EncodeReply(r)
	fmt.Println(err)
	// Output:
	// {"message_id":"7f1c2a9e-3b1d-4f3e-8f7a-2c9d4e5f6a02","in_reply_to":"c3a1e4b2-9d8f-5e6a-b7c4-1d2e3f4a5b03","saga_id":"0b6d5c1e-6a43-4c59-9d3e-5a1f2f5ad001","step":"reserve-inventory","action":"forward","outcome":"success","payload":{"reservation_id":"res-42"}}
	// 7f1c2a9e-3b1d-4f3e-8f7a-2c9d4e5f6a02 application/json
	// encode reply for saga 0b6d5c1e-6a43-4c59-9d3e-5a1f2f5ad001 step "reserve-inventory": invalid message: field "outcome" is "", want success, failure, retry or accepted
}
