package saga

import (
	"fmt"

	"github.com/sagaflow/sagaflow/message"
)

// Journal events of queries (actor ActorReconciler).
const (
	JournalQuerying      = "querying participant"
	JournalQueryAnswered = "query answered"
	JournalQueryBusy     = "query not answered"
	JournalCheckSent     = "check sent"
	JournalCheckAgrees   = "check agrees"
	JournalDifference    = "difference"
)

// giveUp ends step i's forward without a definite answer. Before it goes
// ahead, the participant is asked what its barrier recorded (startQuery),
// unless the step does not query or its queries went unanswered already;
// then abandon.
func (m *machine) giveUp(i int, why string) {
	s, sd := &m.in.Steps[i], &m.def.Steps[i]
	if sd.QueryAttempts > 0 && s.State != StepQuerying {
		m.startQuery(i, why)
		return
	}
	m.abandon(i, why)
}

// abandon gives step i up for good. An earlier send may still land, so
// before the pivot the saga compensates, this step too (its barrier undoes a
// late forward or closes it); at the pivot the saga is failed for an
// operator and nothing is compensated blindly.
func (m *machine) abandon(i int, why string) {
	s := &m.in.Steps[i]
	s.State, s.DueAt = StepUnknown, nil
	if s.LastError == "" {
		s.LastError = "gave up: " + why
	} else {
		s.LastError = "gave up: " + why + "; last: " + s.LastError
	}
	if i == m.def.Pivot {
		m.fail(fmt.Sprintf("pivot %q %s; not compensated blindly: an operator must resolve it", s.Name, why))
		return
	}
	m.compensate()
}

// startQuery begins a round of queries for step i, whose forward has no
// definite answer.
func (m *machine) startQuery(i int, why string) {
	s, sd := &m.in.Steps[i], &m.def.Steps[i]
	rounds := sd.QueryAttempts
	if rounds <= 0 {
		rounds = QueryAttemptsDefault // an operator's query of a step that does not query by itself
	}
	s.State = StepQuerying
	s.QueryUntil = s.QueryAttempts + rounds
	s.LastError = "no definite answer (" + why + "); asking the participant"
	m.note(JournalEntry{Event: JournalQuerying, Step: s.Name, Action: string(message.Query), Actor: ActorReconciler, Reason: why})
	m.sendQuery(i)
}

// sendQuery sends the next query of step i and awaits it like a forward
// send (the step's timeout plus the backoff before it).
func (m *machine) sendQuery(i int) {
	s, sd := &m.in.Steps[i], &m.def.Steps[i]
	s.QueryAttempts++
	id := m.commandID(sd.Name, message.Query, s.QueryAttempts)
	s.AwaitID = id
	round := s.QueryAttempts - (s.QueryUntil - max(sd.QueryAttempts, 1))
	due := m.at.Add(awaitFor(sd.Timeout, sd.Retry, m.in.ID, sd.Name+"/query", max(round, 1)))
	s.DueAt = &due
	m.moveCursor(i)
	m.emit(sd, message.Query, id, s.QueryAttempts, nil)
}

// queryTimer handles the due time of step i's query: re-send, or give up
// for good once the round's queries are spent.
func (m *machine) queryTimer(i int) {
	s := &m.in.Steps[i]
	m.note(JournalEntry{Event: JournalTimeout, Step: s.Name, Action: string(message.Query), Actor: ActorReconciler, Reason: fmt.Sprintf("no answer to query %d", s.QueryAttempts)})
	if s.QueryAttempts >= s.QueryUntil {
		m.abandon(i, fmt.Sprintf("got no definite answer, and no answer to %d queries", s.QueryAttempts))
		return
	}
	m.sendQuery(i)
}

// queryReply applies a reply to a query of step i.
func (m *machine) queryReply(i int, r *message.Reply, base JournalEntry) (Decision, error) {
	s := &m.in.Steps[i]
	base.Actor = ActorReconciler
	if m.prev.State.Terminal() {
		return m.checkReply(i, r, base)
	}
	if (m.in.State != Running && m.in.State != Compensating) || s.State != StepQuerying {
		base.Reason = fmt.Sprintf("query %s while the step is %s and the saga %s", r.Outcome, s.State, m.in.State)
		return m.ignore(true, base)
	}
	if r.Outcome != message.Success {
		if r.InReplyTo != s.AwaitID {
			base.Reason = "answer to an earlier query"
			return m.ignore(true, base)
		}
		// The participant could not answer now: ask again after the
		// backoff, within the round.
		m.note(withEvent(base, JournalQueryBusy, string(r.Outcome)+": "+r.Reason))
		due := m.at.Add(Backoff(m.def.Steps[i].Retry, m.in.ID, s.Name+"/query", s.QueryAttempts))
		s.DueAt = &due
		return m.finish()
	}
	ans, err := message.DecodeQueryAnswer(r.Payload)
	if err != nil {
		return Decision{}, fmt.Errorf("saga %s: reply %s to a query of step %q: %w", m.in.ID, r.MessageID, s.Name, err)
	}
	if ans.State == message.QueryAccepted {
		if r.InReplyTo != s.AwaitID {
			base.Reason = "answer to an earlier query"
			return m.ignore(true, base)
		}
		// Still pending at the participant: no definite answer; ask
		// again after the backoff, within the round.
		m.note(withEvent(base, JournalQueryBusy, "participant recorded accepted: not settled yet"))
		due := m.at.Add(Backoff(m.def.Steps[i].Retry, m.in.ID, s.Name+"/query", s.QueryAttempts))
		s.DueAt = &due
		return m.finish()
	}
	m.note(withEvent(base, JournalQueryAnswered, "participant recorded "+string(ans.State)))
	m.settleByQuery(i, ans)
	return m.finish()
}

// settleByQuery settles step i (given up, at or before the pivot) by what
// its participant recorded.
func (m *machine) settleByQuery(i int, ans message.QueryAnswer) {
	s := &m.in.Steps[i]
	switch ans.State {
	case message.QueryDone:
		s.LastError = ""
		m.forwardSucceeded(i, &message.Reply{Payload: ans.Output})
	case message.QueryFailed, message.QueryClosed:
		m.forwardFailed(i, "the participant recorded "+string(ans.State)+" (query)")
	case message.QueryCompensated:
		at := m.at
		s.State, s.DueAt, s.CompFinishedAt, s.CompensationNote = StepCompensated, nil, &at, "compensated (found by query)"
		m.settle(i, message.Compensate, message.Success)
		m.compensate()
	}
}

// operatorQuery starts a round of queries of the active step: of a failed
// saga's given-up step (the saga runs again while the queries are out), or
// of a running step now.
func (m *machine) operatorQuery(entry JournalEntry) error {
	i := m.in.Cursor
	s := &m.in.Steps[i]
	entry.Step, entry.Action = s.Name, string(message.Query)
	switch {
	case m.in.State == Failed && s.State == StepUnknown:
		m.in.State = Running
		m.in.FinishedAt = nil
	case m.in.State == Running && (s.State == StepRunning || s.State == StepRetrying || s.State == StepAccepted):
	default:
		return &RefusedError{Action: ActionQuery, Why: fmt.Sprintf("the saga is %s and step %q %s; a query settles a running forward or a failed saga's given-up step", m.in.State, s.Name, s.State)}
	}
	m.note(entry)
	m.startQuery(i, "asked by "+entry.Actor)
	return nil
}

// operatorCheck sends a query for every step of a finished saga that was
// sent; their answers are compared in checkReply.
func (m *machine) operatorCheck(entry JournalEntry) error {
	if !m.in.State.Terminal() {
		return &RefusedError{Action: ActionCheck, Why: fmt.Sprintf("the saga is %s; only a finished saga is checked (a running one settles by itself)", m.in.State)}
	}
	entry.Action = string(message.Query)
	m.note(entry)
	n := 0
	for i := range m.in.Steps {
		s := &m.in.Steps[i]
		if s.StartedAt == nil {
			continue
		}
		n++
		s.QueryAttempts++
		id := m.commandID(s.Name, message.Query, s.QueryAttempts)
		m.emit(&m.def.Steps[i], message.Query, id, s.QueryAttempts, nil)
	}
	if n == 0 {
		return &RefusedError{Action: ActionCheck, Why: "no step of the saga was sent"}
	}
	m.note(JournalEntry{Event: JournalCheckSent, Actor: entry.Actor, Action: string(message.Query), Reason: fmt.Sprintf("%d queries", n)})
	return nil
}

// checkReply compares a query answer with finished saga's step i and
// journals agreement or the difference; the saga is not changed.
func (m *machine) checkReply(i int, r *message.Reply, base JournalEntry) (Decision, error) {
	s := &m.in.Steps[i]
	if r.Outcome != message.Success {
		base.Reason = fmt.Sprintf("check of a %s saga answered %s: %s", m.in.State, r.Outcome, r.Reason)
		return m.ignore(true, base)
	}
	ans, err := message.DecodeQueryAnswer(r.Payload)
	if err != nil {
		return Decision{}, fmt.Errorf("saga %s: reply %s to a query of step %q: %w", m.in.ID, r.MessageID, s.Name, err)
	}
	kind := Disagreement(m.in.State, s.State, ans.State)
	e := base
	e.SagaID, e.At, e.From, e.To = m.prev.ID, m.at, m.prev.State, m.prev.State
	e.Ignored = true
	d := Decision{Next: m.prev}
	if kind == "" {
		e.Event, e.Reason = JournalCheckAgrees, fmt.Sprintf("step %s, participant recorded %s", s.State, ans.State)
	} else {
		e.Event = JournalDifference
		e.Reason = fmt.Sprintf("%s: the saga is %s with step %q %s, the participant recorded %s", kind, m.in.State, s.Name, s.State, ans.State)
		d.Differences = []Difference{{Kind: kind, Step: s.Name, Detail: e.Reason}}
	}
	d.Journal = []JournalEntry{e}
	return d, nil
}

// Disagreement names the difference between a finished saga's step (in
// saga state st, step state step) and what its participant recorded, or
// "" when they agree.
func Disagreement(st State, step StepStatus, got message.QueryState) string {
	var ok bool
	switch step {
	case StepSucceeded:
		ok = got == message.QueryDone
	case StepFailed:
		ok = got == message.QueryFailed || got == message.QueryClosed
	case StepCompensated:
		ok = got == message.QueryCompensated || got == message.QueryClosed || got == message.QueryFailed
	case StepUnknown:
		// Given up (a failed saga): any record is news, not a contradiction,
		// but a done pivot of a failed saga is repairable (ActionQuery).
		ok = got != message.QueryDone
	default:
		ok = false
	}
	if ok {
		return ""
	}
	return fmt.Sprintf("participant_%s_step_%s", got, step)
}
