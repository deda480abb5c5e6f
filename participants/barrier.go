package participants

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/message"
)

// Reasons the SDK itself puts in replies.
const (
	// ReasonCompensated answers a forward that arrived after its
	// compensation (anti-hanging): it is never executed.
	ReasonCompensated = "compensated"
	// ReasonEmpty is the reason of a compensation that found no forward
	// effect to undo (the forward never ran, or failed).
	ReasonEmpty = "empty"
	// ReasonNoCompensation answers a compensate command for a step
	// registered without a compensate handler.
	ReasonNoCompensation = "step has no compensation"
	// ReasonClosedByQuery is the reason recorded for a forward closed by a
	// query that found nothing recorded; a late forward is answered failure
	// with it.
	ReasonClosedByQuery = "closed_by_query"
	// ReasonInvalidPayloadPrefix starts the reason of a failure caused by a
	// handler error wrapping message.ErrInvalid (a payload that does not fit).
	ReasonInvalidPayloadPrefix = "invalid_payload: "
)

// outcomePending marks a barrier row whose handler is running in this
// transaction; it is never committed.
const outcomePending = "pending"

// barrier holds the SQL of the barrier table of one schema.
type barrier struct {
	insertPending, insertClosed, record, read string
	// closeByQuery closes a forward nothing was recorded for (a query).
	closeByQuery string
	// acceptMeta records what settling an accepted forward needs (the
	// command to answer, its reply topic, cancellable); acceptCopy moves
	// it to a later copy of the command; settleAccepted records the final
	// outcome of an accepted forward; cancelAccepted settles a cancellable
	// one as failed (a compensation met it).
	acceptMeta, acceptCopy, settleAccepted, cancelAccepted string
	// claimForwards, recordForwards and releaseForwards are the forward
	// rows of a run of forwards: claimed (pending) before the handlers,
	// then recorded, or removed for a retry. insertForwards records the
	// outcomes of forwards that ran unclaimed; a row there already fails
	// it.
	claimForwards, recordForwards, releaseForwards, insertForwards string
}

func newBarrier(schema string) barrier {
	t := pgx.Identifier{schema, "barrier"}.Sanitize()
	return barrier{
		insertPending: `INSERT INTO ` + t + ` (saga_id, step, action, outcome) VALUES ($1, $2, $3, 'pending')
ON CONFLICT DO NOTHING`,
		insertClosed: `INSERT INTO ` + t + ` (saga_id, step, action, outcome, reason, closed)
VALUES ($1, $2, 'forward', 'failure', '` + ReasonCompensated + `', true)
ON CONFLICT DO NOTHING`,
		record: `UPDATE ` + t + ` SET outcome = $4, reason = $5, payload = $6::text::jsonb
WHERE saga_id = $1 AND step = $2 AND action = $3
RETURNING payload::text`,
		claimForwards: `INSERT INTO ` + t + ` (saga_id, step, action, outcome)
SELECT u.saga_id, u.step, 'forward', 'pending' FROM unnest($1::uuid[], $2::text[]) AS u(saga_id, step)
ON CONFLICT DO NOTHING
RETURNING saga_id, step`,
		// An upsert, not UPDATE ... FROM unnest: the claimed row is found
		// through the primary key (the arbiter index) whatever plan the
		// statement is given, where a generic plan of the join may scan
		// the whole table when its statistics are missing or small.
		recordForwards: `INSERT INTO ` + t + ` AS b (saga_id, step, action, outcome, reason, payload)
SELECT u.saga_id, u.step, 'forward', u.outcome, u.reason, u.payload::jsonb
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[]) AS u(saga_id, step, outcome, reason, payload)
ON CONFLICT (saga_id, step, action) DO UPDATE SET outcome = excluded.outcome, reason = excluded.reason, payload = excluded.payload`,
		insertForwards: `INSERT INTO ` + t + ` AS b (saga_id, step, action, outcome, reason, payload)
SELECT u.saga_id, u.step, 'forward', u.outcome, u.reason, u.payload::jsonb
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[]) AS u(saga_id, step, outcome, reason, payload)`,
		// "b.saga_id = ANY($1)" repeats the join's condition as an index
		// condition, for the same reason.
		releaseForwards: `DELETE FROM ` + t + ` AS b USING unnest($1::uuid[], $2::text[]) AS u(saga_id, step)
WHERE b.saga_id = ANY($1::uuid[]) AND b.saga_id = u.saga_id AND b.step = u.step AND b.action = 'forward' AND b.outcome = 'pending'`,
		closeByQuery: `INSERT INTO ` + t + ` (saga_id, step, action, outcome, reason, closed)
VALUES ($1, $2, 'forward', 'failure', '` + ReasonClosedByQuery + `', true)
ON CONFLICT DO NOTHING`,
		read: `SELECT outcome, reason, payload::text, closed, cancellable FROM ` + t + `
WHERE saga_id = $1 AND step = $2 AND action = $3`,
		acceptMeta: `UPDATE ` + t + ` SET command_id = $3, attempt = $4, reply_to = $5, cancellable = $6
WHERE saga_id = $1 AND step = $2 AND action = 'forward'`,
		acceptCopy: `UPDATE ` + t + ` SET command_id = $3, attempt = $4, reply_to = $5
WHERE saga_id = $1 AND step = $2 AND action = 'forward' AND outcome = 'accepted' AND coalesce(attempt, 0) < $4`,
		settleAccepted: `UPDATE ` + t + ` SET outcome = $3, reason = $4, payload = $5::text::jsonb
WHERE saga_id = $1 AND step = $2 AND action = 'forward' AND outcome = 'accepted'
RETURNING command_id, reply_to, payload::text`,
		cancelAccepted: `UPDATE ` + t + ` SET outcome = 'failure', reason = '` + ReasonCancelled + `', closed = true
WHERE saga_id = $1 AND step = $2 AND action = 'forward' AND outcome = 'accepted' AND cancellable`,
	}
}

// recorded is one barrier row as read back.
type recorded struct {
	outcome string
	reason  string
	payload *string
	closed  bool
	// cancellable: an accepted forward answered cancellable.
	cancellable bool
}

// execute runs a compensation or a query behind the barrier inside tx
// and returns the reply to send (forwards run in runs: see call.forwards).
// A returned error means tx must be rolled back: an infrastructure
// failure, a handler error or a programming error (an invalid Result).
// tx must be at READ COMMITTED isolation (Postgres' default), so that a
// copy waiting on a concurrent copy's barrier row reads that row once it
// commits.
func (p *Participant) execute(ctx context.Context, tx pgx.Tx, cmd message.Command, h stepHandlers) (message.Reply, error) {
	var (
		res recorded
		err error
	)
	switch cmd.Action {
	case message.Compensate:
		if h.compensate == nil {
			res = recorded{outcome: string(message.Failure), reason: ReasonNoCompensation}
			p.log(ctx, cmd).WarnContext(ctx, "compensate command for a step without compensation")
		} else {
			res, err = p.compensate(ctx, tx, cmd, h.compensate)
		}
	case message.Query:
		res, err = p.query(ctx, tx, cmd, h.acceptedQuery)
	default:
		return message.Reply{}, fmt.Errorf("participant %q: saga %s step %q message-id hash %s: %w: action %q",
			p.cfg.Name, cmd.SagaID, cmd.Step, message.IDHash(cmd.MessageID), message.ErrInvalid, cmd.Action)
	}
	if err != nil {
		return message.Reply{}, err
	}
	return replyTo(cmd, res), nil
}

func (p *Participant) log(ctx context.Context, cmd message.Command) *slog.Logger {
	l := p.cfg.Logger.With(
		slog.String("participant", p.cfg.Name),
		slog.String("saga_id", cmd.SagaID.String()),
		slog.String("step", cmd.Step),
		slog.String("action", string(cmd.Action)),
		slog.String(message.AttrMessageIDHash, message.IDHash(cmd.MessageID)),
	)
	if id := traceIDOf(ctx); id != "" {
		l = l.With(slog.String("trace_id", id))
	}
	return l
}

// debug logs msg about cmd at debug level, building the command's logger
// only when that level is on (it is on the path of every command).
func (p *Participant) debug(ctx context.Context, cmd message.Command, msg string, args ...any) {
	if p.cfg.Logger.Enabled(ctx, slog.LevelDebug) {
		p.log(ctx, cmd).DebugContext(ctx, msg, args...)
	}
}

type traceKey struct{}

// withTrace carries the trace id of record r's traceparent header (if
// valid) in ctx, for the SDK's log lines about the command.
func withTrace(ctx context.Context, r message.Record) context.Context {
	tp, _ := r.Header(message.HeaderTraceParent)
	if id := message.TraceID(tp); id != "" {
		return context.WithValue(ctx, traceKey{}, id)
	}
	return ctx
}

func traceIDOf(ctx context.Context) string {
	id, _ := ctx.Value(traceKey{}).(string)
	return id
}

// compensate: claim the compensate row, close the forward if it never ran,
// and otherwise undo a successful forward; see
// docs/DESIGN.md#the-barrier-protocol for the protocol.
func (p *Participant) compensate(ctx context.Context, tx pgx.Tx, cmd message.Command, fn Handler) (recorded, error) {
	op := p.opName(cmd)
	claim, err := tx.Begin(ctx)
	if err != nil {
		return recorded{}, fmt.Errorf("%s: savepoint: %w", op, err)
	}
	tag, err := claim.Exec(ctx, p.barrier.insertPending, cmd.SagaID, cmd.Step, string(message.Compensate))
	if err != nil {
		return recorded{}, fmt.Errorf("%s: insert barrier row: %w", op, err)
	}
	if tag.RowsAffected() == 0 {
		if err := claim.Commit(ctx); err != nil {
			return recorded{}, fmt.Errorf("%s: release savepoint: %w", op, err)
		}
		rec, err := p.read(ctx, tx, cmd, message.Compensate)
		if err != nil {
			return recorded{}, err
		}
		p.debug(ctx, cmd, "duplicate compensation answered from the barrier", slog.String("outcome", rec.outcome))
		return rec, nil
	}

	// Close the forward: this waits for a concurrent forward's transaction,
	// so either it commits first (and we see its row) or it is refused.
	tag, err = claim.Exec(ctx, p.barrier.insertClosed, cmd.SagaID, cmd.Step)
	if err != nil {
		return recorded{}, fmt.Errorf("%s: close forward: %w", op, err)
	}
	empty := tag.RowsAffected() == 1
	if !empty {
		fwd, err := p.read(ctx, claim, cmd, message.Forward)
		if err != nil {
			return recorded{}, err
		}
		if fwd.outcome == string(message.Accepted) {
			var held bool
			if fwd, held, err = p.meetAccepted(ctx, claim, cmd, fwd); err != nil || held {
				if err == nil {
					err = claim.Rollback(ctx)
				}
				if err != nil {
					return recorded{}, fmt.Errorf("%s: %w", op, err)
				}
				return recorded{outcome: string(message.Retry), reason: ReasonHeld}, nil
			}
		}
		switch fwd.outcome {
		case string(message.Failure):
			empty = true
		case string(message.Success):
		default:
			return recorded{}, fmt.Errorf("%s: forward barrier row has outcome %q in this transaction (an earlier Execute error was ignored?)", op, fwd.outcome)
		}
	}
	if empty {
		rec, err := p.record(ctx, claim, cmd, message.Compensate, message.Success, ReasonEmpty, nil)
		if err != nil {
			return recorded{}, err
		}
		if err := claim.Commit(ctx); err != nil {
			return recorded{}, fmt.Errorf("%s: release savepoint: %w", op, err)
		}
		p.debug(ctx, cmd, "empty compensation: no forward effect to undo")
		return rec, nil
	}

	res, handled, err := p.runHandler(ctx, claim, cmd, fn)
	if err != nil {
		return recorded{}, err
	}
	switch {
	case res.Outcome == message.Success || (!handled && res.Outcome == message.Failure):
		// Success, or an invalid payload (recorded as a failure so the
		// orchestrator flags the saga instead of re-sending forever).
		var payload *string
		if res.Outcome == message.Success {
			if payload, err = encodePayload(res.Payload); err != nil {
				return recorded{}, fmt.Errorf("%s: %w", op, err)
			}
		}
		rec, err := p.record(ctx, claim, cmd, message.Compensate, res.Outcome, res.Reason, payload)
		if err != nil {
			return recorded{}, err
		}
		if err := claim.Commit(ctx); err != nil {
			return recorded{}, fmt.Errorf("%s: release savepoint: %w", op, err)
		}
		p.debug(ctx, cmd, "compensation executed", slog.String("outcome", rec.outcome))
		return rec, nil
	case res.Outcome == message.Retry || res.Outcome == message.Failure:
		// Compensations are retried until they succeed: record nothing.
		if err := claim.Rollback(ctx); err != nil {
			return recorded{}, fmt.Errorf("%s: roll back barrier row for retry: %w", op, err)
		}
		p.log(ctx, cmd).WarnContext(ctx, "compensation answered retry", slog.String("handler_outcome", string(res.Outcome)), slog.String("reason", res.Reason))
		return recorded{outcome: string(message.Retry), reason: res.Reason}, nil
	}
	return recorded{}, fmt.Errorf("%s: handler returned outcome %q, want success, failure or retry", op, res.Outcome)
}

// meetAccepted is a compensation meeting an accepted forward fwd: a
// cancellable one is settled as failed (the compensation is then empty),
// any other holds the compensation (held: answer retry, record nothing).
// A forward settled meanwhile by Complete or Fail (its transaction
// committed while this one waited for the row) is read again and returned.
func (p *Participant) meetAccepted(ctx context.Context, claim pgx.Tx, cmd message.Command, fwd recorded) (recorded, bool, error) {
	if !fwd.cancellable {
		p.log(ctx, cmd).InfoContext(ctx, "compensation held: the forward is accepted and not settled")
		return fwd, true, nil
	}
	tag, err := claim.Exec(ctx, p.barrier.cancelAccepted, cmd.SagaID, cmd.Step)
	if err != nil {
		return fwd, false, fmt.Errorf("cancel the accepted forward: %w", err)
	}
	if tag.RowsAffected() == 1 {
		p.log(ctx, cmd).InfoContext(ctx, "accepted forward cancelled by its compensation")
		return recorded{outcome: string(message.Failure), reason: ReasonCancelled, closed: true}, false, nil
	}
	fwd, err = p.read(ctx, claim, cmd, message.Forward)
	return fwd, err == nil && fwd.outcome == string(message.Accepted), err
}

// runHandler runs fn for cmd alone in a savepoint nested in claim. A
// Success keeps its writes; any other outcome, or an error, rolls them
// back. A handler error wrapping message.ErrInvalid becomes a Failure with
// an invalid_payload reason (handled=false); any other handler error is
// returned.
func (p *Participant) runHandler(ctx context.Context, claim pgx.Tx, cmd message.Command, fn Handler) (res Result, handled bool, err error) {
	op := p.opName(cmd)
	sp, err := claim.Begin(ctx)
	if err != nil {
		return Result{}, false, fmt.Errorf("%s: handler savepoint: %w", op, err)
	}
	rs, herr := callHandler(ctx, sp, fn, []message.Command{cmd})
	if herr == nil && len(rs) != 1 {
		herr = fmt.Errorf("returned %d results for 1 command", len(rs))
	}
	if herr != nil {
		if err := sp.Rollback(ctx); err != nil {
			return Result{}, false, fmt.Errorf("%s: roll back handler savepoint after %v: %w", op, herr, err)
		}
		if !errors.Is(herr, message.ErrInvalid) {
			return Result{}, false, fmt.Errorf("%s: handler: %w", op, herr)
		}
		p.log(ctx, cmd).WarnContext(ctx, "command payload rejected by the handler", slog.String("error", herr.Error()))
		return Result{Outcome: message.Failure, Reason: message.Truncate(ReasonInvalidPayloadPrefix+herr.Error(), message.MaxReasonBytesDefault)}, false, nil
	}
	res = rs[0]
	// A reason is text of at most 1 KiB on the wire: a handler's longer or
	// unclean reason is cut and cleaned rather than making the reply, and
	// so the command, invalid.
	res.Reason = message.Truncate(res.Reason, message.MaxReasonBytesDefault)
	if res.Outcome == message.Success || res.Outcome == message.Accepted {
		// An accepted forward keeps its writes too: the work it took on.
		if err := sp.Commit(ctx); err != nil {
			return Result{}, false, fmt.Errorf("%s: release handler savepoint: %w", op, err)
		}
	} else if err := sp.Rollback(ctx); err != nil {
		return Result{}, false, fmt.Errorf("%s: roll back handler savepoint: %w", op, err)
	}
	return res, true, nil
}

func (p *Participant) record(ctx context.Context, db pgx.Tx, cmd message.Command, action message.Action, outcome message.Outcome, reason string, payload *string) (recorded, error) {
	rec := recorded{outcome: string(outcome), reason: reason}
	if err := db.QueryRow(ctx, p.barrier.record, cmd.SagaID, cmd.Step, string(action), string(outcome), reason, payload).Scan(&rec.payload); err != nil {
		return recorded{}, fmt.Errorf("%s: record %s outcome %s: %w", p.opName(cmd), action, outcome, err)
	}
	return rec, nil
}

func (p *Participant) read(ctx context.Context, db pgx.Tx, cmd message.Command, action message.Action) (recorded, error) {
	var rec recorded
	err := db.QueryRow(ctx, p.barrier.read, cmd.SagaID, cmd.Step, string(action)).Scan(&rec.outcome, &rec.reason, &rec.payload, &rec.closed, &rec.cancellable)
	if err != nil {
		return recorded{}, fmt.Errorf("%s: read %s barrier row: %w", p.opName(cmd), action, err)
	}
	if rec.outcome == outcomePending {
		return recorded{}, fmt.Errorf("%s: %s barrier row is pending in this transaction (an earlier Execute error was ignored?)", p.opName(cmd), action)
	}
	return rec, nil
}

func (p *Participant) opName(cmd message.Command) string {
	return fmt.Sprintf("participant %q: execute saga %s step %q %s message-id hash %s", p.cfg.Name, cmd.SagaID, cmd.Step, cmd.Action, message.IDHash(cmd.MessageID))
}

// encodePayload JSON-encodes a handler's output, which must be a JSON object
// or null (nil).
func encodePayload(v any) (*string, error) {
	if v == nil {
		return nil, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode handler payload %T: %w", v, err)
	}
	b = bytes.TrimSpace(b)
	if bytes.Equal(b, []byte("null")) {
		return nil, nil
	}
	if len(b) == 0 || b[0] != '{' {
		return nil, fmt.Errorf("handler payload %T encodes to %.40s, want a JSON object or null", v, b)
	}
	s := string(b)
	return &s, nil
}
