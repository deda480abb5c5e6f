package conformance

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/message"
)

// Checks of answer later (outcome accepted, settled by a later reply).
const (
	CheckAcceptedCompletedLater   = "accepted-completed-later"
	CheckAcceptedCompensationHeld = "accepted-compensation-held"
)

// finish sends a FinishStepName forward settling s (accepted) with
// outcome, and waits for its own answer.
func (r *run) finish(ctx context.Context, s *saga, outcome message.Outcome) (message.Reply, error) {
	cmd := r.newCommand(uuid.New(), s.key, message.Forward, 1, Finish{Key: s.key, Saga: s.id.String(), Outcome: string(outcome)})
	cmd.Step = FinishStepName
	return r.exchange(ctx, cmd)
}

// settled waits for the final answer to the forward copy of s with id,
// one that is not accepted.
func (r *run) settled(ctx context.Context, id uuid.UUID) (message.Reply, error) {
	rec, err := r.col.wait(ctx, r.cfg.Timeout, r.replyTopic, func(rec record) bool {
		rep, err := message.DecodeReply(rec.value)
		return err == nil && rep.InReplyTo == id && rep.Outcome != message.Accepted
	})
	if err != nil {
		return message.Reply{}, fmt.Errorf("no final answer to the accepted forward %s on %s: %w", id, r.replyTopic, err)
	}
	rep, _ := message.DecodeReply(rec.value)
	return rep, nil
}

// acceptForward sends forwards of s in mode accept, copies times, each
// answered accepted, and returns the id of the latest.
func (r *run) acceptForward(ctx context.Context, s *saga, copies int) (uuid.UUID, error) {
	var last uuid.UUID
	for k := range copies {
		what := "forward (mode accept)"
		if k > 0 {
			what = fmt.Sprintf("copy %d of the accepted forward", k+1)
		}
		rep, err := r.ask(ctx, s, message.Forward, ModeAccept, what, message.Accepted, "")
		if err != nil {
			return last, err
		}
		if a, err := message.DecodeAcceptedAnswer(rep.Payload); err != nil || a.Cancellable {
			return last, fmt.Errorf("%s: accepted payload %s, want none (not cancellable): %v", what, rep.Payload, err)
		}
		last = rep.InReplyTo
	}
	return last, nil
}

// acceptedCompletedLater: a forward answered accepted is answered accepted
// to its copies and to a query (not closed); a finish completes it from
// another handler's transaction: the final success answers the latest
// copy with the output, once, and a query then says done.
func (r *run) acceptedCompletedLater(ctx context.Context) error {
	s := newSaga(newKey("accept"))
	latest, err := r.acceptForward(ctx, s, 2)
	if err != nil {
		return err
	}
	ans, err := r.query(ctx, s)
	if err != nil {
		return err
	}
	if err := wantState(ans, message.QueryAccepted); err != nil {
		return fmt.Errorf("an accepted step not settled yet: %w", err)
	}
	fin, err := r.finish(ctx, s, message.Success)
	if err != nil {
		return err
	}
	if err := effects("finish (outcome success)", fin, s.key, 1); err != nil {
		return err
	}
	rep, err := r.settled(ctx, latest)
	if err != nil {
		return err
	}
	if err := expect("the completion of the accepted forward", rep, message.Success, ""); err != nil {
		return err
	}
	if err := effects("the completion of the accepted forward", rep, s.key, 1); err != nil {
		return err
	}
	if ans, err = r.query(ctx, s); err != nil {
		return err
	}
	if err := wantState(ans, message.QueryDone); err != nil {
		return fmt.Errorf("after the completion: %w", err)
	}
	again, err := r.finish(ctx, s, message.Success)
	if err != nil {
		return err
	}
	if err := expect("a second finish of the completed step", again, message.Failure, ReasonNotAccepted); err != nil {
		return err
	}
	return r.probe(ctx, s.key, 2) // the completion's effect and the probe's
}

// acceptedCompensationHeld: a compensation that meets an accepted forward
// (not cancellable) is held: answered retry, nothing recorded; the step is
// failed later by a finish, and the next compensation is empty.
func (r *run) acceptedCompensationHeld(ctx context.Context) error {
	s := newSaga(newKey("held"))
	latest, err := r.acceptForward(ctx, s, 1)
	if err != nil {
		return err
	}
	if _, err := r.ask(ctx, s, message.Compensate, "", "compensation of an accepted forward", message.Retry, ""); err != nil {
		return fmt.Errorf("%w: a compensation must be held (answered retry) until the accepted forward is settled", err)
	}
	fin, err := r.finish(ctx, s, message.Failure)
	if err != nil {
		return err
	}
	if err := effects("finish (outcome failure)", fin, s.key, 0); err != nil {
		return err
	}
	rep, err := r.settled(ctx, latest)
	if err != nil {
		return err
	}
	if err := expect("the failure of the accepted forward", rep, message.Failure, ReasonFail); err != nil {
		return err
	}
	if _, err := r.ask(ctx, s, message.Compensate, "", "compensation after the accepted forward failed", message.Success, ""); err != nil {
		return err
	}
	return r.probe(ctx, s.key, 1) // the probe's alone
}
