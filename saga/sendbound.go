package saga

import (
	"fmt"

	"github.com/sagaflow/sagaflow/message"
)

// MaxSendsDefault is Definition.MaxSends when it is zero: the commands a
// saga sends (forward, compensation and query sends of all its steps
// together) before its timers stop re-sending and an operator must look.
// A step whose participant never answers is re-sent once per timeout plus
// backoff: at the default step timeout (10 s) and backoff (200 ms doubling
// to 30 s) about once a minute, so 500 sends are about 8 hours of silence
// (or of refusals: a participant dead-letters a command it cannot take,
// which the orchestrator never hears of); for the reference place-order
// saga (5 s backoff) about 2.5 hours. Every ordinary run sends far fewer.
const MaxSendsDefault = 500

// JournalSendBound is the journal event of a saga stopped by its bound
// on sends.
const JournalSendBound = "send bound reached"

// Sends is the number of commands the saga has sent: forward, compensation
// and query sends of all its steps (what Def.MaxSends bounds).
func (in *Instance) Sends() int {
	n := 0
	for _, s := range in.Steps {
		n += s.Attempts + s.CompAttempts + s.QueryAttempts
	}
	return n
}

// atSendBound reports whether the saga has sent as many commands as its
// definition allows without an operator.
func (m *machine) atSendBound() bool {
	return m.def.MaxSends > 0 && m.in.Sends() >= m.def.MaxSends
}

// stopSending is the timer's transition of a saga at its send bound whose
// wake-up has come (a command timed out, a re-send or a compensation is
// due, its deadline passed): instead of sending again it fails, flagged
// with the bound, and its active step is left re-sendable (forward:
// retrying, compensation: compensation_retrying) without a due time, so
// that an operator's retry re-opens it with one send. A participant that
// refuses every command (a dead letter per send, which the orchestrator
// never sees) thus costs at most MaxSends dead letters per saga.
func (m *machine) stopSending(i int) (Decision, error) {
	s := &m.in.Steps[i]
	m.in.Cursor = i // the step an operator's retry re-opens (a group's due member)
	action := message.Forward
	switch s.State {
	case StepCompensating, StepCompRetrying:
		action = message.Compensate
		s.State = StepCompRetrying
	default:
		s.State = StepRetrying
	}
	reason := fmt.Sprintf("the saga sent %d commands, its bound (max sends %d): nothing more is sent without an operator; step %q %s got no definite answer (a participant refusing its commands dead-letters each one: look there)",
		m.in.Sends(), m.def.MaxSends, s.Name, action)
	s.LastError = "stopped: " + reason
	m.note(JournalEntry{Event: JournalSendBound, Step: s.Name, Action: string(action)})
	m.fail(reason)
	m.in.Flag = reason
	return m.finish()
}

// sendBoundDue reports whether a timer event finds the saga at its send
// bound with a wake-up come: what stopSending handles.
func (m *machine) sendBoundDue() bool {
	w := m.prev.NextWakeup()
	return w != nil && !m.at.Before(*w) && m.atSendBound()
}

// reopenStopped re-opens a failed saga whose active step was left
// re-sendable (stopSending, or a compensation that could not be built)
// for an operator's retry: running or compensating again, unflagged.
// It reports false when the saga is not such a one.
func (m *machine) reopenStopped() bool {
	if m.in.State != Failed || m.in.Cursor < 0 {
		return false
	}
	switch m.in.Steps[m.in.Cursor].State {
	case StepRetrying:
		m.in.State = Running
	case StepCompRetrying:
		m.in.State = Compensating
	default:
		return false
	}
	m.in.FinishedAt, m.in.Flag = nil, ""
	return true
}
