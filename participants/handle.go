package participants

import (
	"context"
	"fmt"
	"runtime/debug"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/inbox"
	"github.com/sagaflow/sagaflow/internal/outboxdb"
	"github.com/sagaflow/sagaflow/internal/txhooks"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/migrations"
	"github.com/sagaflow/sagaflow/outbox"
)

// Migrations returns the migration sets of the SDK tables (outbox, inbox,
// barrier) in the participant's schema. Apply them (with the participant's
// own business sets) before Run.
func (p *Participant) Migrations() ([]migrations.Set, error) {
	return migrations.Participant(p.cfg.Schema)
}

// HandleCommands is the inbox handler of the command topic (Run uses it; a
// single command is a batch of one). It runs the commands behind the
// barrier and enqueues their replies in the participant's outbox, all in
// tx. A record that is invalid (undecodable, headers bad or contradicting
// the body, a signature or reply_to refused, an unknown step) or whose
// handler panics or fails permanently (inbox.Classify) is dead-lettered
// with the reason, nothing written for it, and the others are applied; any
// other error fails the call, and the inbox decides by its class.
func (p *Participant) HandleCommands(ctx context.Context, tx pgx.Tx, ms []message.Record) ([]inbox.Result, error) {
	items, err := p.handle(ctx, tx, ms)
	if err != nil {
		return nil, err
	}
	out := make([]inbox.Result, len(ms))
	for i, it := range items {
		if it.dead != nil {
			out[i] = inbox.Result{Outcome: inbox.DeadLetter, Reason: it.dead.Error()}
		}
	}
	return out, nil
}

// handle is HandleCommands with each record's item: its reply (enqueued)
// or why it is dead-lettered.
func (p *Participant) handle(ctx context.Context, tx pgx.Tx, ms []message.Record) ([]*item, error) {
	items := make([]*item, len(ms))
	for i, m := range ms {
		items[i] = p.accept(ctx, m)
	}
	c := &call{p: p, ctx: ctx, tx: tx, tail: &pgx.Batch{}}
	if err := c.run(items); err != nil {
		return nil, err
	}
	// The replies of each run of forwards, and of each command alone, are
	// one insert (all in one round trip): a row a trigger drops then keeps
	// only the replies of its own insert from the dispatcher (see
	// outbox.QueueEnqueueDirect).
	var groups [][]outbox.Message
	last := -1
	for _, it := range items {
		if it.dead != nil {
			continue
		}
		msg, err := p.replyMessage(it)
		if err != nil {
			return nil, err
		}
		if it.seg != last {
			groups = append(groups, nil)
			last = it.seg
		}
		groups[len(groups)-1] = append(groups[len(groups)-1], msg)
	}
	if err := c.finish(ctx, groups); err != nil {
		return nil, err
	}
	return items, nil
}

// item is one command of a call.
type item struct {
	ctx   context.Context // carries the record's trace id, for the logs
	rec   message.Record
	cmd   message.Command
	h     stepHandlers
	reply message.Reply
	// seg numbers the part of the call it ran in: its run of forwards, or
	// itself alone.
	seg int
	// dead, if set, dead-letters the record with it as the reason:
	// nothing is written for it.
	dead error
}

// accept reads record m (message.ReadCommand) and checks it against the
// participant: signature, reply_to, step. A refusal is the item's dead.
func (p *Participant) accept(ctx context.Context, m message.Record) *item {
	it := &item{ctx: withTrace(ctx, m), rec: m}
	cmd, err := message.ReadCommand(m.Value, m.Headers)
	it.cmd = cmd
	if err == nil {
		err = p.verifyCommand(m)
	}
	if err == nil {
		err = p.replyTopicAllowed(cmd)
	}
	if err == nil {
		it.h, err = p.step(cmd)
	}
	if err != nil {
		it.dead = fmt.Errorf("participant %q: topic %s partition %d offset %d: %w", p.cfg.Name, m.Topic, m.Partition, m.Offset, err)
	}
	return it
}

// step returns the handlers of cmd's step; an unknown step is invalid.
func (p *Participant) step(cmd message.Command) (stepHandlers, error) {
	p.mu.RLock()
	h, ok := p.handlers[cmd.Step]
	p.mu.RUnlock()
	if !ok {
		return h, fmt.Errorf("saga %s message-id hash %s: %w: unknown step %q",
			cmd.SagaID, message.IDHash(cmd.MessageID), message.ErrInvalid, cmd.Step)
	}
	return h, nil
}

// call is the state of one HandleCommands call.
type call struct {
	p   *Participant
	ctx context.Context
	tx  pgx.Tx
	// tail holds writes not sent yet (recorded outcomes that return
	// nothing): sent before the next statement of the call, or with the
	// replies at its end.
	tail *pgx.Batch
	// segs counts the parts of the call run so far (item.seg).
	segs int
}

// run executes items in order, each one's reply or dead set. Forwards are
// executed in runs: consecutive forwards, none repeating the step and saga
// of another, share one barrier claim and one handler call per step; any
// other command (a compensation, a query) runs alone.
func (c *call) run(items []*item) error {
	var fwd []*item
	seen := map[barrierKey]bool{}
	flushRun := func() error {
		for _, it := range fwd {
			it.seg = c.segs
		}
		c.segs++
		err := c.forwards(fwd)
		fwd = fwd[:0]
		clear(seen)
		return err
	}
	for _, it := range items {
		if it.dead != nil {
			continue
		}
		k := barrierKey{it.cmd.SagaID, it.cmd.Step}
		if it.cmd.Action == message.Forward && !seen[k] {
			seen[k] = true
			fwd = append(fwd, it)
			continue
		}
		if err := flushRun(); err != nil {
			return err
		}
		if it.cmd.Action == message.Forward {
			seen[k] = true
			fwd = append(fwd, it)
			continue
		}
		it.seg = c.segs
		c.segs++
		if err := c.alone(it); err != nil {
			return err
		}
	}
	return flushRun()
}

// flush sends the writes held in the tail: deferred to the inbox's next
// round trip where it may (txhooks.Tx.CommitWith), now otherwise.
func (c *call) flush(ctx context.Context) error {
	if c.tail.Len() == 0 {
		return nil
	}
	b := c.tail
	c.tail = &pgx.Batch{}
	if commitWith(c.tx, b) {
		return nil
	}
	if err := c.tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("participant %q: record forward outcomes: %w", c.p.cfg.Name, err)
	}
	return nil
}

// finish enqueues the replies, an insert per group, with the tail:
// deferred to the inbox's COMMIT when it may (txhooks.Tx.CommitWith), sent now
// otherwise.
func (c *call) finish(ctx context.Context, groups [][]outbox.Message) error {
	var afters []func()
	for _, msgs := range groups {
		after, err := c.p.queueEnqueue(c.tx, c.tail, msgs...)
		if err != nil {
			return fmt.Errorf("participant %q: enqueue %d replies: %w", c.p.cfg.Name, len(msgs), err)
		}
		afters = append(afters, after)
	}
	if c.tail.Len() > 0 && !commitWith(c.tx, c.tail) {
		if err := c.tx.SendBatch(ctx, c.tail).Close(); err != nil {
			return fmt.Errorf("participant %q: record forward outcomes and enqueue replies: %w", c.p.cfg.Name, err)
		}
	}
	for _, after := range afters {
		after()
	}
	return nil
}

// alone runs a compensation or a query in a savepoint of its own: a
// permanent error dead-letters it.
func (c *call) alone(it *item) error {
	ctx := it.ctx
	if err := c.flush(ctx); err != nil {
		return err
	}
	sp, err := c.tx.Begin(ctx)
	if err != nil {
		return fmt.Errorf("%s: savepoint: %w", c.p.opName(it.cmd), err)
	}
	it.reply, err = c.p.execute(ctx, sp, it.cmd, it.h)
	if err == nil {
		if err := sp.Commit(ctx); err != nil {
			return fmt.Errorf("%s: release savepoint: %w", c.p.opName(it.cmd), err)
		}
		return nil
	}
	if !inbox.IsPermanent(err) {
		return err
	}
	if rerr := sp.Rollback(ctx); rerr != nil {
		return fmt.Errorf("%s: roll back after %v: %w", c.p.opName(it.cmd), err, rerr)
	}
	it.dead = err
	return nil
}

// replyMessage is the outbox record of it's reply, echoing the trace
// context headers of its command record and signed with the participant's
// key.
func (p *Participant) replyMessage(it *item) (outbox.Message, error) {
	value, err := message.EncodeReply(it.reply)
	if err != nil {
		return outbox.Message{}, fmt.Errorf("%s: %w", p.opName(it.cmd), err)
	}
	msg := outbox.Message{
		Topic:   it.cmd.ReplyTo,
		Key:     it.reply.SagaID.String(),
		Value:   value,
		Headers: message.EchoTrace(message.Headers(it.reply.MessageID, it.reply.SagaID), it.rec),
	}
	p.signReply(msg.Topic, msg.Key, msg.Value, msg.Headers)
	return msg, nil
}

// replyTo is the reply to cmd saying what rec recorded.
func replyTo(cmd message.Command, rec recorded) message.Reply {
	reply := message.Reply{
		MessageID: uuid.New(),
		InReplyTo: cmd.MessageID,
		SagaID:    cmd.SagaID,
		Step:      cmd.Step,
		Action:    cmd.Action,
		Outcome:   message.Outcome(rec.outcome),
		Reason:    rec.reason,
	}
	if rec.payload != nil && *rec.payload != "null" {
		reply.Payload = []byte(*rec.payload)
	}
	return reply
}

// callHandler runs h for cmds, a panic made an error that dead-letters
// (inbox.Classify: permanent).
func callHandler(ctx context.Context, tx pgx.Tx, h Handler, cmds []message.Command) (rs []Result, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = inbox.Permanent(fmt.Errorf("handler panicked: %v\n%s", v, debug.Stack()))
		}
	}()
	return h(ctx, tx, cmds)
}

// queueEnqueue adds the insert of msgs into the outbox to b; call after
// once b ran. Inside an inbox handler with the dispatcher running they are
// leased to it and handed over once the inbox transaction commits
// (published at once; the relay takes them only after the lease);
// otherwise the relay publishes them.
func (p *Participant) queueEnqueue(tx pgx.Tx, b *pgx.Batch, msgs ...outbox.Message) (after func(), err error) {
	d := p.dispatch.Load()
	hooks, inInbox := txhooks.Of(tx)
	if d == nil || !d.Active() || !inInbox {
		return func() {}, outboxdb.For(p.outbox.Schema()).QueueEnqueue(b, msgs...)
	}
	pend, err := outboxdb.For(p.outbox.Schema()).QueueEnqueueDirect(b, d.Lease(), msgs...)
	if err != nil {
		return nil, err
	}
	return func() { hooks.AfterCommit(func() { d.Send(pend) }) }, nil
}

// commitWith defers b to the commit of tx where tx is an inbox batch
// transaction that allows it.
func commitWith(tx pgx.Tx, b *pgx.Batch) bool {
	h, ok := txhooks.Of(tx)
	return ok && h.CommitWith(b)
}
