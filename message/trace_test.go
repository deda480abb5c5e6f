package message_test

import (
	"testing"

	"github.com/sagaflow/sagaflow/message"
)

func TestValidTraceParent(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]bool{
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01":       true,
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00":       true,
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra": true, // a later version may add fields
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra": false,
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01":       false,
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01":       false,
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01":       false,
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01":       false,
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7":          false,
		"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01":       false,
		"": false,
	} {
		if got := message.ValidTraceParent(v); got != want {
			t.Errorf("ValidTraceParent(%q) = %v, want %v", v, got, want)
		}
	}
	if id := message.TraceID("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"); id != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("TraceID = %q", id)
	}
}

func TestEchoTraceCopiesOnlyAValidContext(t *testing.T) {
	t.Parallel()
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	rec := message.Record{Headers: []message.Header{{Key: "traceparent", Value: []byte(tp)}, {Key: "tracestate", Value: []byte("a=1")}}}
	h := message.EchoTrace(map[string]string{"message-id": "x"}, rec)
	if h["traceparent"] != tp || h["tracestate"] != "a=1" || h["message-id"] != "x" {
		t.Errorf("EchoTrace = %v", h)
	}
	bad := message.Record{Headers: []message.Header{{Key: "traceparent", Value: []byte("junk")}, {Key: "tracestate", Value: []byte("a=1")}}}
	if h := message.EchoTrace(map[string]string{}, bad); len(h) != 0 {
		t.Errorf("EchoTrace of an invalid traceparent = %v, want nothing", h)
	}
}
