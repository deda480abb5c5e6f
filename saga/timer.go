package saga

import (
	"fmt"
	"time"

	"github.com/sagaflow/sagaflow/message"
)

// timer is Decide's answer to a timer event: the send bound first, then
// the saga's deadline before the pivot (compensate), then every step
// whose due time has come (a reply overdue, a backoff over, a wait past
// its deadline).
func (m *machine) timer() (Decision, error) {
	if m.in.State.Terminal() || m.in.Cursor < 0 {
		return m.noop()
	}
	due := m.dueSteps()
	if len(due) > 0 && m.in.Steps[due[0]].State != StepWaiting && m.sendBoundDue() {
		return m.stopSending(due[0])
	}
	if i := m.in.Cursor; m.in.State == Running && m.in.DeadlineAt != nil && !m.at.Before(*m.in.DeadlineAt) && m.def.beforePivot(i) {
		m.note(JournalEntry{Event: JournalDeadline, Step: m.in.Steps[i].Name, Reason: fmt.Sprintf("saga deadline %s passed before the pivot", m.in.DeadlineAt.Format(time.RFC3339Nano))})
		for j := range m.in.Steps {
			if s := &m.in.Steps[j]; s.State.inFlight() {
				s.State, s.DueAt = StepUnknown, nil
				s.LastError = "saga deadline passed"
			}
		}
		m.compensate()
		return m.finish()
	}
	if len(due) == 0 {
		return m.noop()
	}
	handled := 0
	for _, i := range due {
		s := &m.in.Steps[i]
		if m.in.State.Terminal() || s.DueAt == nil || m.at.Before(*s.DueAt) {
			continue // moved by the handling of an earlier one
		}
		if m.stepTimer(i) {
			handled++
		}
	}
	if handled == 0 {
		s := &m.in.Steps[due[0]]
		return m.ignore(false, JournalEntry{Step: s.Name, Reason: fmt.Sprintf("timer while the step is %s", s.State)})
	}
	return m.finish()
}

// dueSteps are the steps whose due time has come, earliest first.
func (m *machine) dueSteps() []int {
	var due []int
	for i := range m.in.Steps {
		if d := m.in.Steps[i].DueAt; d != nil && !m.at.Before(*d) {
			due = append(due, i)
		}
	}
	for a := 1; a < len(due); a++ { // a few steps: insertion sort, stable
		for b := a; b > 0 && m.in.Steps[due[b]].DueAt.Before(*m.in.Steps[due[b-1]].DueAt); b-- {
			due[b], due[b-1] = due[b-1], due[b]
		}
	}
	return due
}

// stepTimer handles the due time of step i; false when the step's state
// has no timer transition.
func (m *machine) stepTimer(i int) bool {
	s := &m.in.Steps[i]
	switch s.State {
	case StepRunning:
		// Outcome unknown: the send may still be executed (or already
		// was), so the same action is re-sent after the backoff; a reply
		// to this send is taken meanwhile, one to an earlier send is not.
		m.note(JournalEntry{Event: JournalTimeout, Step: s.Name, Action: string(message.Forward), Reason: m.timeoutReason(i)})
		s.DueAt = nil
		s.LastError = fmt.Sprintf("attempt %d timed out", s.Attempts)
		m.retryOrGiveUp(i, false)
	case StepRetrying:
		if m.outOfTime(i) {
			m.note(JournalEntry{Event: JournalTimeout, Step: s.Name, Action: string(message.Forward), Reason: fmt.Sprintf("step deadline %s passed before attempt %d", m.def.Steps[i].GiveUpAfter(), s.Attempts+1)})
			m.giveUp(i, m.outOfTimeReason(i))
			break
		}
		m.note(JournalEntry{Event: JournalResent, Step: s.Name, Action: string(message.Forward), Reason: fmt.Sprintf("attempt %d", s.Attempts+1)})
		if err := m.sendForward(i); err != nil {
			m.cannotSend(i, err)
		}
	case StepQuerying:
		m.queryTimer(i)
	case StepAccepted:
		m.acceptedTimedOut(i)
	case StepCompensating:
		m.note(JournalEntry{Event: JournalTimeout, Step: s.Name, Action: string(message.Compensate), Reason: fmt.Sprintf("no reply to compensation attempt %d", s.CompAttempts)})
		m.compensationRetry(i, fmt.Sprintf("compensation attempt %d timed out", s.CompAttempts))
	case StepCompRetrying:
		m.note(JournalEntry{Event: JournalResent, Step: s.Name, Action: string(message.Compensate), Reason: fmt.Sprintf("attempt %d", s.CompAttempts+1)})
		if err := m.sendCompensate(i); err != nil {
			m.fail(fmt.Sprintf("cannot build the compensation of step %q: %v", s.Name, err))
		}
	case StepWaiting:
		m.waitTimedOut(i)
	default:
		return false
	}
	return true
}
