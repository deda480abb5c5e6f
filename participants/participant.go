package participants

import (
	"context"
	"encoding/json"
	"fmt"

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
