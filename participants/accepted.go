package participants

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/outbox"
)

// ReasonCancelled is the reason recorded for an accepted forward that a
// compensation cancelled (it was answered accepted and cancellable): the
// forward is settled as failed, the compensation is empty, and a later
// Complete or Fail is refused with ErrCancelled.
const ReasonCancelled = "cancelled"

// ReasonHeld is the reason of the retry answer to a compensation that
// met a forward accepted and not cancellable: nothing is recorded, and the
// orchestrator's next copy runs once the forward is settled.
const ReasonHeld = "held: the forward was answered accepted and is not settled yet"

// Accepted answers that the participant took the command and will settle
// the step later, from any code path, with [Participant.Complete] or
// [Participant.Fail] (by [RefOf] the command). The handler's writes are
// kept (typically the intent to do the work, keyed by the reference), the
// barrier records the forward as accepted, and the reply says so: the
// orchestrator stops re-sending and waits up to the step's accepted
// deadline. A copy of the command is answered accepted again until the
// step is settled; a query answers "accepted". A compensation that meets
// the accepted forward is held (answered retry) until it is settled.
// Forward handlers only: a compensation must not answer accepted.
func Accepted() Result { return Result{Outcome: message.Accepted} }

// AcceptedCancellable is [Accepted] for a step that can be cancelled
// while it is accepted: a compensation that meets it settles the forward
// as failed (reason [ReasonCancelled]) and is answered as an empty
// compensation at once, and a later Complete or Fail of it returns
// ErrCancelled (the caller undoes or abandons its own work).
func AcceptedCancellable() Result {
	return Result{Outcome: message.Accepted, Payload: message.AcceptedAnswer{Cancellable: true}}
}

// cancellable reports whether an Accepted result says the step can be
// cancelled.
func (r Result) cancellable() bool {
	a, ok := r.Payload.(message.AcceptedAnswer)
	return ok && a.Cancellable
}

// Ref is the reference of a step a participant answered accepted: its
// barrier key, the saga and the step (one forward per step of a saga).
// Store it with the work to finish (String) and settle the step with it.
type Ref struct {
	SagaID uuid.UUID
	Step   string
}

// RefOf is the reference of cmd's step.
func RefOf(cmd message.Command) Ref { return Ref{SagaID: cmd.SagaID, Step: cmd.Step} }

// String is "<saga id>/<step>"; ParseRef reads it back.
func (r Ref) String() string { return r.SagaID.String() + "/" + r.Step }

// ParseRef reads a reference written by Ref.String.
func ParseRef(s string) (Ref, error) {
	id, step, ok := strings.Cut(s, "/")
	if !ok || step == "" {
		return Ref{}, fmt.Errorf("participants: step reference %q: want <saga id>/<step>", message.Truncate(s, 120))
	}
	u, err := uuid.Parse(id)
	if err != nil {
		return Ref{}, fmt.Errorf("participants: step reference %q: saga id: %w", message.Truncate(s, 120), err)
	}
	return Ref{SagaID: u, Step: step}, nil
}

// Errors of Complete and Fail; the step is left as it was.
var (
	// ErrUnknownRef: no forward was recorded under the reference.
	ErrUnknownRef = errors.New("no step recorded under this reference")
	// ErrSettled: the step is not accepted (any more): it was settled
	// already, or never accepted. The error says what was recorded.
	ErrSettled = errors.New("step is not accepted")
	// ErrCancelled (with ErrSettled): a compensation cancelled the
	// accepted step (it was answered cancellable); the caller's own work
	// for it must be undone or abandoned, not reported.
	ErrCancelled = errors.New("step cancelled by its compensation")
)

// Complete settles the accepted step ref as done with output (a value
// that encodes to a JSON object, or nil): the barrier records success and
// the reply to the latest copy of its command is enqueued in the
// participant's outbox, both in tx, the caller's transaction, so the step
// is settled exactly when the caller's own writes commit. Errors: see
// ErrUnknownRef, ErrSettled and ErrCancelled; others are the database's.
func (p *Participant) Complete(ctx context.Context, tx pgx.Tx, ref Ref, output any) error {
	payload, err := encodePayload(output)
	if err != nil {
		return fmt.Errorf("participant %q: complete %s: %w", p.cfg.Name, ref, err)
	}
	return p.settleAccepted(ctx, tx, ref, message.Success, "", payload)
}

// Fail settles the accepted step ref as a business failure with reason:
// as Complete, recording failure (the orchestrator then compensates what
// took effect before it). The caller must have left no effect of the step.
func (p *Participant) Fail(ctx context.Context, tx pgx.Tx, ref Ref, reason string) error {
	return p.settleAccepted(ctx, tx, ref, message.Failure, message.Truncate(reason, message.MaxReasonBytesDefault), nil)
}

// settleAccepted records outcome for the accepted forward ref and enqueues
// its reply, in tx.
func (p *Participant) settleAccepted(ctx context.Context, tx pgx.Tx, ref Ref, outcome message.Outcome, reason string, payload *string) error {
	op := fmt.Sprintf("participant %q: settle %s as %s", p.cfg.Name, ref, outcome)
	var (
		cmdID   uuid.UUID
		replyTo string
		stored  *string
	)
	err := tx.QueryRow(ctx, p.barrier.settleAccepted, ref.SagaID, ref.Step, string(outcome), reason, payload).Scan(&cmdID, &replyTo, &stored)
	if errors.Is(err, pgx.ErrNoRows) {
		return p.notAccepted(ctx, tx, ref, op)
	}
	if err != nil {
		return fmt.Errorf("%s: record outcome: %w", op, err)
	}
	r := message.Reply{MessageID: uuid.New(), InReplyTo: cmdID, SagaID: ref.SagaID, Step: ref.Step,
		Action: message.Forward, Outcome: outcome, Reason: reason}
	if stored != nil && *stored != "null" {
		r.Payload = []byte(*stored)
	}
	value, err := message.EncodeReply(r)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	msg := outbox.Message{Topic: replyTo, Key: ref.SagaID.String(), Value: value, Headers: message.Headers(r.MessageID, r.SagaID)}
	p.signReply(msg.Topic, msg.Key, msg.Value, msg.Headers)
	if err := p.outbox.Enqueue(ctx, tx, msg); err != nil {
		return fmt.Errorf("%s: enqueue the reply: %w", op, err)
	}
	p.cfg.Logger.DebugContext(ctx, "accepted step settled", slog.String("participant", p.cfg.Name), slog.String("saga_id", ref.SagaID.String()),
		slog.String("step", ref.Step), slog.String("outcome", string(outcome)))
	return nil
}

// notAccepted explains why ref could not be settled.
func (p *Participant) notAccepted(ctx context.Context, tx pgx.Tx, ref Ref, op string) error {
	var rec recorded
	err := tx.QueryRow(ctx, p.barrier.read, ref.SagaID, ref.Step, string(message.Forward)).Scan(&rec.outcome, &rec.reason, &rec.payload, &rec.closed, &rec.cancellable)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%s: %w", op, ErrUnknownRef)
	case err != nil:
		return fmt.Errorf("%s: read the forward: %w", op, err)
	case rec.closed:
		return fmt.Errorf("%s: %w: %w (the forward is closed, reason %q)", op, ErrSettled, ErrCancelled, rec.reason)
	}
	return fmt.Errorf("%s: %w: the forward recorded %s", op, ErrSettled, rec.outcome)
}
