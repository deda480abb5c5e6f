package saga

import (
	"context"

	"github.com/sagaflow/sagaflow/inbox"
)

// committed runs the engine's work after the commit of ds: OnFinished for
// each saga they brought to a terminal state.
func (e *Engine) committed(ds ...Decision) {
	if e.cfg.OnFinished == nil {
		return
	}
	for i := range ds {
		if n := &ds[i].Next; finishedBy(&ds[i]) {
			e.cfg.OnFinished(n.ID, n.State)
		}
	}
}

// afterInboxCommit runs committed(ds) once the inbox transaction ctx
// belongs to commits (nothing when ctx is not an inbox handler's: the
// caller owns that transaction).
func (e *Engine) afterInboxCommit(ctx context.Context, ds ...Decision) {
	if e.cfg.OnFinished == nil {
		return
	}
	var fin []Decision
	for i := range ds {
		if finishedBy(&ds[i]) {
			fin = append(fin, ds[i])
		}
	}
	if len(fin) > 0 {
		inbox.AfterCommit(ctx, func() { e.committed(fin...) })
	}
}

// finishedBy reports whether d moved its saga into a terminal state (its
// finish time is the decision's own).
func finishedBy(d *Decision) bool {
	n := &d.Next
	return d.Changed && n.State.Terminal() && n.FinishedAt != nil && n.FinishedAt.Equal(n.UpdatedAt)
}
