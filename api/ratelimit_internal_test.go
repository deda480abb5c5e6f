package api

import (
	"fmt"
	"testing"
	"time"
)

// TestFailureLimiterBounded: the table of clients never holds more than
// its cap, however many addresses send wrong tokens, and a client's budget
// comes back with time.
func TestFailureLimiterBounded(t *testing.T) {
	t.Parallel()
	l := newFailureLimiter(3, time.Second, 100)
	now := time.Unix(1_700_000_000, 0)
	for i := range 10_000 {
		l.fail(fmt.Sprintf("198.51.%d.%d", i/256, i%256), now.Add(time.Duration(i)*time.Millisecond))
		if n := l.size(); n > 100 {
			t.Fatalf("after %d clients the table holds %d, want at most 100", i+1, n)
		}
	}
	const c = "203.0.113.1"
	for range 3 {
		if w := l.wait(c, now); w != 0 {
			t.Fatalf("wait with budget left = %s", w)
		}
		l.fail(c, now)
	}
	if w := l.wait(c, now); w != time.Second {
		t.Fatalf("wait with no budget = %s, want 1s", w)
	}
	if w := l.wait(c, now.Add(400*time.Millisecond)); w != 600*time.Millisecond {
		t.Fatalf("wait 400ms later = %s, want 600ms", w)
	}
	if w := l.wait(c, now.Add(time.Second)); w != 0 {
		t.Fatalf("wait a refill later = %s, want 0", w)
	}
	// The newest client survives a full table.
	if l.fail("203.0.113.2", now.Add(time.Hour)); l.wait("203.0.113.2", now.Add(time.Hour)) != 0 || l.size() > 100 {
		t.Fatalf("a new client in a full table: size %d", l.size())
	}
}
