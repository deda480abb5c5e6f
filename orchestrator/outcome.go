package orchestrator

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/outbox"
	"github.com/sagaflow/sagaflow/saga"
)

// OutcomeTopicDefault is where the engine writes a record for every end
// of a saga and every flag (EngineConfig.OutcomeTopic).
const OutcomeTopicDefault = message.OutcomeTopicDefault

// outcomeNamespace derives an outcome record's message id from its saga and
// the version the transition wrote, so the id is the same however often
// the record is published.
var outcomeNamespace = uuid.MustParse("6f0b8d4e-2f4c-4d5e-9a57-0c1e4f0a5b21")

// outcomeOf is the outcome record a decision writes: one when it brought
// its saga to a terminal state (finishedBy), one when it flagged it, none
// otherwise. A decision that changes nothing (a replayed reply, a
// duplicate event) never writes one, so each end is written exactly once:
// in the transaction of the transition itself.
func outcomeOf(d *saga.Decision) (message.SagaOutcome, bool) {
	n := &d.Next
	kind := ""
	switch {
	case !d.Changed:
		return message.SagaOutcome{}, false
	case finishedBy(d):
		kind = message.OutcomeFinished
	case d.Flagged:
		kind = message.OutcomeFlagged
	default:
		return message.SagaOutcome{}, false
	}
	o := message.SagaOutcome{
		SagaID: n.ID, Type: n.Type, AggregateID: n.AggregateID, IdempotencyKey: n.IdempotencyKey,
		Kind: kind, State: string(n.State), Data: n.Data,
		// As stored: Postgres keeps microseconds.
		At: n.UpdatedAt.Truncate(time.Microsecond),
	}
	if len(o.Data) == 0 {
		o.Data = json.RawMessage("{}")
	}
	for _, j := range d.Journal {
		if j.Reason != "" {
			o.Reason = j.Reason
		}
		if j.Actor != "" {
			o.Actor = j.Actor
		}
	}
	switch {
	case kind == message.OutcomeFlagged:
		o.Reason = n.Flag
	case o.Reason == "" && n.State != saga.Completed:
		o.Reason = failedStep(n)
	}
	return o, true
}

// failedStep says which step of in failed and why ("" if none did): the
// reason of a saga that compensated or failed after a step's failure, when
// the decision that ended it (the last compensation's answer) has none.
func failedStep(in *saga.Instance) string {
	for _, s := range in.Steps {
		if s.State == saga.StepFailed {
			if s.LastError == "" {
				return fmt.Sprintf("step %q failed", s.Name)
			}
			return fmt.Sprintf("step %q failed: %s", s.Name, s.LastError)
		}
	}
	return ""
}

// outcomeMessage is d's outcome record for the outbox (ok false: none),
// keyed by the aggregate id, signed like the commands when they are.
func (e *Engine) outcomeMessage(d *saga.Decision) (outbox.Message, bool, error) {
	o, ok := outcomeOf(d)
	if !ok {
		return outbox.Message{}, false, nil
	}
	b, err := json.Marshal(o)
	if err != nil {
		return outbox.Message{}, false, fmt.Errorf("encode the outcome of saga %s: %w", o.SagaID, err)
	}
	id := uuid.NewSHA1(outcomeNamespace, []byte(o.SagaID.String()+"/"+strconv.FormatInt(d.Next.Version, 10)))
	m := outbox.Message{Topic: e.cfg.OutcomeTopic, Key: o.AggregateID, Value: b, Headers: message.Headers(id, o.SagaID)}
	if s := e.cfg.Signing.Commands; s != nil {
		s.SignString(m.Topic, m.Key, m.Value, m.Headers)
	}
	return m, true, nil
}

// OutcomeTopic is the topic of the engine's outcome records.
func (e *Engine) OutcomeTopic() string { return e.cfg.OutcomeTopic }
