package orchestrator

import (
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/saga"
)

// sagaCache keeps, for the sagas in flight this engine wrote last, each
// saga as that committed write left its row: a reply batch whose sagas are
// all kept is decided without loading them, and its writes go with the
// inbox's COMMIT, so the whole batch is one round trip to Postgres.
//
// A kept saga is only a guess at the row. What makes it safe is the
// version check of the update that goes with the COMMIT
// (updateCheckedSQL): a saga another replica, a timer or an operator moved
// since fails the statement (40001), the batch rolls back and runs again
// loading its sagas. A decision that writes no update (a reply ignored, or
// refused for what it answers) has nothing to check, so a batch with one
// is decided again from loaded rows (see applyReplies). Sagas are taken
// out of the cache when a batch uses them and put back only after its
// commit, so a batch that fails never leaves behind what it guessed.
type sagaCache struct {
	mu  sync.Mutex
	max int
	m   map[uuid.UUID]saga.Instance
}

// SagaCacheDefault is the default Advanced.SagaCache.
const SagaCacheDefault = 10000

// newSagaCache returns a cache of at most max sagas; nil (no cache) when
// max is not positive.
func newSagaCache(max int) *sagaCache {
	if max <= 0 {
		return nil
	}
	return &sagaCache{max: max, m: make(map[uuid.UUID]saga.Instance, min(max, 1024))}
}

// take removes and returns the sagas ids if every one of them is kept;
// otherwise it takes none and reports false.
func (c *sagaCache) take(ids []uuid.UUID) (map[uuid.UUID]saga.Instance, bool) {
	if c == nil || len(ids) == 0 {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		if _, ok := c.m[id]; !ok {
			return nil, false
		}
	}
	out := make(map[uuid.UUID]saga.Instance, len(ids))
	for _, id := range ids {
		out[id] = c.m[id]
		delete(c.m, id)
	}
	return out, true
}

// keep records the sagas ds wrote, after their commit: each one changed is
// kept as its row now is, unless it is finished (no reply is expected; a
// late one loads it) or a newer version is kept already.
func (c *sagaCache) keep(ds []saga.Decision) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range ds {
		d := &ds[i]
		if !d.Changed {
			continue
		}
		id := d.Next.ID
		old, had := c.m[id]
		if had && old.Version >= d.Next.Version {
			continue
		}
		if d.Next.State.Terminal() {
			delete(c.m, id)
			continue
		}
		if !had && len(c.m) >= c.max {
			for k := range c.m { // any one: the map's order is random
				delete(c.m, k)
				break
			}
		}
		c.m[id] = asStored(d.Next)
	}
}

// asStored is in as loading its row gives it back (scanInstance): times at
// the column's microsecond, the cursor found from the current step's name,
// its own step list.
func asStored(in saga.Instance) saga.Instance {
	out := in
	out.Steps = append([]saga.StepState(nil), in.Steps...)
	out.CreatedAt = in.CreatedAt.Truncate(time.Microsecond)
	out.UpdatedAt = in.UpdatedAt.Truncate(time.Microsecond)
	out.DeadlineAt = truncated(in.DeadlineAt)
	out.FinishedAt = truncated(in.FinishedAt)
	out.Cursor = cursorOf(out.Steps, currentStepName(&in))
	return out
}

func truncated(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	v := t.Truncate(time.Microsecond)
	return &v
}
