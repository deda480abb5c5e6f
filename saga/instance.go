package saga

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/message"
)

// State is a saga's state.
type State string

const (
	Running      State = "running"
	Compensating State = "compensating"
	Completed    State = "completed"
	Compensated  State = "compensated"
	// Failed needs an operator: a step after the pivot answered a business
	// failure, or the pivot's outcome stayed unknown past its deadline.
	Failed State = "failed"
)

// Terminal reports whether s has no outgoing edge but operator repair.
func (s State) Terminal() bool { return s == Completed || s == Compensated || s == Failed }

// Valid reports whether s is a known saga state.
func (s State) Valid() bool {
	switch s {
	case Running, Compensating, Completed, Compensated, Failed:
		return true
	}
	return false
}

// StepStatus is a step's state.
type StepStatus string

const (
	StepPending StepStatus = "pending"
	// StepRunning: a forward command was sent; waiting for its reply or timeout.
	StepRunning StepStatus = "running"
	// StepRetrying: waiting for the backoff before re-sending the forward.
	StepRetrying  StepStatus = "retrying"
	StepSucceeded StepStatus = "succeeded"
	// StepFailed: a definite business failure; nothing of it remains.
	StepFailed StepStatus = "failed"
	// StepUnknown: the saga gave up on the forward without a definite
	// answer (its deadline passed, or its retry answers reached
	// Retry.MaxAttempts); before the pivot it is compensated, which the
	// barrier makes safe whatever happened; at the pivot the saga is failed.
	StepUnknown StepStatus = "unknown"
	// StepQuerying: the forward was given up without a definite answer and
	// the participant is being asked (a query command) what its barrier
	// recorded; the answer settles the step (done: succeeded; failed or
	// closed: failed; compensated), and only if no query is answered does
	// the give-up go ahead (StepUnknown).
	StepQuerying StepStatus = "querying"
	// StepAccepted: the participant answered the forward accepted: it will
	// settle it later (success or failure, a reply of its own). Nothing is
	// re-sent; DueAt is the accepted deadline, after which the step is
	// given up like a forward without a definite answer (queried first;
	// after the pivot re-sent). Cancellable says whether a compensation may
	// cancel it meanwhile: when the saga turns back, a cancellable accepted
	// step is compensated at once (its participant settles it as failed),
	// any other is held in flight until it is settled.
	StepAccepted     StepStatus = "accepted"
	StepCompensating StepStatus = "compensating"
	StepCompRetrying StepStatus = "compensation_retrying"
	StepCompensated  StepStatus = "compensated"
	// StepSkipped: the step's When predicate (or its group's) was false
	// when it was reached; it was never sent and is never compensated.
	StepSkipped StepStatus = "skipped"
	// StepWaiting: a wait step waits for its event (DueAt: its deadline).
	StepWaiting StepStatus = "waiting"
)

// inFlight reports whether a step in status st has a forward out whose
// outcome is not settled yet (running, retrying or querying).
func (st StepStatus) inFlight() bool {
	return st == StepRunning || st == StepRetrying || st == StepQuerying || st == StepAccepted
}

// awaiting reports whether a step in status st awaits an answer, a timer
// or an event (it is active).
func (st StepStatus) awaiting() bool {
	switch st {
	case StepRunning, StepRetrying, StepQuerying, StepAccepted, StepCompensating, StepCompRetrying, StepWaiting:
		return true
	}
	return false
}

// ReceivedEvent is an external event recorded on the wait step that takes
// it (Engine.SendEvent): kept until the saga reaches the wait, then taken.
type ReceivedEvent struct {
	// ID is the sender's event id: the same id again is a no-op.
	ID   string          `json:"id"`
	Data json.RawMessage `json:"data,omitempty"`
	At   time.Time       `json:"at"`
	// Taken is set once the wait step took (merged or refused) the event.
	Taken bool `json:"taken,omitempty"`
}

// StepState is the persisted state of one step of one saga.
type StepState struct {
	Name  string     `json:"name"`
	Kind  Kind       `json:"kind"`
	State StepStatus `json:"state"`
	// Attempts counts forward sends; CompAttempts compensation sends.
	Attempts     int `json:"attempts"`
	CompAttempts int `json:"compensation_attempts"`
	// RetryAnswers counts the forward's `retry` answers (what
	// Retry.MaxAttempts bounds before and at the pivot; timeouts are bounded
	// by the step's deadline instead). Absent in rows written before it
	// existed: zero.
	RetryAnswers int `json:"retry_answers,omitempty"`
	// QueryAttempts counts query sends after the forward was given up.
	QueryAttempts int `json:"query_attempts,omitempty"`
	// QueryUntil is the QueryAttempts count at which the current round of
	// queries ends (it keeps counting across rounds, so every query send
	// has an id of its own).
	QueryUntil int `json:"query_until,omitempty"`
	// AcceptedAt is when the forward was answered accepted (the latest
	// time, if it was accepted again after a re-send); Cancellable is what
	// that answer said (message.AcceptedAnswer).
	AcceptedAt  *time.Time `json:"accepted_at,omitempty"`
	Cancellable bool       `json:"cancellable,omitempty"`
	// AwaitID is the message id of the latest command sent for the step.
	AwaitID uuid.UUID `json:"await_id,omitzero"`
	// DueAt is when the active command times out (running, compensating) or
	// is re-sent (retrying, compensation_retrying).
	DueAt            *time.Time      `json:"due_at,omitempty"`
	StartedAt        *time.Time      `json:"started_at,omitempty"`
	FinishedAt       *time.Time      `json:"finished_at,omitempty"`
	CompStartedAt    *time.Time      `json:"compensation_started_at,omitempty"`
	CompFinishedAt   *time.Time      `json:"compensation_finished_at,omitempty"`
	LastError        string          `json:"last_error,omitempty"`
	Output           json.RawMessage `json:"output,omitempty"`
	CompensationNote string          `json:"compensation_note,omitempty"`
	// Seq orders completions: the saga's n-th step to succeed has Seq n
	// (compensation runs in reverse order of completion). Zero in rows
	// written before it existed, and for steps not succeeded.
	Seq int `json:"done_seq,omitempty"`
	// Events (wait steps) are the events received for the step, kept until
	// it is reached and then taken in order.
	Events []ReceivedEvent `json:"events,omitempty"`
}

// Instance is one saga's persisted state.
type Instance struct {
	ID             uuid.UUID       `json:"id"`
	Type           string          `json:"type"`
	DefVersion     int             `json:"definition_version"`
	AggregateID    string          `json:"aggregate_id"`
	IdempotencyKey string          `json:"idempotency_key"`
	State          State           `json:"state"`
	Data           json.RawMessage `json:"data"`
	Steps          []StepState     `json:"steps"`
	// Cursor is the index of the active step (forward or compensation).
	Cursor  int   `json:"cursor"`
	Version int64 `json:"version"`
	// Flag is non-empty when the saga needs an operator's eye while it keeps
	// retrying (compensation or post-pivot retries beyond the threshold).
	Flag       string     `json:"flag,omitempty"`
	DeadlineAt *time.Time `json:"deadline_at,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	UpdatedAt  time.Time  `json:"updated_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	// Secret keys the saga's command ids (CommandID); stored with the saga,
	// never shown.
	Secret []byte `json:"-"`
	// TraceParent and TraceState are the W3C trace context every command of
	// the saga carries (headers traceparent, tracestate): the start's, or
	// the span of the start when tracing is on; empty when neither.
	TraceParent string `json:"traceparent,omitempty"`
	TraceState  string `json:"tracestate,omitempty"`
}

// CurrentStep is the name of the active step, or "" for a terminal saga.
func (in *Instance) CurrentStep() string {
	if in.State.Terminal() || in.Cursor < 0 || in.Cursor >= len(in.Steps) {
		return ""
	}
	return in.Steps[in.Cursor].Name
}

// NextWakeup is when a timer must look at the saga: the earliest due time
// of its active steps or the pre-pivot deadline, whichever is first. Nil
// when terminal.
func (in *Instance) NextWakeup() *time.Time {
	if in.State.Terminal() {
		return nil
	}
	var w *time.Time
	// Only active steps (the members of the active unit that await
	// something) have a due time.
	for i := range in.Steps {
		if d := in.Steps[i].DueAt; d != nil && (w == nil || d.Before(*w)) {
			w = d
		}
	}
	if in.State == Running && in.DeadlineAt != nil && (w == nil || in.DeadlineAt.Before(*w)) {
		w = in.DeadlineAt
	}
	return w
}

func (in Instance) clone() Instance {
	out := in
	out.Steps = append([]StepState(nil), in.Steps...)
	return out
}

// NewInstance returns a fresh, not yet started instance of def.
func NewInstance(def *Def, id uuid.UUID, aggregateID, idempotencyKey string, data json.RawMessage, now time.Time) Instance {
	in := Instance{
		ID: id, Type: def.Name, DefVersion: def.Version, AggregateID: aggregateID,
		IdempotencyKey: idempotencyKey, State: Running, Data: data, Cursor: -1,
		CreatedAt: now, UpdatedAt: now,
	}
	for _, s := range def.Steps {
		in.Steps = append(in.Steps, StepState{Name: s.Name, Kind: s.Kind, State: StepPending})
	}
	return in
}

// EventKind says where an event came from.
type EventKind string

const (
	EventStart    EventKind = "start"
	EventReply    EventKind = "reply"
	EventTimer    EventKind = "timer"
	EventOperator EventKind = "operator"
	// EventExternal is an external event sent to the saga (External).
	EventExternal EventKind = "event"
	// EventCancel is a cancel asked by the saga's client (Cancel).
	EventCancel EventKind = "cancel"
)

// OperatorAction is what an operator asked for.
type OperatorAction string

const (
	// ActionRetry re-sends the active step's command now, skipping backoff.
	ActionRetry OperatorAction = "retry"
	// ActionCompensate starts compensation now; refused once the pivot was sent.
	ActionCompensate OperatorAction = "compensate"
	// ActionResolve settles a failed saga with a supplied outcome.
	ActionResolve OperatorAction = "resolve"
	// ActionQuery asks the participant of the active step what its barrier
	// recorded (a query command) and settles the step by the answer: for a
	// failed saga whose pivot was given up without a definite answer (the
	// saga runs again while the query is out), or a running step now.
	ActionQuery OperatorAction = "query"
	// ActionCheck sends a query for every step of a finished saga that was
	// sent, to compare the participants' records with the saga's (the
	// reconciler); the answers change nothing and journal each difference.
	ActionCheck OperatorAction = "check"
	// ActionCancel is not an operator action but the client's cancel
	// (EventCancel); its refusals are *RefusedError with this action.
	ActionCancel OperatorAction = "cancel"
	// ActionMarkDone is a repair: the operator marks a step done with an
	// output found elsewhere (Operator.Output, merged like a participant's
	// payload) and the saga moves on as if the step had succeeded. Allowed
	// for a flagged step after the pivot that is still retrying, or a step
	// being queried.
	ActionMarkDone OperatorAction = "mark-done"
	// ActionMarkCompensated is a repair: a compensation that can never
	// succeed is marked done, with a note of what the operator did instead;
	// the saga continues compensating (or ends compensated).
	ActionMarkCompensated OperatorAction = "mark-compensated"
	// ActionForceFail is a repair: a running or compensating saga is forced
	// to failed; nothing more is sent and its timers are cleared.
	ActionForceFail OperatorAction = "force-fail"
	// ActionResume is a repair: a failed saga runs forward again from a
	// chosen step (Operator.Step); every step before it must have succeeded.
	ActionResume OperatorAction = "resume"
)

// Repair reports whether a is one of the repair actions (mark-done,
// mark-compensated, force-fail, resume), which need a reason and may carry
// a ticket.
func (a OperatorAction) Repair() bool {
	switch a {
	case ActionMarkDone, ActionMarkCompensated, ActionForceFail, ActionResume:
		return true
	}
	return false
}

// ActorReconciler is the actor of the transitions the orchestrator makes on
// its own to settle unknown outcomes and reconcile (queries and their
// answers).
const ActorReconciler = "reconciler"

// Operator carries an operator event's fields.
type Operator struct {
	Action OperatorAction `json:"action"`
	Actor  string         `json:"actor"`
	Reason string         `json:"reason"`
	// Outcome (resolve only): completed or compensated.
	Outcome State `json:"outcome,omitempty"`
	// Ticket is an optional reference (an incident, a change request)
	// journaled with the action.
	Ticket string `json:"ticket,omitempty"`
	// Step names the step a repair acts on: required for resume (where the
	// saga goes forward from); for mark-done and mark-compensated it
	// defaults to the active step and must be it when given.
	Step string `json:"step,omitempty"`
	// Output (mark-done only) is the step's output as the operator found
	// it, merged into the saga's data like a participant's reply payload.
	Output json.RawMessage `json:"output,omitempty"`
	// Note (mark-compensated only) says what the operator did instead of
	// the compensation; the reason when empty.
	Note string `json:"note,omitempty"`
}

// External is an external event sent to a saga (EventExternal).
type External struct {
	// Name is the event's name: what a wait step of the definition waits for.
	Name string `json:"name"`
	// ID is the sender's id of the event: the same id again is a no-op.
	ID string `json:"event_id"`
	// Data is the event's JSON object (empty: {}).
	Data json.RawMessage `json:"data,omitempty"`
}

// Cancel is a client's cancel of a saga (EventCancel).
type Cancel struct {
	Actor  string `json:"actor"`
	Reason string `json:"reason"`
}

// Event is anything that may move a saga.
type Event struct {
	Kind     EventKind
	At       time.Time
	Reply    *message.Reply
	Operator *Operator
	External *External
	Cancel   *Cancel
}

// Outgoing is a command to publish to a participant.
type Outgoing struct {
	Participant string
	Command     message.Command
}

// JournalEntry is one row of a saga's history.
type JournalEntry struct {
	ID        int64      `json:"id,omitempty"`
	SagaID    uuid.UUID  `json:"saga_id"`
	At        time.Time  `json:"at"`
	Event     string     `json:"event"`
	From      State      `json:"from,omitempty"`
	To        State      `json:"to,omitempty"`
	Step      string     `json:"step,omitempty"`
	Action    string     `json:"action,omitempty"`
	MessageID *uuid.UUID `json:"message_id,omitempty"`
	Actor     string     `json:"actor,omitempty"`
	Reason    string     `json:"reason,omitempty"`
	// Ticket is the reference an operator's repair carried.
	Ticket string `json:"ticket,omitempty"`
	// Ignored marks late, stray or illegal events that changed nothing.
	Ignored bool `json:"ignored,omitempty"`
}

// Decision is what Decide returns.
type Decision struct {
	// Changed is false when nothing is to be written but (maybe) Journal.
	Changed bool
	Next    Instance
	Send    []Outgoing
	Journal []JournalEntry
	// Late is set when the event was a reply no longer awaited.
	Late bool
	// Illegal is set when the event is not allowed by the transition table.
	Illegal bool
	// Outcomes of steps settled by this event (for metrics).
	Settled []SettledStep
	// Differences found by a query answer that disagrees with the saga (a
	// check of a finished saga; see ActionCheck).
	Differences []Difference
	// Duplicate is set when an external event's id was already recorded
	// (nothing changed).
	Duplicate bool
	// WaitsTimedOut counts the wait steps whose deadline passed in this
	// decision (for metrics).
	WaitsTimedOut int
	// Flagged is set when this decision flagged the saga for an operator
	// (Next.Flag set, the saga had none): the engine writes a flag outcome.
	Flagged bool
}

// Difference is a disagreement between a saga and a participant's record,
// found by a query answer.
type Difference struct {
	// Kind is a stable label, e.g. "participant_done_saga_compensated".
	Kind   string `json:"kind"`
	Step   string `json:"step"`
	Detail string `json:"detail"`
}

// SettledStep reports a step action that received a definite answer.
type SettledStep struct {
	Step     string
	Action   message.Action
	Outcome  message.Outcome
	Duration time.Duration
}

// Sentinel errors of the state machine and engine.
var (
	ErrUnknownType = errors.New("unknown saga type")
	ErrUnknownStep = errors.New("unknown step")
	ErrNotFound    = errors.New("saga not found")
	// ErrRefused: an operator action not allowed in the saga's state.
	ErrRefused = errors.New("operator action refused")
	// ErrStrayReply: a reply whose in_reply_to is not a command the saga
	// sent for that step and action. It wraps message.ErrInvalid, so the
	// inbox sends it to the dead-letter topic with the reason.
	ErrStrayReply = fmt.Errorf("%w: stray reply", message.ErrInvalid)
)

// RefusedError explains why an operator action was refused.
type RefusedError struct {
	Action OperatorAction
	Why    string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("%v: %s: %s", ErrRefused, e.Action, e.Why)
}
func (e *RefusedError) Unwrap() error { return ErrRefused }

// Errors of an external event (EventExternal) that was not recorded; every
// *EventError wraps one of them.
var (
	// ErrEventInvalid: the event itself is malformed (no name or id, data
	// not a JSON object, too long).
	ErrEventInvalid = errors.New("invalid event")
	// ErrEventFinished: the saga has finished; it waits for nothing.
	ErrEventFinished = errors.New("saga finished")
	// ErrEventUnknown: the definition never waits for an event of that name.
	ErrEventUnknown = errors.New("event name not waited for")
	// ErrEventNotAwaited: the saga waits for that name no more (its waits
	// are past, or it is compensating), or keeps too many events already.
	ErrEventNotAwaited = errors.New("event not awaited")
)

// EventError explains why an external event was not recorded.
type EventError struct {
	Kind error // one of the ErrEvent* sentinels
	Name string
	Why  string
}

func (e *EventError) Error() string {
	return fmt.Sprintf("event %q: %v: %s", e.Name, e.Kind, e.Why)
}
func (e *EventError) Unwrap() error { return e.Kind }
