package saga

import (
	"fmt"

	"github.com/sagaflow/sagaflow/message"
)

// Journal events of steps answered accepted.
const (
	// JournalStepAccepted: the participant took the forward and will
	// settle it later; nothing is re-sent meanwhile.
	JournalStepAccepted = "step accepted"
	// JournalAcceptedDeadline: an accepted step got no final answer within
	// its accepted deadline.
	JournalAcceptedDeadline = "accepted deadline passed"
)

// acceptedReply applies an accepted answer to the latest forward send of
// step i: the step stops re-sending and waits for its final answer until
// its accepted deadline. An accepted answer while the step is queried (its
// forward was given up) changes nothing: the query settles it.
func (m *machine) acceptedReply(i int, r *message.Reply, base JournalEntry) (Decision, error) {
	s, sd := &m.in.Steps[i], &m.def.Steps[i]
	if (s.State != StepRunning && s.State != StepRetrying) || r.InReplyTo != s.AwaitID {
		base.Reason = fmt.Sprintf("accepted while the step is %s", s.State)
		return m.ignore(true, base)
	}
	ans, err := message.DecodeAcceptedAnswer(r.Payload)
	if err != nil {
		return Decision{}, fmt.Errorf("saga %s: reply %s: accepted answer of step %q: %w", m.in.ID, r.MessageID, s.Name, err)
	}
	reason := fmt.Sprintf("final answer awaited until %s", m.at.Add(sd.AcceptedDeadline).UTC().Format("2006-01-02T15:04:05Z07:00"))
	if ans.Cancellable {
		reason += "; cancellable"
	}
	m.note(withEvent(base, JournalStepAccepted, reason))
	at := m.at
	due := m.at.Add(sd.AcceptedDeadline)
	s.State, s.AcceptedAt, s.DueAt, s.Cancellable, s.LastError = StepAccepted, &at, &due, ans.Cancellable, ""
	if m.in.State == Compensating {
		// A group member accepted after the saga turned back: a
		// cancellable one is compensated now, any other awaited.
		m.compensate()
	}
	return m.finish()
}

// acceptedTimedOut handles the accepted deadline of step i: after the
// pivot the forward is re-sent (the participant's barrier answers it
// again: accepted, or its final outcome) and the saga flagged; before and
// at the pivot the step is given up (queried first).
func (m *machine) acceptedTimedOut(i int) {
	s, sd := &m.in.Steps[i], &m.def.Steps[i]
	why := fmt.Sprintf("accepted, but not settled within its accepted deadline %s", sd.AcceptedDeadline)
	m.note(JournalEntry{Event: JournalAcceptedDeadline, Step: s.Name, Action: string(message.Forward), Reason: why})
	s.DueAt = nil
	s.LastError = why
	if m.def.afterPivot(i) {
		m.flag(fmt.Sprintf("step %q %s", s.Name, why))
		if err := m.sendForward(i); err != nil {
			m.cannotSend(i, err)
		}
		return
	}
	m.giveUp(i, why)
}

// cancelAccepted, as the saga turns back, gives up the accepted steps
// whose participant said they can be cancelled: they are compensated (the
// participant settles the step as failed and answers an empty
// compensation) instead of being awaited. Other accepted steps stay in
// flight until they are settled.
func (m *machine) cancelAccepted() {
	for j := range m.in.Steps {
		s := &m.in.Steps[j]
		if s.State != StepAccepted || !s.Cancellable || !m.def.beforePivot(j) {
			continue
		}
		s.State, s.DueAt = StepUnknown, nil
		s.LastError = "accepted and cancellable: cancelled as the saga compensates"
	}
}
