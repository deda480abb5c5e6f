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

// forwards executes a run of forwards, no two of the same step and saga:
// it claims their barrier rows in one statement; a forward whose row was
// there already (a copy, or closed by its compensation or a query) is
// answered from the row, never executed; the claimed ones run, one
// handler call per step (see Handler for a batch that does not succeed as
// a whole), and their outcomes are recorded in one statement. A retry
// records nothing: its row is removed, and the next copy runs afresh.
// See docs/DESIGN.md#the-barrier-protocol.
func (c *call) forwards(run []*item) error {
	if len(run) == 0 {
		return nil
	}
	p, ctx, tx := c.p, c.ctx, c.tx
	if err := c.flush(ctx); err != nil {
		return err
	}
	ids, steps := barrierArgs(run)
	claimed := map[barrierKey]bool{}
	answered := false // the claim's rows were read
	readClaims := func(rows pgx.Rows) error {
		answered = true
		var (
			id   pgtype.UUID
			step string
		)
		_, err := pgx.ForEachRow(rows, []any{&id, &step}, func() error {
			claimed[barrierKey{id.Bytes, step}] = true
			return nil
		})
		return err
	}
	// Inside an inbox batch that may defer writes, the claim goes with the
	// handlers' first statement, in one round trip: the handlers run
	// under a savepoint as if every forward were claimed, and if one was
	// not (a copy, or a step closed by its compensation or a query), what
	// they wrote is rolled back and the claimed ones run again.
	hooks, inInbox := txhooks.Of(tx)
	if inInbox && hooks.CanDefer() {
		claim := &pgx.Batch{}
		claim.Queue(p.barrier.claimForwards, ids, steps).Query(readClaims)
		if hooks.CommitWith(claim) {
			ok, err := c.speculate(run, hooks, claimed, &answered)
			if err != nil || ok {
				return err
			}
			return c.runClaimed(run, claimed)
		}
	}
	rows, err := tx.Query(ctx, p.barrier.claimForwards, ids, steps)
	if err == nil {
		err = readClaims(rows)
	}
	if err != nil {
		return fmt.Errorf("participant %q: claim %d forwards: %w", p.cfg.Name, len(run), err)
	}
	return c.runClaimed(run, claimed)
}

// speculate runs the handlers of run, grouped by step, in a savepoint,
// with their claim still deferred, and records their outcomes if every
// forward was claimed (ok). Otherwise it rolls the savepoint back and
// leaves run as it was.
func (c *call) speculate(run []*item, hooks txhooks.Tx, claimed map[barrierKey]bool, answered *bool) (ok bool, err error) {
	p, ctx, tx := c.p, c.ctx, c.tx
	sp, err := tx.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("participant %q: savepoint: %w", p.cfg.Name, err)
	}
	c.tx = sp
	defer func() { c.tx = tx }()
	all := map[barrierKey]bool{}
	for _, it := range run {
		all[barrierKey{it.cmd.SagaID, it.cmd.Step}] = true
	}
	groups := groupByStep(run, all)
	results := map[*item]Result{}
	for _, g := range groups {
		if err := c.runForwards(g, results); err != nil {
			return false, err
		}
	}
	// The claim's answer came with the handlers' first statement; a
	// handler that sent none leaves it to be sent now.
	if !*answered {
		if err := hooks.Flush(ctx); err != nil {
			return false, err
		}
	}
	if len(claimed) == len(all) {
		if err := sp.Commit(ctx); err != nil {
			return false, fmt.Errorf("participant %q: release savepoint: %w", p.cfg.Name, err)
		}
		c.tx = tx
		return true, c.recordForwards(groups, results)
	}
	if err := sp.Rollback(ctx); err != nil {
		return false, fmt.Errorf("participant %q: roll back savepoint: %w", p.cfg.Name, err)
	}
	for _, it := range run {
		it.dead = nil
	}
	return false, nil
}

// runClaimed answers the forwards of run that were not claimed from their
// barrier rows and runs the claimed ones, one handler call per step.
func (c *call) runClaimed(run []*item, claimed map[barrierKey]bool) error {
	p, tx := c.p, c.tx
	for _, it := range run {
		if claimed[barrierKey{it.cmd.SagaID, it.cmd.Step}] {
			continue
		}
		rec, err := p.read(it.ctx, tx, it.cmd, message.Forward)
		if err != nil {
			return err
		}
		switch {
		case rec.closed:
			// Closed by its compensation (reason compensated) or by a
			// query (closed_by_query): never executed.
			p.log(it.ctx, it.cmd).InfoContext(it.ctx, "forward refused: the step's barrier is closed", slog.String("reason", rec.reason))
			rec = recorded{outcome: string(message.Failure), reason: cmp.Or(rec.reason, ReasonCompensated)}
		case rec.outcome == string(message.Accepted):
			// Still accepted: answered so again, and the final reply
			// will answer this copy if it is the latest.
			if _, err := tx.Exec(it.ctx, p.barrier.acceptCopy, it.cmd.SagaID, it.cmd.Step, it.cmd.MessageID, it.cmd.Attempt, it.cmd.ReplyTo); err != nil {
				return fmt.Errorf("%s: note the copy of an accepted forward: %w", p.opName(it.cmd), err)
			}
			p.log(it.ctx, it.cmd).DebugContext(it.ctx, "duplicate forward answered accepted from the barrier")
			rec = recorded{outcome: string(message.Accepted), payload: acceptedPayload(rec.cancellable)}
		default:
			p.log(it.ctx, it.cmd).DebugContext(it.ctx, "duplicate forward answered from the barrier", slog.String("outcome", rec.outcome))
		}
		it.reply = replyTo(it.cmd, rec)
	}
	groups := groupByStep(run, claimed)
	results := map[*item]Result{}
	for _, g := range groups {
		if err := c.runForwards(g, results); err != nil {
			return err
		}
	}
	return c.recordForwards(groups, results)
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

// runForwards runs the forward handler of the step of g (claimed
// forwards) for all of g, and again for each command alone unless every
// result is a Success; it sets each command's result, or its dead.
func (c *call) runForwards(g []*item, results map[*item]Result) error {
	p, ctx, tx := c.p, c.ctx, c.tx
	h := g[0].h.forward
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
		if herr == nil && len(rs) == len(cmds) && allSuccess(rs) {
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

// recordForwards records the outcomes of the claimed forwards of groups
// and sets their replies: a Success or a Failure is recorded; a retry or a
// dead-lettered command leaves no row.
func (c *call) recordForwards(groups [][]*item, results map[*item]Result) error {
	p, ctx, tx := c.p, c.ctx, c.tx
	var rec, rel []*item
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
				p.log(it.ctx, it.cmd).DebugContext(it.ctx, "forward answered retry", slog.String("reason", res.Reason))
				it.reply = replyTo(it.cmd, recorded{outcome: string(message.Retry), reason: res.Reason})
				rel = append(rel, it)
				continue
			case res.Outcome == message.Accepted:
				rec, outcomes, reasons, payloads = append(rec, it), append(outcomes, string(res.Outcome)), append(reasons, new(string)), append(payloads, nil)
				c.tail.Queue(p.barrier.acceptMeta, it.cmd.SagaID, it.cmd.Step, it.cmd.MessageID, it.cmd.Attempt, it.cmd.ReplyTo, res.cancellable())
				it.reply = replyTo(it.cmd, recorded{outcome: string(message.Accepted), payload: acceptedPayload(res.cancellable())})
				p.log(it.ctx, it.cmd).DebugContext(it.ctx, "forward accepted", slog.Bool("cancellable", res.cancellable()))
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
			p.log(it.ctx, it.cmd).DebugContext(it.ctx, "forward executed", slog.String("outcome", string(res.Outcome)), slog.String("reason", reason))
		}
	}
	if len(rel) > 0 {
		ids, steps := barrierArgs(rel)
		c.tail.Queue(p.barrier.releaseForwards, ids, steps)
	}
	if len(rec) == 0 {
		return nil
	}
	ids, steps := barrierArgs(rec)
	if !withPayload {
		c.tail.Queue(p.barrier.recordForwards, ids, steps, outcomes, reasons, payloads)
		return nil
	}
	// Each reply carries its payload as Postgres stored it (jsonb's key
	// order: the bytes the answer to a later copy carries).
	if err := c.flush(ctx); err != nil {
		return err
	}
	rows, err := tx.Query(ctx, p.barrier.recordForwards+returningPayload, ids, steps, outcomes, reasons, payloads)
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

func allSuccess(rs []Result) bool {
	for _, r := range rs {
		if r.Outcome != message.Success {
			return false
		}
	}
	return true
}
