package participants

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/message"
)

// query answers a query command: what the barrier recorded for the step's
// forward (message.QueryAnswer as the payload of a success reply). When
// nothing was recorded, the forward is closed in the same statement, the way
// an empty compensation closes it, so a forward still on its way is refused
// from now on and the answer "closed" stays true. The insert waits for a
// concurrent copy of the forward still in its transaction, so the answer is
// never "closed" while that copy commits an effect. A forward answered
// accepted and not settled yet is answered "accepted" (still pending). Queries record nothing
// of their own: every copy reads the barrier afresh, which is idempotent.
func (p *Participant) query(ctx context.Context, tx pgx.Tx, cmd message.Command, onAccepted func(context.Context, pgx.Tx, Ref) error) (recorded, error) {
	op := p.opName(cmd)
	tag, err := tx.Exec(ctx, p.barrier.closeByQuery, cmd.SagaID, cmd.Step)
	if err != nil {
		return recorded{}, fmt.Errorf("%s: close forward: %w", op, err)
	}
	var ans message.QueryAnswer
	if tag.RowsAffected() == 1 {
		ans.State = message.QueryClosed
	} else {
		fwd, err := p.read(ctx, tx, cmd, message.Forward)
		if err != nil {
			return recorded{}, err
		}
		switch {
		case fwd.closed:
			ans.State = message.QueryClosed
		case fwd.outcome == string(message.Failure):
			ans.State = message.QueryFailed
		case fwd.outcome == string(message.Accepted):
			// Taken, to be settled later: still pending, and not closed.
			ans.State = message.QueryAccepted
			if onAccepted != nil {
				if err := onAccepted(ctx, tx, RefOf(cmd)); err != nil {
					return recorded{}, fmt.Errorf("%s: accepted-query hook: %w", op, err)
				}
			}
		case fwd.outcome == string(message.Success):
			comp, found, err := p.readOptional(ctx, tx, cmd, message.Compensate)
			if err != nil {
				return recorded{}, err
			}
			if found && comp.outcome == string(message.Success) {
				ans.State = message.QueryCompensated
			} else {
				ans.State = message.QueryDone
				if fwd.payload != nil && *fwd.payload != "null" {
					ans.Output = []byte(*fwd.payload)
				}
			}
		default:
			return recorded{}, fmt.Errorf("%s: forward barrier row has outcome %q", op, fwd.outcome)
		}
	}
	b, err := ans.Encode()
	if err != nil {
		return recorded{}, fmt.Errorf("%s: %w", op, err)
	}
	s := string(b)
	p.debug(ctx, cmd, "query answered from the barrier", slog.String("state", string(ans.State)))
	return recorded{outcome: string(message.Success), payload: &s}, nil
}

// readOptional reads the barrier row of action, reporting whether it exists.
func (p *Participant) readOptional(ctx context.Context, tx pgx.Tx, cmd message.Command, action message.Action) (recorded, bool, error) {
	rec, err := p.read(ctx, tx, cmd, action)
	if errors.Is(err, pgx.ErrNoRows) {
		return recorded{}, false, nil
	}
	return rec, err == nil, err
}
