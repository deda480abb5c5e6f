package devbroker_test

import (
	"context"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/internal/devbroker"
)

// Responses counts one answer per request, whatever the client: two
// metadata requests over a connection already set up add exactly two.
func TestResponsesCountsOneAnswerPerRequest(t *testing.T) {
	t.Parallel()
	b, err := devbroker.Start(devbroker.Config{Partitions: 1, Topics: []string{"counted"}})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(b.Close)
	if n := b.Responses(); n != 0 {
		t.Fatalf("Responses before any client = %d, want 0", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A bare connection: it sends nothing unless asked (a client's
	// transport refreshes metadata in the background).
	conn, err := kafka.DialContext(ctx, "tcp", b.Addrs()[0])
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer conn.Close()
	lookup := func() {
		t.Helper()
		ps, err := conn.ReadPartitions("counted")
		if err != nil {
			t.Fatalf("ReadPartitions: %v", err)
		}
		if len(ps) != 1 || ps[0].Topic != "counted" {
			t.Fatalf("partitions %+v, want counted/0", ps)
		}
	}
	lookup() // the first request also negotiates versions
	first := b.Responses()
	if first < 1 {
		t.Fatalf("Responses after a metadata request = %d, want >= 1", first)
	}
	lookup()
	lookup()
	if got := b.Responses() - first; got != 2 {
		t.Fatalf("two more metadata requests added %d responses, want 2", got)
	}
}
