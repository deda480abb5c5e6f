package orchestrator

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/internal/txhooks"
	"github.com/sagaflow/sagaflow/saga"
)

// observed is a reply applyReplies decided, for its metrics and logs.
type observed struct {
	in saga.Instance
	d  saga.Decision
}

// observeReplies counts and logs what applyReplies decided.
func (e *Engine) observeReplies(ctx context.Context, obs []observed) {
	for _, o := range obs {
		e.cfg.Metrics.observe(o.in.Type, saga.EventReply, o.in, o.d)
		if !o.d.Changed {
			e.logIgnored(ctx, &o.in, o.d)
		} else if o.d.Next.State != o.in.State {
			e.cfg.Logger.LogAttrs(ctx, slog.LevelDebug, "saga moved", slog.String("saga_id", o.in.ID.String()),
				slog.String("from", string(o.in.State)), slog.String("to", string(o.d.Next.State)), slog.String("step", o.d.Next.CurrentStep()), traceAttr(&o.d.Next))
		}
	}
}

// deferWrites hands the writes of a decided reply batch (the update of
// every changed saga, the journal, the commands) to the inbox, which sends
// them with the COMMIT of its batch transaction: one round trip for the
// writes and the commit. Their results are not read before that COMMIT, so
// the update checks its versions itself (updateCheckedSQL): a saga moved
// since it was loaded fails the statement with 40001, the server skips the
// rest and COMMIT, the batch transaction rolls back and the inbox retries
// the batch (which loads the sagas again). The replies are counted and
// logged once the commit succeeded.
func (e *Engine) deferWrites(ctx context.Context, dr *decidedReplies, pc *postCommit, hooks txhooks.Tx) error {
	b := &pgx.Batch{}
	if err := e.queueApplied(b, dr, pc, nil); err != nil {
		return err
	}
	if b.Len() > 0 {
		hooks.CommitWith(b)
	}
	hooks.AfterCommit(func() { e.observeReplies(ctx, dr.obs) })
	e.afterInbox(hooks, pc)
	return nil
}
