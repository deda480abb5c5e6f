package orchestrator

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/inbox"
	"github.com/sagaflow/sagaflow/saga"
)

// observed is a reply ApplyReplies decided, for its metrics and logs.
type observed struct {
	in saga.Instance
	d  saga.Decision
}

// observeReplies counts and logs what ApplyReplies decided.
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

// canDefer reports whether ctx is an inbox handler's that may defer its
// writes to the batch transaction's commit.
func canDefer(ctx context.Context) bool { return inbox.CanDefer(ctx) }

// deferWrites hands ApplyReplies' writes (the update of every changed
// saga, the journal, the commands) to the inbox, which sends them with the
// COMMIT of its batch transaction: one round trip for the writes and the
// commit. Their results are not read before that COMMIT, so the update
// checks its versions itself (updateCheckedSQL): a saga moved since it was
// loaded fails the statement with 40001, the server skips the rest and
// COMMIT, the batch transaction rolls back and the inbox retries the batch
// (which loads the sagas again). after runs once the commit succeeded.
func (e *Engine) deferWrites(ctx context.Context, upd []*saga.Instance, prev []int64, decided []saga.Decision, pc *postCommit, after func()) error {
	b := &pgx.Batch{}
	if len(upd) > 0 {
		queuePlanSettings(b, len(upd))
		if err := e.st.queueUpdateChecked(b, upd, prev); err != nil {
			return err
		}
	}
	if err := e.queueWrites(b, decided, pc); err != nil {
		return err
	}
	inbox.CommitWith(ctx, b) // false only for an empty batch: nothing to write
	inbox.AfterCommit(ctx, after)
	e.afterInbox(ctx, pc)
	return nil
}
