// Package refstep is the code the reference participants share: a step
// described once (its typed payload, the payload's checks, its handlers
// on the decoded payload, transient-failure injection) and registered on
// a participant, so each reference participant holds only its business
// logic.
package refstep

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/participants"
	"github.com/sagaflow/sagaflow/participants/flaky"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

// Step is one step of a reference participant, with its payload type In.
type Step[In any] struct {
	// Name is the step's name.
	Name string
	// Check validates a decoded payload: the field that is wrong and why,
	// or "" when it is fine (the command is then invalid: see
	// participants.InvalidField).
	Check func(in In) (field, why string)
	// Forward is the forward action of one command.
	Forward func(ctx context.Context, tx pgx.Tx, cmd message.Command, in In) (participants.Result, error)
	// ForwardMany, if set, is the set-based form for a batch of several
	// forwards (participants.WithBatch), with their payloads.
	ForwardMany func(ctx context.Context, tx pgx.Tx, cmds []message.Command, ins []In) ([]participants.Result, error)
	// Compensate, if set, undoes a forward.
	Compensate func(ctx context.Context, tx pgx.Tx, cmd message.Command, in In) (participants.Result, error)
	// Flaky makes a forward answer RetryLater(orderapi.ReasonTransient)
	// now and then, without running.
	Flaky flaky.Options
}

// Handlers are a step's handlers as the participant runs them: each
// decodes and checks the payload first, and a forward the fault option
// fails answers RetryLater without running.
type Handlers struct {
	Forward func(ctx context.Context, tx pgx.Tx, cmd message.Command) (participants.Result, error)
	// ForwardMany is nil without Step.ForwardMany.
	ForwardMany participants.Handler
	// Compensate is nil without Step.Compensate.
	Compensate func(ctx context.Context, tx pgx.Tx, cmd message.Command) (participants.Result, error)
}

// Build checks s and returns its handlers.
func Build[In any](s Step[In]) (Handlers, error) {
	if err := s.Flaky.Validate(); err != nil {
		return Handlers{}, err
	}
	h := Handlers{Forward: func(ctx context.Context, tx pgx.Tx, cmd message.Command) (participants.Result, error) {
		in, err := s.decode(cmd)
		if err != nil {
			return participants.Result{}, err
		}
		if s.Flaky.Fails(cmd) {
			return participants.RetryLater(orderapi.ReasonTransient), nil
		}
		return s.Forward(ctx, tx, cmd, in)
	}}
	if s.ForwardMany != nil {
		h.ForwardMany = s.many
	}
	if s.Compensate != nil {
		h.Compensate = func(ctx context.Context, tx pgx.Tx, cmd message.Command) (participants.Result, error) {
			in, err := s.decode(cmd)
			if err != nil {
				return participants.Result{}, err
			}
			return s.Compensate(ctx, tx, cmd, in)
		}
	}
	return h, nil
}

// Register registers on p the step that step builds for p's schema;
// errors start with the participant's name.
func Register[In any](p *participants.Participant, participant string, step func(schema string) Step[In]) error {
	if p == nil {
		return fmt.Errorf("%s: Register: participant is nil", participant)
	}
	s := step(p.Schema())
	h, err := Build(s)
	if err != nil {
		return fmt.Errorf("%s: %w", participant, err)
	}
	forward := participants.One(h.Forward)
	if h.ForwardMany != nil {
		forward = participants.WithBatch(h.Forward, h.ForwardMany)
	}
	var compensate participants.Handler
	if h.Compensate != nil {
		compensate = participants.One(h.Compensate)
	}
	if err := p.Handle(s.Name, forward, compensate); err != nil {
		return fmt.Errorf("%s: Register: %w", participant, err)
	}
	return nil
}

// decode decodes and checks cmd's payload.
func (s *Step[In]) decode(cmd message.Command) (In, error) {
	in, err := participants.Decode[In](cmd)
	if err != nil {
		return in, err
	}
	if field, why := s.Check(in); field != "" {
		return in, participants.InvalidField(cmd, field, why)
	}
	return in, nil
}

// many decodes a batch and runs ForwardMany; a command the fault option
// fails answers RetryLater, which sends the batch to its commands alone.
// The set-based statements count on one command per saga.
func (s *Step[In]) many(ctx context.Context, tx pgx.Tx, cmds []message.Command) ([]participants.Result, error) {
	ins := make([]In, len(cmds))
	seen := make(map[[16]byte]bool, len(cmds))
	for i, cmd := range cmds {
		in, err := s.decode(cmd)
		if err != nil {
			return nil, err
		}
		if seen[cmd.SagaID] {
			// The SDK never batches two commands of one saga's step.
			return nil, fmt.Errorf("step %q: saga %s twice in one batch", s.Name, cmd.SagaID)
		}
		seen[cmd.SagaID] = true
		if s.Flaky.Fails(cmd) {
			return Stop(len(cmds), i, participants.RetryLater(orderapi.ReasonTransient)), nil
		}
		ins[i] = in
	}
	return s.ForwardMany(ctx, tx, cmds, ins)
}

// Table is the quoted name of table in schema.
func Table(schema, table string) string { return pgx.Identifier{schema, table}.Sanitize() }

// Read runs sql (rows of key and value) on db as a map, the error naming
// what was read.
func Read[K comparable, V any](ctx context.Context, db participants.DB, what, sql string, args ...any) (map[K]V, error) {
	out, err := participants.QueryMap[K, V](ctx, db, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}

// Stop is the results of a batch of n commands a set-based form gives up
// on at command i with res (not a Success): the batch runs again one
// command at a time.
func Stop(n, i int, res participants.Result) []participants.Result {
	out := make([]participants.Result, n)
	out[i] = res
	return out
}
