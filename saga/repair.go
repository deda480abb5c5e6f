package saga

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/sagaflow/sagaflow/message"
)

// Journal events of the repair actions are JournalOperator + the action
// ("operator mark-done", ...), like every operator action.

// MaxTicketBytes bounds an operator's ticket reference.
const MaxTicketBytes = 200

// repair applies one of the repair actions (ActionMarkDone,
// ActionMarkCompensated, ActionForceFail, ActionResume). What each may do
// at which state is the table in docs/DESIGN.md ("Operator actions");
// everything else is refused with the saga's state and the step's.
func (m *machine) repair(op Operator, entry JournalEntry) error {
	if len(op.Ticket) > MaxTicketBytes || !utf8.ValidString(op.Ticket) || strings.ContainsRune(op.Ticket, 0) {
		return m.refused(op.Action, "ticket must be UTF-8 text without NUL characters, at most %d bytes", MaxTicketBytes)
	}
	entry.Ticket = op.Ticket
	switch op.Action {
	case ActionMarkDone:
		return m.markDone(op, entry)
	case ActionMarkCompensated:
		return m.markCompensated(op, entry)
	case ActionForceFail:
		return m.forceFail(op, entry)
	case ActionResume:
		return m.resume(op, entry)
	}
	return m.refused(op.Action, "not a repair action")
}

func (m *machine) refused(a OperatorAction, format string, args ...any) error {
	return &RefusedError{Action: a, Why: fmt.Sprintf(format, args...)}
}

// activeStep resolves the step a mark action names: the active one when
// op.Step is empty; a named step must be the active one.
func (m *machine) activeStep(op Operator) (int, error) {
	i := m.in.Cursor
	if op.Step == "" {
		return i, nil
	}
	j, ok := m.def.StepIndex(op.Step)
	if !ok {
		return 0, m.refused(op.Action, "the saga has no step %q", op.Step)
	}
	if j != i {
		return 0, m.refused(op.Action, "step %q is %s; the saga is %s at step %q %s, and only the active step can be marked",
			op.Step, m.in.Steps[j].State, m.in.State, m.in.Steps[i].Name, m.in.Steps[i].State)
	}
	return i, nil
}

// markDone: a flagged step after the pivot still retrying, or a step being
// queried, is marked succeeded with the operator's output; the saga moves
// on as if the participant had answered success with it.
func (m *machine) markDone(op Operator, entry JournalEntry) error {
	i, err := m.activeStep(op)
	if err != nil {
		return err
	}
	s := &m.in.Steps[i]
	allowed := m.in.State == Running && (s.State == StepQuerying ||
		(m.def.afterPivot(i) && m.in.Flag != "" && (s.State == StepRunning || s.State == StepRetrying)))
	if !allowed {
		where := "before the pivot"
		switch {
		case i == m.def.Pivot:
			where = "the pivot"
		case m.def.afterPivot(i):
			where = "after the pivot"
		}
		flag := "not flagged"
		if m.in.Flag != "" {
			flag = "flagged"
		}
		return m.refused(op.Action, "the saga is %s (%s) and step %q (%s) is %s; mark-done takes a flagged running saga's retrying step after the pivot, or a step being queried",
			m.in.State, flag, s.Name, where, s.State)
	}
	out := op.Output
	if len(out) > 0 && !json.Valid(out) {
		return m.refused(op.Action, "output is not valid JSON")
	}
	if _, err := m.def.Steps[i].onSuccess(m.in.Data, out); err != nil {
		return m.refused(op.Action, "step %q rejects the output: %v", s.Name, err)
	}
	entry.Step, entry.Action = s.Name, string(message.Forward)
	m.note(entry)
	s.LastError = ""
	m.in.Flag = ""
	m.forwardSucceeded(i, &message.Reply{Payload: out})
	return nil
}

// markCompensated: the compensation of the active step of a compensating
// saga is marked done with a note of what the operator did instead; the
// saga compensates the steps before it, or ends compensated.
func (m *machine) markCompensated(op Operator, entry JournalEntry) error {
	i, err := m.activeStep(op)
	if err != nil {
		return err
	}
	s := &m.in.Steps[i]
	if m.in.State != Compensating || (s.State != StepCompensating && s.State != StepCompRetrying) {
		return m.refused(op.Action, "the saga is %s and step %q is %s; mark-compensated takes a compensating saga's step whose compensation is running or retrying",
			m.in.State, s.Name, s.State)
	}
	note := op.Note
	if note == "" {
		note = op.Reason
	}
	if !utf8.ValidString(note) || strings.ContainsRune(note, 0) || len(note) > 2000 {
		return m.refused(op.Action, "note must be UTF-8 text without NUL characters, at most 2000 bytes")
	}
	entry.Step, entry.Action = s.Name, string(message.Compensate)
	m.note(entry)
	at := m.at
	s.State, s.DueAt, s.CompFinishedAt = StepCompensated, nil, &at
	s.CompensationNote = fmt.Sprintf("marked compensated by %s: %s", op.Actor, note)
	s.LastError = ""
	m.in.Flag = ""
	m.compensate()
	return nil
}

// forceFail: a running or compensating saga is failed now; no step has a
// due time left, so nothing more is sent. A forward in flight becomes
// unknown (a query or resume can settle it later); a compensation in
// flight is left re-sendable (compensation_retrying: an operator's retry
// re-opens it).
func (m *machine) forceFail(op Operator, entry JournalEntry) error {
	if m.in.State.Terminal() {
		return m.refused(op.Action, "the saga is already %s; force-fail takes a running or compensating saga", m.in.State)
	}
	i := m.in.Cursor
	s := &m.in.Steps[i]
	entry.Step = s.Name
	m.note(entry)
	switch s.State {
	case StepRunning, StepRetrying, StepQuerying, StepAccepted:
		s.State = StepUnknown
		s.LastError = fmt.Sprintf("forced to failed by %s while %s", op.Actor, s.State)
	case StepCompensating, StepCompRetrying:
		s.State = StepCompRetrying
		s.LastError = "forced to failed by " + op.Actor + " while compensating"
	}
	for k := range m.in.Steps {
		m.in.Steps[k].DueAt = nil
	}
	m.in.State, m.in.DeadlineAt = Failed, nil
	m.in.Flag = "forced to failed by " + op.Actor + ": " + op.Reason
	return nil
}

// resume: a failed saga goes forward again from op.Step. Every step
// before it must have succeeded and none may have been compensated; the
// chosen step and those after it are sent afresh (new attempts, new
// deadlines), pending until their turn.
func (m *machine) resume(op Operator, entry JournalEntry) error {
	if m.in.State != Failed {
		return m.refused(op.Action, "the saga is %s; only a failed saga is resumed", m.in.State)
	}
	if op.Step == "" {
		return m.refused(op.Action, "a step to resume at is required")
	}
	j, ok := m.def.StepIndex(op.Step)
	if !ok {
		return m.refused(op.Action, "the saga has no step %q", op.Step)
	}
	for k := range m.in.Steps {
		st := m.in.Steps[k].State
		if k < j && st != StepSucceeded {
			return m.refused(op.Action, "step %q before %q is %s; the saga resumes only at or before its first step that did not succeed", m.in.Steps[k].Name, op.Step, st)
		}
		if st == StepCompensating || st == StepCompRetrying || st == StepCompensated {
			return m.refused(op.Action, "step %q is %s; a saga that compensated is not resumed forward (retry its compensation, or resolve it)", m.in.Steps[k].Name, st)
		}
	}
	if _, err := m.def.Steps[j].command(m.in.Data); err != nil {
		return m.refused(op.Action, "cannot build the command of step %q: %v", op.Step, err)
	}
	entry.Step, entry.Action = op.Step, string(message.Forward)
	m.note(entry)
	for k := j; k < len(m.in.Steps); k++ {
		s := &m.in.Steps[k]
		s.State, s.DueAt, s.StartedAt, s.FinishedAt = StepPending, nil, nil, nil
		s.RetryAnswers, s.LastError = 0, ""
		s.QueryUntil = s.QueryAttempts
	}
	m.in.State, m.in.FinishedAt, m.in.Flag, m.in.DeadlineAt = Running, nil, "", nil
	if err := m.sendForward(j); err != nil {
		return m.refused(op.Action, "cannot send step %q: %v", op.Step, err)
	}
	return nil
}
