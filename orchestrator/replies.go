package orchestrator

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/internal/txhooks"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/saga"
)

// ApplyReply applies a participant's reply inside tx, the caller's
// transaction: ApplyReplies of one, whose refusal is the error. A reply
// for an unknown saga or step returns an error wrapping ErrStrayReply
// (and message.ErrInvalid), so an inbox sends it to the dead-letter topic.
func (e *Engine) ApplyReply(ctx context.Context, tx pgx.Tx, r message.Reply) error {
	refused, err := e.ApplyReplies(ctx, tx, []message.Reply{r})
	if err != nil {
		return err
	}
	return refused[0]
}

// ApplyReplies applies a batch of replies inside tx, the caller's
// transaction, with a constant number of statements: one load of every
// saga concerned, Decide per reply in order (replies to the same saga see
// each other's effect), one version-checked update of every changed saga,
// one journal insert and one outbox insert. A saga moved by someone else
// since it was loaded is loaded again and the batch decided again, inside
// the call. refused[k] is rs[k]'s error when it was left out for its
// content: a stray reply (for an unknown saga or step, or answering
// nothing the saga sent: wrapping saga.ErrStrayReply), one signed by
// another than its step's participant (ErrReplySigner) or one Decide
// refuses as invalid (wrapping message.ErrInvalid); the rest of the batch
// is applied as one. Any error means tx must be rolled back.
func (e *Engine) ApplyReplies(ctx context.Context, tx pgx.Tx, rs []message.Reply) (refused []error, err error) {
	refused, _, err = e.applyReplies(ctx, tx, rs, nil, nil)
	return refused, err
}

// keptHold reports whether a batch decided from kept sagas may stand: every
// reply was taken and changed its saga, so every saga it was decided from
// is written behind its version check.
func keptHold(dr *decidedReplies, refused []error) bool {
	for _, err := range refused {
		if err != nil {
			return false
		}
	}
	for i := range dr.decided {
		if !dr.decided[i].Changed {
			return false
		}
	}
	return true
}

// unknownSaga is the error of a reply for a saga that does not exist: a
// stray reply (it answers nothing this orchestrator sent).
func unknownSaga(r *message.Reply) error {
	return fmt.Errorf("%w: reply %s: unknown saga %s", saga.ErrStrayReply, r.MessageID, r.SagaID)
}

// decidedReplies is a reply batch decided against the sagas as loaded:
// the changed sagas (upd, each with the version it was loaded at) and the
// decisions to journal and send.
type decidedReplies struct {
	upd     []*saga.Instance
	prev    []prior
	decided []saga.Decision
	obs     []observed
}

// decideReplies decides rs in order against loaded (ids are the sagas
// concerned, in order of first mention). A reply refused by its content
// gets its error in refused and is left out; any other error ends the
// batch.
func (e *Engine) decideReplies(rs []message.Reply, ids []uuid.UUID, loaded map[uuid.UUID]saga.Instance, refused []error) (decidedReplies, error) {
	var out decidedReplies
	prev := make(map[uuid.UUID]prior, len(loaded))
	next := make(map[uuid.UUID]saga.Instance, len(loaded))
	changed := make(map[uuid.UUID]bool, len(loaded))
	out.obs = make([]observed, 0, len(rs))
	for i := range rs {
		r := &rs[i]
		in, ok := next[r.SagaID]
		if !ok {
			if in, ok = loaded[r.SagaID]; !ok {
				refused[i] = unknownSaga(r)
				continue
			}
			prev[r.SagaID] = priorOf(&in)
		}
		def, ok := e.reg.Lookup(in.Type, in.DefVersion)
		if !ok {
			return out, fmt.Errorf("saga %s: type %q version %d: %w", r.SagaID, in.Type, in.DefVersion, saga.ErrUnknownType)
		}
		if err := e.checkSigner(def, r); err != nil {
			refused[i] = err
			continue
		}
		d, err := saga.Decide(def, in, saga.Event{Kind: saga.EventReply, At: e.cfg.Now(), Reply: r})
		switch {
		case errors.Is(err, saga.ErrUnknownStep):
			refused[i] = fmt.Errorf("%w: %w", saga.ErrStrayReply, err)
			continue
		case errors.Is(err, message.ErrInvalid):
			refused[i] = err
			continue
		case err != nil:
			return out, err
		}
		out.decided = append(out.decided, d)
		out.obs = append(out.obs, observed{in: in, d: d})
		if !d.Changed {
			next[r.SagaID] = in
			continue
		}
		next[r.SagaID] = d.Next
		changed[r.SagaID] = true
	}
	for _, id := range ids {
		if changed[id] {
			n := next[id]
			out.upd = append(out.upd, &n)
			out.prev = append(out.prev, prev[id])
		}
	}
	return out, nil
}

// queueApplied adds to b the writes of a decided reply batch: the plan
// settings and the version-checked update of the changed sagas, the
// journal and the commands. With done nil the update fails (40001) unless
// every saga was updated, for a batch whose results are read only after
// the COMMIT sent with it; otherwise a savepoint comes first, which undoes
// the batch's writes after a version conflict, and done receives the ids
// updated.
func (e *Engine) queueApplied(b *pgx.Batch, dr *decidedReplies, pc *postCommit, done map[uuid.UUID]bool) error {
	if len(dr.upd) > 0 {
		queuePlanSettings(b, len(dr.upd))
		var err error
		if done == nil {
			err = e.st.queueUpdateChecked(b, dr.upd, dr.prev)
		} else {
			b.Queue("SAVEPOINT " + applySavepoint)
			err = e.st.queueUpdateMany(b, dr.upd, dr.prev, done)
		}
		if err != nil {
			return err
		}
	}
	return e.queueWrites(b, dr.decided, pc)
}

// applyReplies applies rs in tx: the one path of every reply. The sagas
// come from pre where it loaded them (the inbox's prefetch), the others
// are loaded here. With hooks (the service's reply handler inside an
// inbox batch transaction) the commands are dispatched and OnFinished
// called after the inbox commits, and the writes are deferred to its
// COMMIT where the inbox allows it. retried is how many times the batch was
// decided again after a version conflict, each time with the sagas that
// had moved loaded again.
func (e *Engine) applyReplies(ctx context.Context, tx pgx.Tx, rs []message.Reply, pre *preloaded, hooks txhooks.Tx) (refused []error, retried int, err error) {
	refused = make([]error, len(rs))
	if len(rs) == 0 {
		return refused, 0, nil
	}
	ids := make([]uuid.UUID, 0, len(rs))
	seen := make(map[uuid.UUID]bool, len(rs))
	for i := range rs {
		if !seen[rs[i].SagaID] {
			seen[rs[i].SagaID] = true
			ids = append(ids, rs[i].SagaID)
		}
	}
	if pre != nil && pre.kept && (hooks == nil || !hooks.CanDefer()) {
		// Kept sagas are a guess only the deferred update checks.
		e.cfg.Metrics.countKept("discarded", len(pre.rows))
		pre = nil
	}
	loaded, err := pre.take(ctx, e.st, tx, ids)
	if err != nil {
		return nil, 0, err
	}
	for ; ; retried++ {
		dr, err := e.decideReplies(rs, ids, loaded, refused)
		if err != nil {
			return nil, retried, err
		}
		if pre != nil && pre.kept && !keptHold(&dr, refused) {
			// A decision without an update (a reply ignored or refused)
			// has no version check to guard the kept saga it came from:
			// the batch runs again, its sagas loaded.
			return nil, retried, fmt.Errorf("apply %d replies: a reply changed no kept saga: %w", len(rs), txhooks.ErrRerun)
		}
		var pc *postCommit
		if hooks != nil {
			pc = &postCommit{}
			if hooks.CanDefer() {
				return refused, retried, e.deferWrites(ctx, &dr, pc, hooks)
			}
		}
		// One round trip: a savepoint, the version-checked update of every
		// changed saga, the journal and the commands.
		b := &pgx.Batch{}
		done := make(map[uuid.UUID]bool, len(dr.upd))
		if err := e.queueApplied(b, &dr, pc, done); err != nil {
			return nil, retried, err
		}
		if err := sendBatch(ctx, tx, b, fmt.Sprintf("apply %d replies", len(rs))); err != nil {
			return nil, retried, err
		}
		if len(done) == len(dr.upd) {
			e.observeReplies(ctx, dr.obs)
			e.afterInbox(hooks, pc)
			return refused, retried, nil
		}
		// Someone else moved some sagas since they were loaded: undo the
		// batch's writes, load those sagas again and decide again.
		if e.cfg.Metrics != nil {
			e.cfg.Metrics.conflicts.Add(float64(len(dr.upd) - len(done)))
		}
		if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT "+applySavepoint); err != nil {
			return nil, retried, fmt.Errorf("apply %d replies: roll back after a version conflict: %w", len(rs), err)
		}
		if retried >= maxVersionConflicts {
			return nil, retried, fmt.Errorf("apply %d replies: gave up after %d version conflicts", len(rs), retried+1)
		}
		var moved []uuid.UUID
		for _, in := range dr.upd {
			if !done[in.ID] {
				moved = append(moved, in.ID)
				delete(loaded, in.ID)
			}
		}
		again, err := e.st.loadMany(ctx, tx, moved)
		if err != nil {
			return nil, retried, err
		}
		for id, in := range again {
			loaded[id] = in
		}
		clear(refused)
	}
}
