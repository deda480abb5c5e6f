package participants

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/sagaflow/sagaflow/inbox"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/outbox"
)

// errDecline makes HandleBatch hand the batch back to the one-by-one path.
var errDecline = errors.New("participant: batch declined; handle one by one")

// HandleCommands is the inbox handler of the command topic (a single
// command is a batch of one). It tries HandleBatch, the fast path for a
// batch of first-time forwards that succeed; when that declines, its writes
// are undone (inbox.Undo) and every command goes through HandleMessage, the
// full barrier protocol, in a savepoint of its own: a command that is
// invalid (undecodable, headers contradicting the body, unknown step) or
// whose handler panics is dead-lettered with the reason and the others are
// applied; any other error fails the call, and the inbox decides by its
// class (retry, or split the batch to isolate a command Postgres refuses).
func (p *Participant) HandleCommands(ctx context.Context, tx pgx.Tx, ms []message.Record) ([]inbox.Result, error) {
	err := p.HandleBatch(ctx, tx, ms)
	if err == nil {
		return make([]inbox.Result, len(ms)), nil
	}
	if !errors.Is(err, errUntouched) {
		if uerr := inbox.Undo(ctx, tx); uerr != nil {
			return nil, fmt.Errorf("participant %q: undo the declined batch (%v): %w", p.cfg.Name, err, uerr)
		}
	}
	return inbox.EachMessage(p.HandleMessage)(ctx, tx, ms)
}

// errUntouched marks a decline that came before any write.
var errUntouched = fmt.Errorf("%w before any write", errDecline)

// HandleBatch is the fast path HandleCommands tries first, for the common
// case: every command of the batch a well-formed forward
// of a known step, seen for the first time, whose handler succeeds. It runs
// the handlers, then records every barrier row (outcome success) in one
// statement and enqueues every reply in one statement. Anything else (a
// compensation, a duplicate, a handler answering failure or retry, an error)
// returns an error: HandleCommands undoes the batch's writes and runs
// HandleMessage for each command, which follows the full barrier protocol.
//
// The barrier rows are inserted after the handlers rather than before: a
// concurrent copy or compensation that claimed a row first makes the insert
// fail (a unique violation), and the whole batch, handler writes included,
// is rolled back and redone one by one. So at most one execution of a forward ever commits, and
// a forward closed by its compensation is never executed, as in Execute.
func (p *Participant) HandleBatch(ctx context.Context, tx pgx.Tx, ms []message.Record) error {
	cmds := make([]message.Command, len(ms))
	for i, m := range ms {
		cmd, err := message.DecodeCommand(m.Value)
		if err != nil {
			return fmt.Errorf("%w: %v", errUntouched, err)
		}
		if err := message.MatchRecordHeaders(m.Headers, cmd.MessageID, cmd.SagaID); err != nil {
			return fmt.Errorf("%w: %v", errUntouched, err)
		}
		if err := p.verifyCommand(m); err != nil {
			return fmt.Errorf("%w: %v", errUntouched, err)
		}
		if cmd.Action != message.Forward || p.replyTopicAllowed(cmd) != nil {
			return errUntouched
		}
		cmds[i] = cmd
	}
	n := len(cmds)
	results, err := p.forwardAll(ctx, tx, cmds)
	if err != nil {
		return err
	}
	sagaIDs, stepNames, payloads := make([]pgtype.UUID, n), make([]string, n), make([]*string, n)
	withPayload := false
	for i, cmd := range cmds {
		pl, err := encodePayload(results[i].Payload)
		if err != nil {
			return fmt.Errorf("%w: %s: %v", errDecline, p.opName(cmd), err)
		}
		sagaIDs[i], stepNames[i], payloads[i] = pgtype.UUID{Bytes: cmd.SagaID, Valid: true}, cmd.Step, pl
		withPayload = withPayload || pl != nil
	}
	b := &pgx.Batch{}
	var stored map[batchKey]*string
	recorded := 0
	deferring := false
	if withPayload {
		// Each reply carries its payload as Postgres stored it (jsonb's
		// key order: the bytes the answer to a later copy carries), so
		// the insert returns them before the replies are made.
		rows, err := tx.Query(ctx, p.barrier.insertSuccess+returningPayload, sagaIDs, stepNames, payloads)
		if err != nil {
			return claimed(fmt.Errorf("participant %q: record %d forward outcomes: %w", p.cfg.Name, n, err))
		}
		if stored, err = scanStored(rows, n); err != nil {
			return claimed(fmt.Errorf("participant %q: record %d forward outcomes: %w", p.cfg.Name, n, err))
		}
		recorded = len(stored)
	} else if deferring = inbox.CanDefer(ctx); deferring {
		// No payload, in an inbox batch: the barrier rows and the
		// replies go with the COMMIT (inbox.CommitWith). The insert
		// records all of them or fails (a row someone recorded first):
		// the commit fails then, and the inbox runs the batch again at
		// once with nothing deferred, which takes the path below and
		// declines.
		b.Queue(p.barrier.insertSuccess, sagaIDs, stepNames, payloads)
		recorded = n
	} else {
		// No payload: the replies are known already, and the barrier
		// rows and the replies go in one round trip.
		b.Queue(p.barrier.insertSuccess, sagaIDs, stepNames, payloads).Exec(func(ct pgconn.CommandTag) error {
			recorded = int(ct.RowsAffected())
			return nil
		})
	}
	if !withPayload || recorded == n {
		msgs := make([]outbox.Message, n)
		for i, cmd := range cmds {
			reply := message.Reply{
				MessageID: uuid.New(), InReplyTo: cmd.MessageID, SagaID: cmd.SagaID, Step: cmd.Step,
				Action: cmd.Action, Outcome: message.Success,
			}
			if pl := stored[batchKey{cmd.SagaID, cmd.Step}]; pl != nil && *pl != "null" {
				reply.Payload = []byte(*pl)
			}
			value, err := message.EncodeReply(reply)
			if err != nil {
				return fmt.Errorf("%w: %s: %v", errDecline, p.opName(cmd), err)
			}
			msgs[i] = outbox.Message{Topic: cmd.ReplyTo, Key: reply.SagaID.String(), Value: value, Headers: message.EchoTrace(message.Headers(reply.MessageID, reply.SagaID), ms[i])}
			p.signReply(msgs[i].Topic, msgs[i].Key, msgs[i].Value, msgs[i].Headers)
		}
		after, err := p.queueEnqueue(ctx, b, msgs...)
		if err != nil {
			return fmt.Errorf("participant %q: enqueue %d replies: %w", p.cfg.Name, n, err)
		}
		if deferring && inbox.CommitWith(ctx, b) {
			after()
			return nil
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return claimed(fmt.Errorf("participant %q: record %d forward outcomes and enqueue their replies: %w", p.cfg.Name, n, err))
		}
		if recorded == n {
			after()
			return nil
		}
	}
	// A copy, a compensation, or a repeat within the batch got there first
	// (the insert did not record its row): declined, and HandleCommands undoes
	// the batch's writes.
	return errDecline
}

// claimed marks err as a decline when it is the unique violation of a
// barrier row someone else recorded first (a copy, a compensation, a repeat
// within the batch).
func claimed(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return fmt.Errorf("%w: %v", errDecline, err)
	}
	return err
}

// returningPayload makes insertSuccess return what it stored.
const returningPayload = "\nRETURNING saga_id, step, payload::text"

// batchKey names a command of a batch.
type batchKey struct {
	saga uuid.UUID
	step string
}

// scanStored reads insertSuccess+returningPayload's rows.
func scanStored(rows pgx.Rows, n int) (map[batchKey]*string, error) {
	defer rows.Close()
	stored := make(map[batchKey]*string, n)
	for rows.Next() {
		var k batchKey
		var id pgtype.UUID
		var pl *string
		if err := rows.Scan(&id, &k.step, &pl); err != nil {
			return nil, err
		}
		k.saga = uuid.UUID(id.Bytes)
		stored[k] = pl
	}
	return stored, rows.Err()
}

// forwardAll runs the forward handlers of cmds and returns their results in
// the order of cmds, all of them successes (anything else declines the
// batch, at the first non-Success): one call of a step's BatchFunc for all
// its commands (steps in order of first appearance, after the commands of
// steps without one, each run by its Func in order).
func (p *Participant) forwardAll(ctx context.Context, tx pgx.Tx, cmds []message.Command) ([]Result, error) {
	results := make([]Result, len(cmds))
	type group struct {
		f   BatchFunc
		idx []int
	}
	var groups []*group
	byStep := map[string]*group{}
	for i, cmd := range cmds {
		p.mu.RLock()
		h, ok := p.handlers[cmd.Step]
		p.mu.RUnlock()
		if !ok {
			return nil, errDecline
		}
		if h.forwardBatch != nil {
			g := byStep[cmd.Step]
			if g == nil {
				g = &group{f: h.forwardBatch}
				byStep[cmd.Step] = g
				groups = append(groups, g)
			}
			g.idx = append(g.idx, i)
			continue
		}
		res, err := h.forward(ctx, tx, cmd)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: handler: %v", errDecline, p.opName(cmd), err)
		}
		if res.Outcome != message.Success {
			return nil, errDecline
		}
		results[i] = res
	}
	for _, g := range groups {
		batch := make([]message.Command, len(g.idx))
		for k, i := range g.idx {
			batch[k] = cmds[i]
		}
		rs, err := g.f(ctx, tx, batch)
		if err != nil {
			return nil, fmt.Errorf("%w: step %q: batch handler (%d commands): %v", errDecline, batch[0].Step, len(batch), err)
		}
		if len(rs) != len(batch) {
			p.cfg.Logger.Warn("participant: a batch forward handler returned a result count that does not match its commands; handling them one by one",
				"participant", p.cfg.Name, "step", batch[0].Step, "commands", len(batch), "results", len(rs))
			return nil, fmt.Errorf("%w: step %q: batch handler returned %d results for %d commands", errDecline, batch[0].Step, len(rs), len(batch))
		}
		for k, i := range g.idx {
			if rs[k].Outcome != message.Success {
				return nil, errDecline
			}
			results[i] = rs[k]
		}
	}
	return results, nil
}
