package orchestrator

import (
	"time"

	"github.com/sagaflow/sagaflow/internal/outboxdb"
	"github.com/sagaflow/sagaflow/internal/txhooks"
	"github.com/sagaflow/sagaflow/saga"
)

// Dispatcher publishes outbox rows right after the commit of the
// transaction that enqueued them (relay.Relay implements it).
type Dispatcher interface {
	// Send hands over rows whose transaction committed; it must not block.
	Send(*outboxdb.Pending)
	// Lease is how long the rows are left to the dispatcher before the
	// relay may publish them.
	Lease() time.Duration
	// Active reports whether it is running: an engine whose dispatcher is
	// not (a process that only reads, or one shutting down) leaves its
	// commands to the relay at once.
	Active() bool
}

// postCommit is what a transaction of the engine's must do once it
// commits: dispatch its commands, report the sagas it finished.
type postCommit struct {
	pend []*outboxdb.Pending
	ds   []saga.Decision
}

// afterInbox has pc flushed once the inbox transaction commits.
func (e *Engine) afterInbox(hooks txhooks.Tx, pc *postCommit) {
	if hooks == nil || pc == nil || (len(pc.pend) == 0 && e.cfg.OnFinished == nil && e.cache == nil) {
		return
	}
	hooks.AfterCommit(func() { e.flush(pc) })
}

// flush runs pc after the commit: the commands to the dispatcher, the ends
// to OnFinished.
func (e *Engine) flush(pc *postCommit) {
	if pc == nil {
		return
	}
	// Kept before the commands leave: their replies may come back at once.
	e.cache.keep(pc.ds)
	if e.cfg.Dispatcher != nil {
		for _, p := range pc.pend {
			e.cfg.Dispatcher.Send(p)
		}
	}
	e.committed(pc.ds...)
}

// committed calls OnFinished for each saga ds brought to a terminal state.
func (e *Engine) committed(ds ...saga.Decision) {
	if e.cfg.OnFinished == nil {
		return
	}
	for i := range ds {
		if n := &ds[i].Next; finishedBy(&ds[i]) {
			e.cfg.OnFinished(n.ID, n.State)
		}
	}
}

// finishedBy reports whether d moved its saga into a terminal state (its
// finish time is the decision's own).
func finishedBy(d *saga.Decision) bool {
	n := &d.Next
	return d.Changed && n.State.Terminal() && n.FinishedAt != nil && n.FinishedAt.Equal(n.UpdatedAt)
}
