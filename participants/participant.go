package participants

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/message"
)

// Result is what a step handler decided.
type Result struct {
	Outcome message.Outcome
	// Reason explains a failure or a retry; it travels in the reply.
	Reason string
	// Payload is the step output (any JSON-encodable value, or nil); it is
	// merged into the saga's data by the orchestrator.
	Payload any
}

// Success answers that the action took effect, with an optional output.
func Success(payload any) Result { return Result{Outcome: message.Success, Payload: payload} }

// Fail answers a definite business "no". The handler must leave no effect:
// the SDK rolls back the handler's writes for a failure.
func Fail(reason string) Result { return Result{Outcome: message.Failure, Reason: reason} }

// RetryLater answers a transient problem. Nothing is recorded, the handler's
// writes are rolled back, and the next copy of the command runs afresh.
func RetryLater(reason string) Result { return Result{Outcome: message.Retry, Reason: reason} }

// Handler runs one action (forward or compensate) of one step for a batch
// of commands inside the participant's transaction and returns one Result
// per command, in the same order. The commands are all of the step and the
// action, each of a different saga, in arrival order; a compensation always
// comes alone, and so does a command run again on its own.
//
// A batch counts only when every Result keeps its writes (a Success, or an
// Accepted): any other Result, a result count that does not match or an
// error rolls back the handler's writes for the whole batch and the SDK
// runs it again one command at a time, so each failure or retry undoes its
// own writes alone. A batch handler therefore gets only the common case
// right (typically one set-based statement) and answers anything else, say
// [RetryLater], for a command that is not the plain case: the run alone
// decides. The SDK may call it for the same batch once more before that
// (it runs a batch ahead of the barrier's checks, and again behind them
// when a check or a result asks for it); only the last call's writes stay.
//
// A returned error is an infrastructure problem (the database went away):
// the transaction rolls back and the command is processed again. An error
// wrapping message.ErrInvalid (see [Decode] and [InvalidField]) is the
// sender's: the command is answered failure "invalid_payload: ...". Business
// outcomes are Results, never errors.
type Handler func(ctx context.Context, tx pgx.Tx, cmds []message.Command) ([]Result, error)

// One makes a Handler of a function that takes one command at a time: it
// calls f for each command of a batch in turn, and stops at the first
// result that is not a Success (the SDK then runs the commands alone).
func One(f func(ctx context.Context, tx pgx.Tx, cmd message.Command) (Result, error)) Handler {
	return func(ctx context.Context, tx pgx.Tx, cmds []message.Command) ([]Result, error) {
		out := make([]Result, 0, len(cmds))
		for _, cmd := range cmds {
			res, err := f(ctx, tx, cmd)
			if err != nil {
				return nil, err
			}
			out = append(out, res)
			if res.Outcome != message.Success {
				break
			}
		}
		return out, nil
	}
}

// WithBatch makes a Handler of one, for a command that comes alone, and
// many, a set-based form for a batch of several, which needs to get only
// the plain case right (see Handler).
func WithBatch(one func(ctx context.Context, tx pgx.Tx, cmd message.Command) (Result, error), many Handler) Handler {
	single := One(one)
	return func(ctx context.Context, tx pgx.Tx, cmds []message.Command) ([]Result, error) {
		if len(cmds) == 1 {
			return single(ctx, tx, cmds)
		}
		return many(ctx, tx, cmds)
	}
}

// AnswerBatch is a batch Handler's results for cmds from what its statement did
// per saga (done, keyed by saga id): Success(payload(v)) for a command whose
// saga is in done, and for any other a result that is not Success, so the
// command is run again alone, where the handler says why.
func AnswerBatch[V any](cmds []message.Command, done map[uuid.UUID]V, payload func(V) any) []Result {
	out := make([]Result, len(cmds))
	for i, cmd := range cmds {
		if v, ok := done[cmd.SagaID]; ok {
			out[i] = Success(payload(v))
		} else {
			out[i] = RetryLater("not done in the batch; handled alone")
		}
	}
	return out
}

// Decode unmarshals cmd.Payload into T, for use in a handler. A
// payload that does not fit T is the sender's bug: the error names the step
// and the field, and the SDK routes the command to the dead-letter topic.
func Decode[T any](cmd message.Command) (T, error) {
	var v T
	if len(cmd.Payload) == 0 {
		return v, fmt.Errorf("%w: step %q %s: empty payload", message.ErrInvalid, cmd.Step, cmd.Action)
	}
	if err := json.Unmarshal(cmd.Payload, &v); err != nil {
		return v, fmt.Errorf("%w: step %q %s: payload: %v", message.ErrInvalid, cmd.Step, cmd.Action, err)
	}
	return v, nil
}
