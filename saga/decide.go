package saga

import (
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"hash/fnv"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/message"
)

// Journal event names.
const (
	JournalStarted          = "started"
	JournalStepSucceeded    = "step succeeded"
	JournalStepFailed       = "step failed"
	JournalRetryAnswer      = "retry answered"
	JournalTimeout          = "timeout"
	JournalDeadline         = "deadline passed"
	JournalResent           = "command re-sent"
	JournalCompensated      = "step compensated"
	JournalCompensationBusy = "compensation not done"
	JournalOutputRejected   = "output rejected"
	JournalLate             = "late reply"
	JournalIllegal          = "illegal event"
	JournalOperator         = "operator "
)

// Backoff is the delay before the attempt+1-th send under p: exponential,
// capped, with up to half taken off by a jitter derived from the saga, step
// and attempt (deterministic, so Decide stays pure).
func Backoff(p RetryPolicy, sagaID uuid.UUID, step string, attempt int) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	d := float64(p.InitialInterval) * math.Pow(p.Multiplier, float64(attempt-1))
	if d > float64(p.MaxInterval) || math.IsInf(d, 0) || math.IsNaN(d) {
		d = float64(p.MaxInterval)
	}
	h := fnv.New64a()
	h.Write(sagaID[:])
	h.Write([]byte(step))
	h.Write([]byte{byte(attempt), byte(attempt >> 8)})
	frac := float64(h.Sum64()%1024) / 1024
	return time.Duration(d * (1 - retryJitterFraction*frac))
}

// awaitFor is how long the attempt-th send of a command is waited for
// before it times out: the step's timeout, plus from the second send on the
// backoff that preceded it, so a lagging participant is re-sent ever less
// often (the pauses and the waits both grow).
func awaitFor(timeout time.Duration, p RetryPolicy, sagaID uuid.UUID, step string, attempt int) time.Duration {
	if attempt <= 1 {
		return timeout
	}
	return timeout + Backoff(p, sagaID, step, attempt-1)
}

// Decide is the one door every state change passes through: given a
// definition, the current instance and an event (a start, a reply, a
// timer, an operator action, an external event for a wait step, or the
// client's cancel), it returns the next instance, the commands to send and
// the journal entries. It does no I/O and is deterministic.
//
// Errors: ErrUnknownStep (wrapped) for a reply naming a step the definition
// lacks; ErrStrayReply (wrapped) for a reply answering a command the saga
// never sent for that step and action; a *RefusedError for an operator
// action not allowed now, or a cancel (action cancel) from the pivot on; a
// *EventError for an external event not recorded (see Engine.SendEvent's
// contract); other errors for inputs that do not belong together (wrong
// type, corrupt instance) or a start whose first command cannot be built. Events the
// transition table does not allow are not errors: the decision is unchanged
// with an ignored journal entry (Late or Illegal set); so is a reply to a
// send of its step's action other than the latest (late: only the awaited
// attempt, compensation or query round is answered).
func Decide(def *Def, in Instance, ev Event) (Decision, error) {
	if def == nil {
		return Decision{}, errors.New("saga: decide: nil definition")
	}
	if in.Type != def.Name || in.DefVersion != def.Version {
		return Decision{}, fmt.Errorf("saga %s: decide: instance is %q v%d, definition is %q v%d", in.ID, in.Type, in.DefVersion, def.Name, def.Version)
	}
	if len(in.Steps) != len(def.Steps) {
		return Decision{}, fmt.Errorf("saga %s: decide: instance has %d steps, definition %d", in.ID, len(in.Steps), len(def.Steps))
	}
	if in.Cursor < -1 || in.Cursor >= len(in.Steps) {
		return Decision{}, fmt.Errorf("saga %s: decide: cursor %d out of range", in.ID, in.Cursor)
	}
	m := &machine{def: def, prev: in, in: in.clone(), at: ev.At}
	switch ev.Kind {
	case EventStart:
		return m.start()
	case EventReply:
		if ev.Reply == nil {
			return Decision{}, errors.New("saga: decide: reply event without reply")
		}
		return m.reply(ev.Reply)
	case EventTimer:
		return m.timer()
	case EventOperator:
		if ev.Operator == nil {
			return Decision{}, errors.New("saga: decide: operator event without operator")
		}
		return m.operator(*ev.Operator)
	case EventExternal:
		if ev.External == nil {
			return Decision{}, errors.New("saga: decide: external event without event")
		}
		return m.external(*ev.External)
	case EventCancel:
		if ev.Cancel == nil {
			return Decision{}, errors.New("saga: decide: cancel event without cancel")
		}
		return m.cancel(*ev.Cancel)
	}
	return Decision{}, fmt.Errorf("saga %s: decide: unknown event kind %q", in.ID, ev.Kind)
}

type machine struct {
	def  *Def
	prev Instance
	in   Instance
	at   time.Time
	d    Decision
	// payloads are the reply payloads of the steps that succeeded in this
	// decision, merged as received (a step's stored Output drops an empty
	// or null one).
	payloads map[int][]byte
	// mac is the saga's command-id HMAC, keyed once for the decision.
	mac hash.Hash
}

// commandID is in.CommandID with the decision's one keyed HMAC.
func (m *machine) commandID(step string, action message.Action, attempt int) uuid.UUID {
	if m.mac == nil {
		m.mac = hmac.New(sha256.New, m.in.Secret)
	} else {
		m.mac.Reset()
	}
	return commandID(m.mac, m.in.ID, step, action, attempt)
}

func (m *machine) note(e JournalEntry) {
	e.SagaID = m.in.ID
	e.At = m.at
	m.d.Journal = append(m.d.Journal, e)
}

func (m *machine) finish() (Decision, error) {
	m.refreshCursor()
	m.d.Changed = true
	m.in.Version = m.prev.Version + 1
	m.in.UpdatedAt = m.at
	if m.in.State.Terminal() && m.in.FinishedAt == nil {
		at := m.at
		m.in.FinishedAt = &at
	}
	for i := range m.d.Journal {
		m.d.Journal[i].From = m.prev.State
		m.d.Journal[i].To = m.in.State
	}
	m.d.Flagged = m.in.Flag != "" && m.prev.Flag == ""
	m.d.Next = m.in
	return m.d, nil
}

// ignore leaves the instance as it was and journals why.
func (m *machine) ignore(late bool, e JournalEntry) (Decision, error) {
	e.Ignored = true
	if late {
		e.Event = JournalLate
	} else {
		e.Event = JournalIllegal
	}
	e.SagaID, e.At, e.From, e.To = m.prev.ID, m.at, m.prev.State, m.prev.State
	return Decision{Next: m.prev, Journal: []JournalEntry{e}, Late: late, Illegal: !late}, nil
}

func (m *machine) noop() (Decision, error) { return Decision{Next: m.prev}, nil }

func (m *machine) settle(i int, action message.Action, outcome message.Outcome) {
	s := &m.in.Steps[i]
	start := s.StartedAt
	if action == message.Compensate {
		start = s.CompStartedAt
	}
	var d time.Duration
	if start != nil {
		d = m.at.Sub(*start)
	}
	m.d.Settled = append(m.d.Settled, SettledStep{Step: s.Name, Action: action, Outcome: outcome, Duration: d})
}

func (m *machine) start() (Decision, error) {
	if m.prev.Cursor != -1 || m.prev.State != Running {
		return m.ignore(false, JournalEntry{Reason: "start of a saga that already started"})
	}
	if m.def.Deadline > 0 {
		dl := m.at.Add(m.def.Deadline)
		m.in.DeadlineAt = &dl
	}
	m.note(JournalEntry{Event: JournalStarted, Step: m.def.Steps[0].Name})
	if err := m.enterUnit(0); err != nil {
		var se *stepError
		if errors.As(err, &se) {
			return Decision{}, fmt.Errorf("saga %s (%s): start: step %q: build command: %w", m.in.ID, m.def.Name, m.def.Steps[se.i].Name, se.err)
		}
		return Decision{}, err
	}
	return m.finish()
}

func (m *machine) sendForward(i int) error {
	sd := &m.def.Steps[i]
	payload, err := sd.command(m.in.Data)
	if err != nil {
		return err
	}
	s := &m.in.Steps[i]
	s.Attempts++
	id := m.commandID(sd.Name, message.Forward, s.Attempts)
	s.State, s.AwaitID = StepRunning, id
	if s.StartedAt == nil {
		at := m.at
		s.StartedAt = &at
	}
	s.DueAt = m.dueBy(i, m.at.Add(awaitFor(sd.Timeout, sd.Retry, m.in.ID, sd.Name, s.Attempts)))
	m.moveCursor(i)
	if i == m.def.Pivot {
		// The deadline bounds the phase before the pivot; once the pivot is
		// sent, its own attempts and deadline rule.
		m.in.DeadlineAt = nil
	}
	m.emit(sd, message.Forward, id, s.Attempts, payload)
	return nil
}

func (m *machine) sendCompensate(i int) error {
	sd := &m.def.Steps[i]
	if sd.compensation == nil {
		return fmt.Errorf("step %q has no compensation", sd.Name)
	}
	payload, err := sd.compensation(m.compensationData(i))
	if err != nil {
		return err
	}
	s := &m.in.Steps[i]
	s.CompAttempts++
	id := m.commandID(sd.Name, message.Compensate, s.CompAttempts)
	s.State, s.AwaitID = StepCompensating, id
	due := m.at.Add(awaitFor(sd.Timeout, sd.CompRetry, m.in.ID, sd.Name+"/compensate", s.CompAttempts))
	s.DueAt = &due
	if s.CompStartedAt == nil {
		at := m.at
		s.CompStartedAt = &at
	}
	m.in.Cursor = i
	m.emit(sd, message.Compensate, id, s.CompAttempts, payload)
	return nil
}

func (m *machine) emit(sd *StepDef, action message.Action, id uuid.UUID, attempt int, payload []byte) {
	m.d.Send = append(m.d.Send, Outgoing{Participant: sd.Participant, Command: message.Command{
		MessageID: id, SagaID: m.in.ID, SagaType: m.in.Type, AggregateID: m.in.AggregateID,
		Step: sd.Name, Action: action, Attempt: attempt, SentAt: m.at, Payload: payload,
	}})
}

// cannotSend handles a forward command that could not be built (a
// definition bug): step i was never sent.
func (m *machine) cannotSend(i int, err error) {
	s := &m.in.Steps[i]
	s.State, s.DueAt = StepFailed, nil
	s.LastError = "build command: " + err.Error()
	if m.def.afterPivot(i) {
		m.fail(fmt.Sprintf("step %q: cannot build its command: %v", s.Name, err))
		return
	}
	m.compensate()
}

func (m *machine) fail(reason string) {
	m.in.State = Failed
	m.in.DeadlineAt = nil
	for j := range m.in.Steps {
		m.in.Steps[j].DueAt = nil
	}
	if len(m.d.Journal) > 0 {
		j := &m.d.Journal[len(m.d.Journal)-1]
		if j.Reason == "" {
			j.Reason = reason
		} else {
			j.Reason += "; " + reason
		}
	}
}

func (m *machine) flag(reason string) {
	if m.in.Flag == "" {
		m.in.Flag = reason
	}
}

// sends is how many commands of action step i has sent (its attempts).
func (m *machine) sends(i int, action message.Action) int {
	s := &m.in.Steps[i]
	switch action {
	case message.Compensate:
		return s.CompAttempts
	case message.Query:
		return s.QueryAttempts
	}
	return s.Attempts
}

// sentAttempt is the attempt whose command of action step i id is, or 0
// if the saga never sent it. The latest send is checked first: it is the
// one a reply normally answers.
func (m *machine) sentAttempt(i int, action message.Action, id uuid.UUID) int {
	name := m.in.Steps[i].Name
	for k := m.sends(i, action); k >= 1; k-- {
		if m.commandID(name, action, k) == id {
			return k
		}
	}
	return 0
}

func (m *machine) reply(r *message.Reply) (Decision, error) {
	i, ok := m.def.StepIndex(r.Step)
	if !ok {
		return Decision{}, fmt.Errorf("saga %s (%s): reply %s names step %q: %w", m.in.ID, m.in.Type, r.MessageID, r.Step, ErrUnknownStep)
	}
	if r.SagaID != m.in.ID {
		return Decision{}, fmt.Errorf("saga %s: reply %s is for saga %s", m.in.ID, r.MessageID, r.SagaID)
	}
	mid := r.MessageID
	base := JournalEntry{Step: r.Step, Action: string(r.Action), MessageID: &mid}
	k := m.sentAttempt(i, r.Action, r.InReplyTo)
	if k == 0 {
		return Decision{}, fmt.Errorf("saga %s (%s): reply %s: in_reply_to %s is not a %s command this saga sent for step %q: %w",
			m.in.ID, m.in.Type, r.MessageID, message.IDHash(r.InReplyTo), r.Action, r.Step, ErrStrayReply)
	}
	// Only the round the saga awaits is answered: the latest send of the
	// action (the forward's latest attempt, the latest compensation, the
	// latest query). An answer to an earlier send is ignored, whatever it
	// says: the participant's barrier, keyed by (saga, step, action),
	// answers the latest send with the same recorded outcome, so nothing
	// is lost, and a reply forged from an id seen earlier (a dead letter,
	// the command topic) is not taken. While the step is queried, the
	// forward's latest send still counts (its definite answer is as good
	// as the query's; the state checks below take it).
	if n := m.sends(i, r.Action); k != n {
		base.Reason = fmt.Sprintf("%s %s answers attempt %d; the saga awaits attempt %d", r.Action, r.Outcome, k, n)
		return m.ignore(true, base)
	}
	s := &m.in.Steps[i]
	if r.Action == message.Query {
		return m.queryReply(i, r, base)
	}
	if m.in.State.Terminal() {
		base.Reason = fmt.Sprintf("%s %s after the saga was %s", r.Action, r.Outcome, m.in.State)
		return m.ignore(true, base)
	}
	switch r.Action {
	case message.Forward:
		// A definite answer to the latest send is taken while the step
		// is queried too: it is as good as the query's.
		// A member of a group still in flight when the saga turned back
		// (another member failed, a cancel) is settled while the saga
		// compensates: its answer is taken then too.
		if (m.in.State != Running && m.in.State != Compensating) || !s.State.inFlight() {
			base.Reason = fmt.Sprintf("forward %s while the step is %s and the saga %s", r.Outcome, s.State, m.in.State)
			return m.ignore(true, base)
		}
		switch r.Outcome {
		case message.Success:
			m.note(withEvent(base, JournalStepSucceeded, ""))
			m.forwardSucceeded(i, r)
		case message.Failure:
			m.note(withEvent(base, JournalStepFailed, r.Reason))
			m.forwardFailed(i, r.Reason)
		case message.Retry:
			if s.State != StepRunning || r.InReplyTo != s.AwaitID {
				base.Reason = "retry answer to an earlier send"
				return m.ignore(true, base)
			}
			m.note(withEvent(base, JournalRetryAnswer, r.Reason))
			s.RetryAnswers++
			s.LastError = "retry: " + r.Reason
			s.DueAt = nil
			m.retryOrGiveUp(i, true)
		case message.Accepted:
			return m.acceptedReply(i, r, base)
		default:
			return Decision{}, fmt.Errorf("saga %s: reply %s: unknown outcome %q", m.in.ID, r.MessageID, r.Outcome)
		}
	case message.Compensate:
		if m.in.State != Compensating || m.in.Cursor != i || (s.State != StepCompensating && s.State != StepCompRetrying) {
			base.Reason = fmt.Sprintf("compensate %s while the step is %s and the saga %s", r.Outcome, s.State, m.in.State)
			return m.ignore(true, base)
		}
		switch r.Outcome {
		case message.Success:
			m.note(withEvent(base, JournalCompensated, r.Reason))
			m.settle(i, message.Compensate, message.Success)
			at := m.at
			s.State, s.DueAt, s.CompFinishedAt, s.CompensationNote = StepCompensated, nil, &at, r.Reason
			m.compensate()
		case message.Failure, message.Retry:
			if s.State != StepCompensating || r.InReplyTo != s.AwaitID {
				base.Reason = "answer to an earlier compensation send"
				return m.ignore(true, base)
			}
			m.note(withEvent(base, JournalCompensationBusy, r.Reason))
			m.compensationRetry(i, fmt.Sprintf("compensation %s: %s", r.Outcome, r.Reason))
		default:
			return Decision{}, fmt.Errorf("saga %s: reply %s: unknown outcome %q", m.in.ID, r.MessageID, r.Outcome)
		}
	default:
		return Decision{}, fmt.Errorf("saga %s: reply %s: unknown action %q", m.in.ID, r.MessageID, r.Action)
	}
	return m.finish()
}

func withEvent(e JournalEntry, event, reason string) JournalEntry {
	e.Event, e.Reason = event, reason
	return e
}

func (m *machine) forwardSucceeded(i int, r *message.Reply) {
	s := &m.in.Steps[i]
	m.settle(i, message.Forward, message.Success)
	at := m.at
	s.State, s.DueAt, s.FinishedAt, s.LastError = StepSucceeded, nil, &at, ""
	s.Seq = m.nextSeq()
	if len(r.Payload) > 0 && string(r.Payload) != "null" {
		s.Output = r.Payload
	}
	if m.payloads == nil {
		m.payloads = map[int][]byte{}
	}
	m.payloads[i] = r.Payload
	if m.in.State == Compensating {
		// A member that took effect after the saga turned back: it is
		// compensated with the others, once none is in flight.
		m.compensate()
		return
	}
	m.unitProgress(m.def.Steps[i].Unit)
}

func (m *machine) forwardFailed(i int, reason string) {
	s := &m.in.Steps[i]
	m.settle(i, message.Forward, message.Failure)
	at := m.at
	s.State, s.DueAt, s.FinishedAt, s.LastError = StepFailed, nil, &at, reason
	if m.def.afterPivot(i) {
		m.fail(fmt.Sprintf("step %q answered a business failure after the pivot (a definition error: steps after the pivot must not fail): %s", s.Name, reason))
		return
	}
	m.compensate()
}

// stepDeadline is when step i's forward runs out of time: its effective
// deadline after its first send. Steps after the pivot never give up and
// have none (ok false), nor has a step not sent yet.
func (m *machine) stepDeadline(i int) (time.Time, bool) {
	s := &m.in.Steps[i]
	if m.def.afterPivot(i) || s.StartedAt == nil {
		return time.Time{}, false
	}
	return s.StartedAt.Add(m.def.Steps[i].GiveUpAfter()), true
}

// outOfTime reports whether step i's deadline has passed.
func (m *machine) outOfTime(i int) bool {
	dl, ok := m.stepDeadline(i)
	return ok && !m.at.Before(dl)
}

// dueBy returns at, or step i's deadline if that is earlier: a step's
// timeout or backoff never outlasts its deadline, so it is given up on
// time.
func (m *machine) dueBy(i int, at time.Time) *time.Time {
	if dl, ok := m.stepDeadline(i); ok && dl.Before(at) {
		at = dl
	}
	return &at
}

// outOfTimeReason says why step i was given up at its deadline.
func (m *machine) outOfTimeReason(i int) string {
	return fmt.Sprintf("got no definite answer within its deadline %s (%d sends)", m.def.Steps[i].GiveUpAfter(), m.in.Steps[i].Attempts)
}

// timeoutReason explains the timeout of step i's latest forward send.
func (m *machine) timeoutReason(i int) string {
	s, sd := &m.in.Steps[i], &m.def.Steps[i]
	if m.outOfTime(i) {
		return fmt.Sprintf("no reply to attempt %d before the step deadline %s", s.Attempts, sd.GiveUpAfter())
	}
	return fmt.Sprintf("no reply to attempt %d within %s", s.Attempts, awaitFor(sd.Timeout, sd.Retry, m.in.ID, sd.Name, s.Attempts))
}

// retryOrGiveUp follows the transition table after a retry answer
// (answered) or a timeout of step i's forward: before and at the pivot the
// step is given up once its retry answers reach Retry.MaxAttempts or its
// deadline has passed, otherwise (and always after the pivot) the same
// action is re-sent once after the backoff.
func (m *machine) retryOrGiveUp(i int, answered bool) {
	s, sd := &m.in.Steps[i], &m.def.Steps[i]
	switch {
	case m.def.afterPivot(i):
		if s.Attempts >= sd.Retry.MaxAttempts {
			m.flag(fmt.Sprintf("step %q has not succeeded after %d attempts (still retrying)", s.Name, s.Attempts))
		}
	case answered && s.RetryAnswers >= sd.Retry.MaxAttempts:
		m.giveUp(i, fmt.Sprintf("answered retry %d times (%d sends)", s.RetryAnswers, s.Attempts))
		return
	case m.outOfTime(i):
		m.giveUp(i, m.outOfTimeReason(i))
		return
	}
	s.State = StepRetrying
	s.DueAt = m.dueBy(i, m.at.Add(Backoff(sd.Retry, m.in.ID, s.Name, s.Attempts)))
}

func (m *machine) compensationRetry(i int, why string) {
	s, sd := &m.in.Steps[i], &m.def.Steps[i]
	s.LastError = why
	if s.CompAttempts >= sd.CompRetry.MaxAttempts {
		m.flag(fmt.Sprintf("compensation of step %q has not succeeded after %d attempts (still retrying)", s.Name, s.CompAttempts))
	}
	s.State = StepCompRetrying
	due := m.at.Add(Backoff(sd.CompRetry, m.in.ID, s.Name+"/compensate", s.CompAttempts))
	s.DueAt = &due
}

func (m *machine) operator(op Operator) (Decision, error) {
	refuse := func(format string, args ...any) (Decision, error) {
		return Decision{}, &RefusedError{Action: op.Action, Why: fmt.Sprintf(format, args...)}
	}
	if op.Actor == "" {
		return refuse("an actor is required")
	}
	if op.Reason == "" {
		return refuse("a reason is required")
	}
	if strings.ContainsRune(op.Actor, 0) || strings.ContainsRune(op.Reason, 0) || !utf8.ValidString(op.Actor) || !utf8.ValidString(op.Reason) {
		return refuse("actor and reason must be UTF-8 text without NUL characters")
	}
	if m.in.Cursor < 0 {
		return refuse("the saga has not started")
	}
	entry := JournalEntry{Event: JournalOperator + string(op.Action), Actor: op.Actor, Reason: op.Reason}
	switch op.Action {
	case ActionRetry:
		if m.in.State.Terminal() && !m.reopenStopped() {
			return refuse("the saga is %s; only a running or compensating saga, or a failed one stopped while re-sending, has a step to retry", m.in.State)
		}
		i := m.in.Cursor
		s := &m.in.Steps[i]
		entry.Step = s.Name
		switch s.State {
		case StepRunning, StepRetrying, StepAccepted:
			entry.Action = string(message.Forward)
			m.note(entry)
			if err := m.sendForward(i); err != nil {
				m.cannotSend(i, err)
			}
		case StepQuerying:
			entry.Action = string(message.Query)
			m.note(entry)
			m.sendQuery(i)
		case StepCompensating, StepCompRetrying:
			entry.Action = string(message.Compensate)
			m.note(entry)
			if err := m.sendCompensate(i); err != nil {
				m.fail(fmt.Sprintf("cannot build the compensation of step %q: %v", s.Name, err))
			}
		default:
			return refuse("step %q is %s; nothing to retry", s.Name, s.State)
		}
	case ActionCompensate:
		if m.in.State != Running {
			return refuse("the saga is %s; only a running saga can be compensated", m.in.State)
		}
		i := m.in.Cursor
		if m.def.Pivot >= 0 && i >= m.def.Pivot {
			return refuse("the pivot %q has been sent: past the point of no return the saga only goes forward", m.def.Steps[m.def.Pivot].Name)
		}
		s := &m.in.Steps[i]
		entry.Step = s.Name
		m.note(entry)
		if s.State.inFlight() {
			s.State, s.DueAt = StepUnknown, nil
			s.LastError = "compensated by operator " + op.Actor
		}
		m.compensate()
	case ActionResolve:
		if m.in.State != Failed {
			return refuse("the saga is %s; only a failed saga can be resolved", m.in.State)
		}
		if op.Outcome != Completed && op.Outcome != Compensated {
			return refuse("outcome %q must be completed or compensated", op.Outcome)
		}
		m.note(entry)
		m.in.State = op.Outcome
		m.in.Flag = ""
		at := m.at
		m.in.FinishedAt = &at
	case ActionQuery:
		if err := m.operatorQuery(entry); err != nil {
			return Decision{}, err
		}
	case ActionCheck:
		if err := m.operatorCheck(entry); err != nil {
			return Decision{}, err
		}
	case ActionMarkDone, ActionMarkCompensated, ActionForceFail, ActionResume:
		if err := m.repair(op, entry); err != nil {
			return Decision{}, err
		}
	default:
		return refuse("unknown action; want retry, compensate, resolve, query, check, mark-done, mark-compensated, force-fail or resume")
	}
	return m.finish()
}
