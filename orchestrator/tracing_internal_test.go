package orchestrator

import (
	"errors"
	"strings"
	"testing"

	"github.com/sagaflow/sagaflow/message"
)

// TestStartHeadersBound: the largest trace context the door admits leaves
// a start's command headers well within what participants accept, and a
// start whose commands would be over the bound is refused as an input
// error (400) naming the headers, before its batch.
func TestStartHeadersBound(t *testing.T) {
	t.Parallel()
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ts := "a=" + strings.Repeat("b", 250) + ",c=" + strings.Repeat("d", 250) + ",e=1234" // 512 bytes
	if _, kept, drops := message.CheckTraceContext(tp, ts); kept != ts || len(drops) != 0 {
		t.Fatalf("the largest tracestate was not kept: %v", drops)
	}
	if err := startHeadersProblem(tp, ts, message.MaxSendHeadersBytes/4); err != nil {
		t.Fatalf("the largest admitted trace context needs over a quarter of the bound: %v", err)
	}
	err := startHeadersProblem(tp, ts, 512)
	var ie *InputError
	if !errors.As(err, &ie) || !errors.Is(err, ErrInvalidInput) || ie.Field != "headers" || !strings.Contains(err.Error(), "more than the 512") {
		t.Fatalf("over the bound: %v; want an InputError on headers naming the bound", err)
	}
}
