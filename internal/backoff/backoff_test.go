package backoff

import (
	"context"
	"math"
	"testing"
	"time"
)

func TestExponential(t *testing.T) {
	const ms = time.Millisecond
	for _, c := range []struct {
		initial, max time.Duration
		attempt      int
		want         time.Duration
	}{
		{100 * ms, 10 * time.Second, 1, 100 * ms},
		{100 * ms, 10 * time.Second, 0, 100 * ms},
		{100 * ms, 10 * time.Second, -3, 100 * ms},
		{100 * ms, 10 * time.Second, 2, 200 * ms},
		{100 * ms, 10 * time.Second, 4, 800 * ms},
		{100 * ms, 10 * time.Second, 7, 6400 * ms},
		{100 * ms, 10 * time.Second, 8, 10 * time.Second},
		{100 * ms, 10 * time.Second, math.MaxInt, 10 * time.Second},
		{200 * ms, 10 * time.Second, 6, 6400 * ms},
		{200 * ms, 10 * time.Second, 7, 10 * time.Second},
		{time.Second, time.Minute, 6, 32 * time.Second},
		{time.Second, time.Minute, 7, time.Minute},
		{2 * time.Minute, time.Minute, 1, time.Minute}, // initial above the cap
		{time.Duration(math.MaxInt64/2 + 1), time.Duration(math.MaxInt64), 2, time.Duration(math.MaxInt64)},
		{time.Hour, time.Duration(math.MaxInt64), 1000, time.Duration(math.MaxInt64)},
		{0, time.Second, 5, 0},
	} {
		if got := Exponential(c.initial, c.max, c.attempt); got != c.want {
			t.Errorf("Exponential(%s, %s, %d) = %s, want %s", c.initial, c.max, c.attempt, got, c.want)
		}
	}
}

func TestJitter(t *testing.T) {
	for _, d := range []time.Duration{0, 1, 2, 3, 101, time.Second, time.Duration(math.MaxInt64)} {
		for range 200 {
			got := Jitter(d)
			if d/2 == 0 {
				if got != d {
					t.Fatalf("Jitter(%d) = %d, want %d", d, got, d)
				}
				continue
			}
			if got < d/2 || got > d {
				t.Fatalf("Jitter(%d) = %d, want in [%d, %d]", d, got, d/2, d)
			}
		}
	}
}

// Sleep waits the whole delay when nothing cancels it, and returns false at
// once (well before its hour) when its context is done.
func TestSleep(t *testing.T) {
	t.Parallel()
	if !Sleep(context.Background(), time.Millisecond) {
		t.Fatal("Sleep of 1ms without a cancel reported it was cut short")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan bool, 1)
	go func() { done <- Sleep(ctx, time.Hour) }()
	cancel()
	select {
	case waited := <-done:
		if waited {
			t.Fatal("Sleep cut short by its context reported it waited")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Sleep did not return within 10s of its context's cancel")
	}
}
