package external

import (
	"sync"
	"time"
)

// circuit stops calling a provider that keeps failing: after `after`
// transient errors in a row it opens for cooldown; then one call is let
// through (half open): a success closes it, a failure opens it again.
type circuit struct {
	after    int
	cooldown time.Duration

	mu       sync.Mutex
	failures int
	openTill time.Time
	probing  bool
}

// allow says how many calls may start now (0: open), of want; probe is
// set when it is the half-open trial (give it back with unused if no call
// is made).
func (c *circuit) allow(now time.Time, want int) (n int, probe bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.failures < c.after:
		return want, false
	case now.Before(c.openTill) || c.probing:
		return 0, false
	}
	c.probing = true // half open: one call decides
	return min(want, 1), true
}

// result records a call's end: ok false for a transient error.
func (c *circuit) result(now time.Time, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.probing = false
	if ok {
		c.failures = 0
		return
	}
	c.failures++
	if c.failures >= c.after {
		c.openTill = now.Add(c.cooldown)
	}
}

// unused gives back a half-open slot allow granted that no call used.
func (c *circuit) unused() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.probing = false
}
