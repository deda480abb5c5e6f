// Package backoff computes the capped exponential delays between retries
// that the inbox, the relay, the saga engine's timer loop and the CLI's
// start-up share, and waits them out (Sleep).
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Exponential is the delay before retry attempt (1-based): initial doubled
// attempt-1 times, capped at max. An attempt below 1 counts as 1; it does
// not overflow however large attempt is.
func Exponential(initial, max time.Duration, attempt int) time.Duration {
	d := initial
	for i := 1; i < attempt && d > 0 && d < max; i++ {
		if d > max/2 {
			return max
		}
		d *= 2
	}
	return min(d, max)
}

// Jitter returns a random delay in [d/2, d]: d/2 plus up to d/2 more (d
// itself when d/2 is 0).
func Jitter(d time.Duration) time.Duration {
	if half := d / 2; half > 0 {
		return half + rand.N(half+1)
	}
	return d
}

// Sleep waits d, or until ctx is done: it reports whether it waited the
// whole of d.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
