package sagatest

import (
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/message"
)

// TB is what the kit needs of a test: *testing.T, *testing.B and
// *testing.F (any testing.TB) satisfy it. Fatalf must not return (the
// testing package's stops the test's goroutine).
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// PanicT is a [TB] for use outside a test (examples, a main program): Fatalf
// panics with the message.
type PanicT struct{}

// Helper does nothing.
func (PanicT) Helper() {}

// Fatalf panics with the formatted message.
func (PanicT) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }

// Actions, re-exported so that a test needs not import package message.
const (
	Forward    = message.Forward
	Compensate = message.Compensate
	Query      = message.Query
)

// DefaultStart is where a harness's clock starts unless [StartAt] says
// otherwise.
var DefaultStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// maxTimers bounds the timer events one call fires, so that a saga that
// keeps re-sending (steps after the pivot retry forever) fails the test
// instead of hanging it.
const maxTimers = 100_000

// Option configures a [Harness].
type Option func(*config)

type config struct {
	id             uuid.UUID
	start          time.Time
	secret         []byte
	data           any
	aggregate, key string
}

// SagaID sets the saga's id. Default: derived from the definition's name,
// so runs repeat.
func SagaID(id uuid.UUID) Option { return func(c *config) { c.id = id } }

// StartAt sets where the clock starts. Default: [DefaultStart].
func StartAt(t time.Time) Option { return func(c *config) { c.start = t } }

// Secret sets the saga's command-id secret (see [saga.Instance.CommandID]).
// Default: derived from the saga id, so command ids repeat across runs.
func Secret(b []byte) Option {
	return func(c *config) { c.secret = append([]byte(nil), b...) }
}

// Data sets the saga's data: a value of the definition's data type, which
// is encoded to JSON, or JSON itself as json.RawMessage or []byte. Default:
// {} (the zero value of most data types).
func Data(v any) Option { return func(c *config) { c.data = v } }

// AggregateID sets the saga's aggregate id (the commands' Kafka key).
// Default: "aggregate-1".
func AggregateID(id string) Option { return func(c *config) { c.aggregate = id } }

// IdempotencyKey sets the saga's idempotency key. Default: the saga id.
func IdempotencyKey(key string) Option { return func(c *config) { c.key = key } }

// Answer is a participant's answer to a command.
type Answer struct {
	Outcome message.Outcome
	// Reason goes with a failure or a retry (and may note a compensation).
	Reason string
	// Payload is the step's output on success: a value encoded to JSON, or
	// JSON itself (json.RawMessage or []byte); nil for none.
	Payload any
}

// Succeeded is a success answer with the step's output (nil for none).
func Succeeded(payload any) Answer { return Answer{Outcome: message.Success, Payload: payload} }

// Failed is a business failure: the action was not done.
func Failed(reason string) Answer { return Answer{Outcome: message.Failure, Reason: reason} }

// RetryLater is a retry answer: not now, ask again.
func RetryLater(reason string) Answer { return Answer{Outcome: message.Retry, Reason: reason} }

// AcceptedLater is an accepted answer to a forward: the participant will
// settle the step later (answer the same command again with [Succeeded]
// or [Failed]: [Harness.Succeed] and [Harness.Fail] do). cancellable is
// what the participant says about cancelling it meanwhile
// (message.AcceptedAnswer).
func AcceptedLater(cancellable bool) Answer {
	a := Answer{Outcome: message.Accepted}
	if cancellable {
		a.Payload = message.AcceptedAnswer{Cancellable: true}.Encode()
	}
	return a
}

// Recorded is the answer to a query: what the participant's barrier
// recorded for the step's forward, and with [message.QueryDone] its output
// (nil for none; encoded like [Answer.Payload]).
func Recorded(state message.QueryState, output any) Answer {
	a := message.QueryAnswer{State: state}
	if output != nil {
		b, err := encode(output)
		if err != nil {
			panic(fmt.Sprintf("sagatest: Recorded: output %T: %v", output, err))
		}
		a.Output = b
	}
	return Answer{Outcome: message.Success, Payload: a}
}
