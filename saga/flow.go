package saga

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/sagaflow/sagaflow/message"
)

// Journal events of groups, conditions, waits and cancels.
const (
	JournalStepSkipped    = "step skipped"
	JournalGroupStarted   = "group started"
	JournalWaiting        = "waiting for event"
	JournalEventReceived  = "event received"
	JournalEventTaken     = "event taken"
	JournalEventRefused   = "event refused"
	JournalWaitDeadline   = "wait deadline passed"
	JournalWaitAbandoned  = "wait abandoned"
	JournalCancelled      = "cancelled"
	JournalSettleInFlight = "settling steps in flight"
)

// Bounds of external events.
const (
	// MaxKeptEvents bounds the events one wait step records (kept and
	// taken): more are refused with ErrEventNotAwaited.
	MaxKeptEvents = 16
	// MaxEventIDLen bounds an event id, in bytes.
	MaxEventIDLen = 200
	// MaxEventDataLen bounds an event's data, in bytes.
	MaxEventDataLen = 64 << 10
)

// stepError is a step whose command (or condition) could not be built
// while a unit was entered.
type stepError struct {
	i   int
	err error
}

func (e *stepError) Error() string { return e.err.Error() }

// moveCursor makes step i the active step, unless the active step is
// another member of i's unit still awaiting something (a group keeps its
// cursor while its members are re-sent and queried).
func (m *machine) moveCursor(i int) {
	if c := m.in.Cursor; c >= 0 && c < len(m.def.Steps) && c != i && m.def.Steps[c].Unit == m.def.Steps[i].Unit && m.in.Steps[c].State.awaiting() {
		return
	}
	m.in.Cursor = i
}

// refreshCursor keeps the cursor of a running or compensating saga on a
// step that awaits something: when the cursor's member of a group has
// settled while others are still out, the first of those becomes the
// cursor (what the status shows as the current step and an operator's
// retry acts on). A sequential saga's cursor always awaits something.
func (m *machine) refreshCursor() {
	c := m.in.Cursor
	if (m.in.State != Running && m.in.State != Compensating) || c < 0 || m.in.Steps[c].State.awaiting() {
		return
	}
	un := m.def.Units[m.def.Steps[c].Unit]
	for i := un.Start; i < un.End; i++ {
		if m.in.Steps[i].State.awaiting() {
			m.in.Cursor = i
			return
		}
	}
}

// nextSeq is the completion number of the step that succeeds now.
func (m *machine) nextSeq() int {
	n := 0
	for i := range m.in.Steps {
		n = max(n, m.in.Steps[i].Seq)
	}
	return n + 1
}

// enterUnit starts unit u (or, when every member of it is skipped, the
// next): every member whose condition holds has its command sent in this
// decision, or starts waiting; the others are skipped. Past the last unit
// the saga is completed. The error names a member whose command or
// condition could not be built (the members before it were sent).
func (m *machine) enterUnit(u int) error {
	for ; u < len(m.def.Units); u++ {
		un := m.def.Units[u]
		active, wait := -1, -1
		for i := un.Start; i < un.End; i++ {
			sd := &m.def.Steps[i]
			if sd.when != nil {
				ok, err := sd.when(m.in.Data)
				if err != nil {
					return &stepError{i, fmt.Errorf("evaluate its condition: %w", err)}
				}
				if !ok {
					m.skip(i)
					continue
				}
			}
			if active < 0 {
				active = i
				m.in.Cursor = i
			}
			if sd.Kind == Wait {
				m.beginWait(i)
				wait = i
				continue
			}
			if err := m.sendForward(i); err != nil {
				return &stepError{i, err}
			}
		}
		if active < 0 {
			continue
		}
		if un.Group != "" {
			var sent []string
			for i := un.Start; i < un.End; i++ {
				if m.in.Steps[i].State == StepRunning {
					sent = append(sent, m.in.Steps[i].Name)
				}
			}
			m.note(JournalEntry{Event: JournalGroupStarted, Step: m.in.Steps[active].Name, Action: string(message.Forward),
				Reason: fmt.Sprintf("group %q: %s sent at once", un.Group, strings.Join(sent, ", "))})
		}
		m.in.Cursor = active
		if wait >= 0 {
			m.takeKept(wait)
		}
		return nil
	}
	m.in.State = Completed
	m.in.DeadlineAt = nil
	return nil
}

// skip records step i as skipped: its condition is false.
func (m *machine) skip(i int) {
	s := &m.in.Steps[i]
	s.State, s.DueAt = StepSkipped, nil
	why := "its condition is false"
	if g := m.def.Steps[i].Group; g != "" {
		why = fmt.Sprintf("its condition (or group %q's) is false", g)
	}
	m.note(JournalEntry{Event: JournalStepSkipped, Step: s.Name, Reason: why})
}

// enterNext enters unit u after the one before it completed; a command
// that cannot be built turns the saga back (or fails it after the pivot).
func (m *machine) enterNext(u int) {
	if err := m.enterUnit(u); err != nil {
		se := err.(*stepError)
		m.cannotSend(se.i, se.err)
	}
}

// unitProgress moves the saga on once every member of unit u has
// succeeded (or was skipped): the members' outputs are merged into the data
// in the order of the definition, whatever the order of their replies, and
// the next unit is entered.
func (m *machine) unitProgress(u int) {
	un := m.def.Units[u]
	for i := un.Start; i < un.End; i++ {
		if st := m.in.Steps[i].State; st != StepSucceeded && st != StepSkipped {
			return
		}
	}
	for i := un.Start; i < un.End; i++ {
		s, sd := &m.in.Steps[i], &m.def.Steps[i]
		if s.State != StepSucceeded || sd.Kind == Wait {
			continue
		}
		out, ok := m.payloads[i]
		if !ok {
			out = s.Output
		}
		data, err := sd.onSuccess(m.in.Data, out)
		if err != nil {
			s.LastError = "output rejected: " + err.Error()
			m.note(JournalEntry{Event: JournalOutputRejected, Step: s.Name, Reason: err.Error()})
			if m.def.beforePivot(i) {
				m.compensate()
			} else {
				m.fail(fmt.Sprintf("step %q succeeded but its output was rejected: %v", s.Name, err))
			}
			return
		}
		m.in.Data = data
		if i == m.def.Pivot {
			m.in.DeadlineAt = nil
		}
	}
	m.enterNext(u + 1)
}

// compensate turns the saga back (or continues): a wait still waiting is
// abandoned; while a step's forward is still in flight (a group member, a
// step running when a cancel came) nothing is compensated yet, its answer,
// timeout, re-send or query settles it first; then the steps that took
// effect (succeeded, or given up without a definite answer) are
// compensated one at a time, in reverse order of completion: the latest
// unit first, within a group the given-up members, then the succeeded ones
// latest first. When none is left the saga is compensated.
func (m *machine) compensate() {
	m.in.State = Compensating
	m.in.DeadlineAt = nil
	m.cancelAccepted()
	inFlight := false
	for i := range m.in.Steps {
		s := &m.in.Steps[i]
		switch {
		case s.State == StepWaiting:
			at := m.at
			s.State, s.DueAt, s.FinishedAt = StepFailed, nil, &at
			s.LastError = "abandoned: the saga compensates"
			m.note(JournalEntry{Event: JournalWaitAbandoned, Step: s.Name, Reason: "the saga compensates"})
		case s.State.inFlight():
			inFlight = true
		}
	}
	if inFlight {
		return
	}
	j := m.nextToCompensate()
	if j < 0 {
		m.in.State = Compensated
		return
	}
	if err := m.sendCompensate(j); err != nil {
		m.fail(fmt.Sprintf("cannot build the compensation of step %q: %v", m.in.Steps[j].Name, err))
	}
}

// nextToCompensate is the step to compensate next, or -1.
func (m *machine) nextToCompensate() int {
	best := -1
	later := func(a, b int) bool { // a is compensated before b
		ua, ub := m.def.Steps[a].Unit, m.def.Steps[b].Unit
		if ua != ub {
			return ua > ub
		}
		sa, sb := m.in.Steps[a].Seq, m.in.Steps[b].Seq
		if (sa == 0) != (sb == 0) {
			return sa == 0 // given up, no completion: first
		}
		if sa != sb {
			return sa > sb
		}
		return a > b
	}
	for j := range m.in.Steps {
		st := m.in.Steps[j].State
		if (st != StepSucceeded && st != StepUnknown) || !m.def.beforePivot(j) || m.def.Steps[j].Kind == Wait {
			continue
		}
		if best < 0 || later(j, best) {
			best = j
		}
	}
	return best
}

// compensationData is the data step i's compensation is built from: the
// saga data, with the step's own output merged when its unit never
// completed (a group member whose output was not merged because another
// member failed); a merge that fails leaves the data as it is.
func (m *machine) compensationData(i int) []byte {
	s, sd := &m.in.Steps[i], &m.def.Steps[i]
	if len(s.Output) == 0 || m.unitCompleted(sd.Unit) {
		return m.in.Data
	}
	data, err := sd.onSuccess(m.in.Data, s.Output)
	if err != nil {
		return m.in.Data
	}
	return data
}

// unitCompleted reports whether unit u completed (its outputs merged):
// the saga entered a later unit.
func (m *machine) unitCompleted(u int) bool {
	for i := m.def.Units[u].End; i < len(m.in.Steps); i++ {
		if m.in.Steps[i].State != StepPending {
			return true
		}
	}
	return false
}

// beginWait makes wait step i wait for its event, until its deadline.
func (m *machine) beginWait(i int) {
	s, sd := &m.in.Steps[i], &m.def.Steps[i]
	at := m.at
	s.State, s.StartedAt, s.DueAt = StepWaiting, &at, nil
	if sd.Deadline > 0 {
		due := m.at.Add(sd.Deadline)
		s.DueAt = &due
	}
	m.note(JournalEntry{Event: JournalWaiting, Step: s.Name, Reason: fmt.Sprintf("waiting for event %q", sd.Event)})
}

// takeKept takes the first event kept for wait step i, if any.
func (m *machine) takeKept(i int) {
	for k := range m.in.Steps[i].Events {
		if !m.in.Steps[i].Events[k].Taken {
			m.takeEvent(i, k)
			return
		}
	}
}

// takeEvent applies event k of waiting step i: its merge either takes it
// (the step succeeds and the saga moves on) or refuses it (before the
// pivot the saga compensates; after it the saga fails).
func (m *machine) takeEvent(i, k int) {
	s, sd := &m.in.Steps[i], &m.def.Steps[i]
	s.Events = append([]ReceivedEvent(nil), s.Events...) // copy on write: prev shares the slice
	ev := &s.Events[k]
	ev.Taken = true
	at := m.at
	data, err := sd.onEvent(m.in.Data, ev.Data)
	if err != nil {
		s.State, s.DueAt, s.FinishedAt = StepFailed, nil, &at
		s.LastError = "event refused: " + err.Error()
		m.note(JournalEntry{Event: JournalEventRefused, Step: s.Name, Reason: fmt.Sprintf("event %q id %q: %v", sd.Event, ev.ID, err)})
		if m.def.beforePivot(i) {
			m.compensate()
		} else {
			m.fail(fmt.Sprintf("wait %q refused its event after the pivot: %v", s.Name, err))
		}
		return
	}
	m.in.Data = data
	s.State, s.DueAt, s.FinishedAt, s.LastError = StepSucceeded, nil, &at, ""
	s.Seq = m.nextSeq()
	m.note(JournalEntry{Event: JournalEventTaken, Step: s.Name, Reason: fmt.Sprintf("event %q id %q", sd.Event, ev.ID)})
	m.unitProgress(sd.Unit)
}

// waitTimedOut handles the deadline of waiting step i.
func (m *machine) waitTimedOut(i int) {
	s, sd := &m.in.Steps[i], &m.def.Steps[i]
	m.d.WaitsTimedOut++
	at := m.at
	why := fmt.Sprintf("no event %q within %s", sd.Event, sd.Deadline)
	s.State, s.DueAt, s.FinishedAt, s.LastError = StepFailed, nil, &at, why
	m.note(JournalEntry{Event: JournalWaitDeadline, Step: s.Name, Reason: fmt.Sprintf("%s (on deadline: %s)", why, sd.OnDeadline)})
	if sd.OnDeadline == WaitFail || !m.def.beforePivot(i) {
		m.fail(fmt.Sprintf("wait %q: %s; an operator must resolve it", s.Name, why))
		return
	}
	m.compensate()
}

// external records external event x (EventExternal): see Engine.SendEvent
// for the contract.
func (m *machine) external(x External) (Decision, error) {
	refuse := func(kind error, format string, args ...any) (Decision, error) {
		return Decision{}, &EventError{Kind: kind, Name: x.Name, Why: fmt.Sprintf(format, args...)}
	}
	switch {
	case !nameRE.MatchString(x.Name) || len(x.Name) > maxNameLen:
		return refuse(ErrEventInvalid, "name must be %s, at most %d characters", errNamePatternDescription, maxNameLen)
	case x.ID == "" || len(x.ID) > MaxEventIDLen:
		return refuse(ErrEventInvalid, "event_id is required, at most %d bytes", MaxEventIDLen)
	case !utf8.ValidString(x.ID) || strings.ContainsFunc(x.ID, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return refuse(ErrEventInvalid, "event_id must be UTF-8 text without control characters")
	case len(x.Data) > MaxEventDataLen:
		return refuse(ErrEventInvalid, "data is %d bytes, at most %d", len(x.Data), MaxEventDataLen)
	}
	data := bytes.TrimSpace(x.Data)
	if len(data) == 0 || string(data) == "null" {
		data = []byte("{}")
	}
	if data[0] != '{' || !json.Valid(data) {
		return refuse(ErrEventInvalid, "data must be a JSON object")
	}
	for i := range m.in.Steps {
		for _, ev := range m.in.Steps[i].Events {
			if ev.ID == x.ID {
				return Decision{Next: m.prev, Duplicate: true}, nil
			}
		}
	}
	if m.in.State.Terminal() {
		return refuse(ErrEventFinished, "the saga is %s", m.in.State)
	}
	if !m.def.Waits(x.Name) {
		var names []string
		for i := range m.def.Steps {
			if m.def.Steps[i].Kind == Wait {
				names = append(names, fmt.Sprintf("%q", m.def.Steps[i].Event))
			}
		}
		if len(names) == 0 {
			return refuse(ErrEventUnknown, "saga type %q waits for no event", m.def.Name)
		}
		return refuse(ErrEventUnknown, "saga type %q never waits for it (it waits for %s)", m.def.Name, strings.Join(names, ", "))
	}
	if m.in.State == Compensating {
		return refuse(ErrEventNotAwaited, "the saga is compensating: it waits for nothing")
	}
	target, last := -1, -1
	for i := range m.def.Steps {
		if m.def.Steps[i].Kind != Wait || m.def.Steps[i].Event != x.Name {
			continue
		}
		last = i
		if st := m.in.Steps[i].State; st == StepPending || st == StepWaiting {
			target = i
			break
		}
	}
	if target < 0 {
		s := &m.in.Steps[last]
		return refuse(ErrEventNotAwaited, "the saga waits for it no more: step %q is %s", s.Name, s.State)
	}
	s := &m.in.Steps[target]
	if len(s.Events) >= MaxKeptEvents {
		return refuse(ErrEventNotAwaited, "step %q has %d events already, its bound", s.Name, len(s.Events))
	}
	s.Events = append(append([]ReceivedEvent(nil), s.Events...), ReceivedEvent{ID: x.ID, Data: append(json.RawMessage(nil), data...), At: m.at})
	reason := fmt.Sprintf("event %q id %q", x.Name, x.ID)
	if s.State == StepPending {
		reason += "; kept until the saga reaches the wait"
	}
	m.note(JournalEntry{Event: JournalEventReceived, Step: s.Name, Reason: reason})
	if s.State == StepWaiting {
		m.takeEvent(target, len(s.Events)-1)
	}
	return m.finish()
}

// cancel is the client's cancel (EventCancel): before the pivot was sent
// the saga compensates what took effect (its steps in flight settle
// first); from the pivot on it is refused.
func (m *machine) cancel(c Cancel) (Decision, error) {
	refuse := func(format string, args ...any) (Decision, error) {
		return Decision{}, &RefusedError{Action: ActionCancel, Why: fmt.Sprintf(format, args...)}
	}
	switch {
	case c.Actor == "":
		return refuse("an actor is required")
	case c.Reason == "":
		return refuse("a reason is required")
	case strings.ContainsRune(c.Actor, 0) || strings.ContainsRune(c.Reason, 0) || !utf8.ValidString(c.Actor) || !utf8.ValidString(c.Reason):
		return refuse("actor and reason must be UTF-8 text without NUL characters")
	case m.in.Cursor < 0:
		return refuse("the saga has not started")
	case m.in.State.Terminal():
		return refuse("the saga is %s", m.in.State)
	case m.in.State == Compensating:
		return refuse("the saga is compensating already")
	}
	if p := m.def.Pivot; p >= 0 && m.in.Steps[p].State != StepPending {
		return refuse("the pivot %q has been sent (it is %s): past the point of no return the saga only goes forward", m.def.Steps[p].Name, m.in.Steps[p].State)
	}
	entry := JournalEntry{Event: JournalCancelled, Step: m.in.CurrentStep(), Actor: c.Actor, Reason: c.Reason}
	m.note(entry)
	m.compensate()
	if m.in.State == Compensating && len(m.d.Send) == 0 {
		m.note(JournalEntry{Event: JournalSettleInFlight, Step: m.in.CurrentStep(), Reason: "compensation starts once the steps in flight have an outcome"})
	}
	return m.finish()
}
