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

// Func runs one action of one step inside the participant's local
// transaction. A returned error is an infrastructure problem (the database
// went away): the whole transaction is rolled back and the command is
// processed again later. Business outcomes are Results, never errors.
type Func func(ctx context.Context, tx pgx.Tx, cmd message.Command) (Result, error)

// BatchFunc is the batch form of a step's forward handler, for the fast
// path of a batch of commands (HandleBatch): it runs the forward action of
// every command in cmds (all of the step, each of a different saga, in
// arrival order) inside the participant's transaction, typically with a
// set-based statement where the Func would run one per command, and returns
// one Result per command, in the same order.
//
// Its effect must be what the step's Func would have done for each command.
// It only has to get the common case right: any error, a result count that
// does not match, or any Result other than Success sends the whole batch to
// the one-by-one path, where the SDK rolls the batch's writes back and runs
// the step's Func for each command behind the full barrier protocol. So a
// BatchFunc answers a non-Success Result (or an error) whenever a command is
// not the plain case: short stock, an earlier effect for the saga, a payload
// it does not like. It never sees compensations, duplicates or copies
// already answered; the barrier keeps those on the one-by-one path.
type BatchFunc func(ctx context.Context, tx pgx.Tx, cmds []message.Command) ([]Result, error)

// AnswerBatch is a BatchFunc's results for cmds from what its statement did
// per saga (done, keyed by saga id): Success(payload(v)) for a command whose
// saga is in done, and for any other a result that is not Success, so the
// batch goes to the one-by-one path, where the step's Func says why.
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

// Decode unmarshals cmd.Payload into T, for use at the top of a Func. A
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
