package participants

import (
	"cmp"
	"fmt"
	"log/slog"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/sagaflow/sagaflow/inbox"
	"github.com/sagaflow/sagaflow/internal/txhooks"
	"github.com/sagaflow/sagaflow/message"
)

// barrierKey names the forward of a step of a saga.
type barrierKey struct {
	saga uuid.UUID
	step string
}

// forwards executes a run of forwards, no two of the same step and saga,
// one handler call per step (see Handler for a batch that does not succeed
// as a whole). A forward whose barrier row is there already (a copy, or
// closed by its compensation or a query) is answered from the row, never
// executed; the outcomes of the others are recorded in one statement. A
// retry records nothing: the next copy runs afresh. See
// docs/DESIGN.md#the-barrier-protocol.
//
// Inside an inbox batch that may defer writes the handlers run first, as if
// no forward had a row, with no savepoint of their own, and the outcomes
// are inserted at the commit. Anything but every forward kept (a success
// or an accepted) makes the inbox undo the call and make it again with
// nothing deferred (txhooks.ErrRerun), and a row there already fails the
// insert, which runs the batch again so: then the rows are claimed
// (inserted pending) before the handlers run, each step's handler in a
// savepoint. Elsewhere they are claimed first.
func (c *call) forwards(run []*item) error {
	if len(run) == 0 {
		return nil
	}
	if err := c.flush(c.ctx); err != nil {
		return err
	}
	if hooks, ok := txhooks.Of(c.tx); ok && hooks.CanDefer() {
		all := make(map[barrierKey]bool, len(run))
		for _, it := range run {
			all[barrierKey{it.cmd.SagaID, it.cmd.Step}] = true
		}
		return c.runAndRecord(run, all, true)
	}
	claimed, err := c.claim(run)
	if err != nil {
		return err
	}
	for _, it := range run {
		if !claimed[barrierKey{it.cmd.SagaID, it.cmd.Step}] {
			if err := c.answerFromRow(it); err != nil {
				return err
			}
		}
	}
	return c.runAndRecord(run, claimed, false)
}

// claim inserts the barrier rows of the forwards of run, pending, in one
// statement, and returns those it inserted. A row another transaction
// inserted and has not committed makes it wait for that transaction.
func (c *call) claim(run []*item) (map[barrierKey]bool, error) {
	ids, steps := barrierArgs(run)
	claimed := make(map[barrierKey]bool, len(run))
	rows, err := c.tx.Query(c.ctx, c.p.barrier.claimForwards, ids, steps)
	if err == nil {
		var (
			id   pgtype.UUID
			step string
		)
		_, err = pgx.ForEachRow(rows, []any{&id, &step}, func() error {
			claimed[barrierKey{id.Bytes, step}] = true
			return nil
		})
	}
	if err != nil {
		return nil, fmt.Errorf("participant %q: claim %d forwards: %w", c.p.cfg.Name, len(run), err)
	}
	return claimed, nil
}

// answerFromRow sets the reply of forward it from its barrier row, there
// already: it is never executed.
func (c *call) answerFromRow(it *item) error {
	p, tx := c.p, c.tx
	rec, err := p.read(it.ctx, tx, it.cmd, message.Forward)
	if err != nil {
		return err
	}
	switch {
	case rec.closed:
		// Closed by its compensation (reason compensated) or by a query
		// (closed_by_query): never executed.
		p.log(it.ctx, it.cmd).InfoContext(it.ctx, "forward refused: the step's barrier is closed", slog.String("reason", rec.reason))
		rec = recorded{outcome: string(message.Failure), reason: cmp.Or(rec.reason, ReasonCompensated)}
	case rec.outcome == string(message.Accepted):
		// Still accepted: answered so again, and the final reply will
		// answer this copy if it is the latest.
		if _, err := tx.Exec(it.ctx, p.barrier.acceptCopy, it.cmd.SagaID, it.cmd.Step, it.cmd.MessageID, it.cmd.Attempt, it.cmd.ReplyTo); err != nil {
			return fmt.Errorf("%s: note the copy of an accepted forward: %w", p.opName(it.cmd), err)
		}
		p.debug(it.ctx, it.cmd, "duplicate forward answered accepted from the barrier")
		rec = recorded{outcome: string(message.Accepted), payload: acceptedPayload(rec.cancellable)}
	default:
		p.debug(it.ctx, it.cmd, "duplicate forward answered from the barrier", slog.String("outcome", rec.outcome))
	}
	it.dead = nil
	it.reply = replyTo(it.cmd, rec)
	return nil
}

// runAndRecord runs the forwards of run that are in set, one handler call
// per step, and records their outcomes: with fresh, no row of theirs is
// there yet as far as this transaction knows (see forwards); otherwise
// each has a pending row this transaction claimed.
func (c *call) runAndRecord(run []*item, set map[barrierKey]bool, fresh bool) error {
	groups := groupByStep(run, set)
	results := map[*item]Result{}
	for _, g := range groups {
		if err := c.runForwards(g, results, fresh); err != nil {
			return err
		}
	}
	return c.recordForwards(groups, results, fresh)
}

// groupByStep returns the forwards of run that are in set, by step, in
// order of first appearance.
func groupByStep(run []*item, set map[barrierKey]bool) [][]*item {
	var groups [][]*item
	byStep := map[string]int{}
	for _, it := range run {
		if !set[barrierKey{it.cmd.SagaID, it.cmd.Step}] {
			continue
		}
		g, ok := byStep[it.cmd.Step]
		if !ok {
			g = len(groups)
			byStep[it.cmd.Step] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], it)
	}
	return groups
}

// runForwards runs the forward handler of the step of g for all of g and
// sets each command's result, or its dead. With fresh it runs once, in the
// call's transaction, and anything but every result kept fails the call
// with txhooks.ErrRerun (see forwards). Otherwise it runs in a savepoint,
// and again for each command alone unless every result is kept.
func (c *call) runForwards(g []*item, results map[*item]Result, fresh bool) error {
	p, ctx, tx := c.p, c.ctx, c.tx
	h := g[0].h.forward
	if fresh {
		cmds := make([]message.Command, len(g))
		for i, it := range g {
			cmds[i] = it.cmd
		}
		rs, herr := callHandler(ctx, tx, h, cmds)
		switch {
		case herr != nil:
			return fmt.Errorf("participant %q: step %q: handler (run ahead, taken again with the barrier claimed): %v: %w", p.cfg.Name, cmds[0].Step, herr, txhooks.ErrRerun)
		case len(rs) != len(cmds) || !allKept(rs):
			return fmt.Errorf("participant %q: step %q: %d results for %d commands, not all kept (taken again with the barrier claimed): %w", p.cfg.Name, cmds[0].Step, len(rs), len(cmds), txhooks.ErrRerun)
		}
		for i, it := range g {
			results[it] = rs[i]
		}
		return nil
	}
	if len(g) > 1 {
		cmds := make([]message.Command, len(g))
		for i, it := range g {
			cmds[i] = it.cmd
		}
		sp, err := tx.Begin(ctx)
		if err != nil {
			return fmt.Errorf("participant %q: step %q: handler savepoint: %w", p.cfg.Name, cmds[0].Step, err)
		}
		rs, herr := callHandler(ctx, sp, h, cmds)
		if herr == nil && len(rs) == len(cmds) && allKept(rs) {
			if err := sp.Commit(ctx); err != nil {
				return fmt.Errorf("participant %q: step %q: release handler savepoint: %w", p.cfg.Name, cmds[0].Step, err)
			}
			for i, it := range g {
				results[it] = rs[i]
			}
			return nil
		}
		if err := sp.Rollback(ctx); err != nil {
			return fmt.Errorf("participant %q: step %q: roll back handler savepoint: %w", p.cfg.Name, cmds[0].Step, err)
		}
		p.cfg.Logger.DebugContext(ctx, "participant: a batch did not succeed as a whole; running its commands alone",
			slog.String("participant", p.cfg.Name), slog.String("step", cmds[0].Step), slog.Int("commands", len(cmds)), slog.Int("results", len(rs)), slog.Any("error", herr))
	}
	for _, it := range g {
		res, _, err := p.runHandler(it.ctx, tx, it.cmd, h)
		switch {
		case err != nil && inbox.IsPermanent(err):
			it.dead = err
		case err != nil:
			return err
		default:
			results[it] = res
		}
	}
	return nil
}

// recordForwards records the outcomes of the forwards of groups and sets
// their replies: a Success, a Failure or an Accepted is recorded; a retry or
// a dead-lettered command leaves no row. With fresh the rows are inserted
// (see forwards; every forward was kept); otherwise the claimed rows are
// updated, or removed.
func (c *call) recordForwards(groups [][]*item, results map[*item]Result, fresh bool) error {
	p := c.p
	var rec, rel, accepted []*item
	var reasons, payloads []*string
	var outcomes []string
	withPayload := false
	for _, g := range groups {
		for _, it := range g {
			res, ok := results[it]
			switch {
			case !ok: // dead
				rel = append(rel, it)
				continue
			case res.Outcome == message.Retry:
				p.debug(it.ctx, it.cmd, "forward answered retry", slog.String("reason", res.Reason))
				it.reply = replyTo(it.cmd, recorded{outcome: string(message.Retry), reason: res.Reason})
				rel = append(rel, it)
				continue
			case res.Outcome == message.Accepted:
				rec, outcomes, reasons, payloads = append(rec, it), append(outcomes, string(res.Outcome)), append(reasons, new(string)), append(payloads, nil)
				accepted = append(accepted, it)
				it.reply = replyTo(it.cmd, recorded{outcome: string(message.Accepted), payload: acceptedPayload(res.cancellable())})
				p.debug(it.ctx, it.cmd, "forward accepted", slog.Bool("cancellable", res.cancellable()))
				continue
			case res.Outcome != message.Success && res.Outcome != message.Failure:
				return fmt.Errorf("%s: handler returned outcome %q, want success, failure, retry or accepted", p.opName(it.cmd), res.Outcome)
			}
			var pl *string
			if res.Outcome == message.Success {
				var err error
				if pl, err = encodePayload(res.Payload); err != nil {
					return fmt.Errorf("%s: %w", p.opName(it.cmd), err)
				}
			}
			reason := message.Truncate(res.Reason, message.MaxReasonBytesDefault)
			withPayload = withPayload || pl != nil
			rec, outcomes, reasons, payloads = append(rec, it), append(outcomes, string(res.Outcome)), append(reasons, &reason), append(payloads, pl)
			it.reply = replyTo(it.cmd, recorded{outcome: string(res.Outcome), reason: reason})
			p.debug(it.ctx, it.cmd, "forward executed", slog.String("outcome", string(res.Outcome)), slog.String("reason", reason))
		}
	}
	c.release(rel)
	if len(rec) > 0 {
		if err := c.record(rec, outcomes, reasons, payloads, withPayload, fresh); err != nil {
			return err
		}
	}
	for _, it := range accepted {
		res := results[it]
		c.tail.Queue(p.barrier.acceptMeta, it.cmd.SagaID, it.cmd.Step, it.cmd.MessageID, it.cmd.Attempt, it.cmd.ReplyTo, res.cancellable())
	}
	return nil
}

// release removes the pending rows of the forwards of rel (answered
// retry, or dead-lettered): nothing is recorded, the next copy runs
// afresh.
func (c *call) release(rel []*item) {
	if len(rel) == 0 {
		return
	}
	ids, steps := barrierArgs(rel)
	c.tail.Queue(c.p.barrier.releaseForwards, ids, steps)
}

// record writes the outcomes of the forwards of rec: inserted (fresh) or
// over their claimed rows. Without payloads the statement goes in the
// tail; with them it is sent now, and each reply carries its payload as
// Postgres stored it (jsonb's key order: the bytes the answer to a later
// copy carries).
func (c *call) record(rec []*item, outcomes []string, reasons, payloads []*string, withPayload, fresh bool) error {
	p, ctx, tx := c.p, c.ctx, c.tx
	ids, steps := barrierArgs(rec)
	if !withPayload {
		sql := p.barrier.recordForwards
		if fresh {
			sql = p.barrier.insertForwards
		}
		c.tail.Queue(sql, ids, steps, outcomes, reasons, payloads)
		return nil
	}
	if err := c.flush(ctx); err != nil {
		return err
	}
	sql := p.barrier.recordForwards + returningPayload
	if fresh {
		// A row there already is not overwritten: the batch runs again
		// with the rows claimed first.
		sql = p.barrier.insertForwards + "\nON CONFLICT DO NOTHING" + returningPayload
	}
	rows, err := tx.Query(ctx, sql, ids, steps, outcomes, reasons, payloads)
	if err != nil {
		return fmt.Errorf("participant %q: record %d forward outcomes: %w", p.cfg.Name, len(rec), err)
	}
	stored := make(map[barrierKey]*string, len(rec))
	var (
		id   pgtype.UUID
		step string
		pl   *string
	)
	if _, err := pgx.ForEachRow(rows, []any{&id, &step, &pl}, func() error {
		var v *string
		if pl != nil {
			s := *pl
			v = &s
		}
		stored[barrierKey{id.Bytes, step}] = v
		return nil
	}); err != nil {
		return fmt.Errorf("participant %q: record %d forward outcomes: %w", p.cfg.Name, len(rec), err)
	}
	if len(stored) != len(rec) {
		if fresh {
			return fmt.Errorf("participant %q: %d of %d forwards had a barrier row already: %w", p.cfg.Name, len(rec)-len(stored), len(rec), txhooks.ErrRerun)
		}
		return fmt.Errorf("participant %q: recorded %d of %d forward outcomes", p.cfg.Name, len(stored), len(rec))
	}
	for _, it := range rec {
		if s := stored[barrierKey{it.cmd.SagaID, it.cmd.Step}]; s != nil && *s != "null" {
			it.reply.Payload = []byte(*s)
		}
	}
	return nil
}

// returningPayload makes recordForwards return what it stored.
const returningPayload = "\nRETURNING b.saga_id, b.step, b.payload::text"

func barrierArgs(items []*item) ([]pgtype.UUID, []string) {
	ids, steps := make([]pgtype.UUID, len(items)), make([]string, len(items))
	for i, it := range items {
		ids[i], steps[i] = pgtype.UUID{Bytes: it.cmd.SagaID, Valid: true}, it.cmd.Step
	}
	return ids, steps
}

// acceptedPayload is the payload of an accepted reply.
func acceptedPayload(cancellable bool) *string {
	b := message.AcceptedAnswer{Cancellable: cancellable}.Encode()
	if b == nil {
		return nil
	}
	s := string(b)
	return &s
}

// allKept reports whether every result keeps its handler's writes: a
// Success or an Accepted.
func allKept(rs []Result) bool {
	for _, r := range rs {
		if r.Outcome != message.Success && r.Outcome != message.Accepted {
			return false
		}
	}
	return true
}
