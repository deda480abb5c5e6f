package sagatest

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/saga"
)

// Harness drives one saga of a definition through [saga.Decide]: it plays
// the participants (scripted answers), the timer loop (a clock moved by the
// test) and the operator, records the commands sent and the journal, and
// checks [CheckDecision]'s invariants after every event. Nothing runs in
// the background and nothing sleeps: every step is the test's. A Harness is
// not safe for concurrent use.
type Harness struct {
	t          TB
	def        *saga.Def
	in         saga.Instance
	start, now time.Time
	sent       []message.Command
	queue      []message.Command // sent, not yet taken by Expect
	journal    []saga.JournalEntry
	matched    int // journal entries ExpectJournal has seen
	last       saga.Decision
	lastReply  *message.Reply
	replies    int
	decisions  int               // decisions recorded
	sentIn     map[uuid.UUID]int // command id: the decision that sent it
}

// New returns a harness for a new, not yet started saga of def (a built
// definition: [saga.Definition.Build] or a registry's).
func New(t TB, def *saga.Def, opts ...Option) *Harness {
	t.Helper()
	if def == nil {
		t.Fatalf("sagatest: New: nil definition")
		return nil
	}
	c := config{start: DefaultStart, aggregate: "aggregate-1"}
	for _, o := range opts {
		o(&c)
	}
	if c.id == uuid.Nil {
		c.id = uuid.NewSHA1(uuid.NameSpaceURL, []byte("sagatest:"+def.Name))
	}
	if c.key == "" {
		c.key = c.id.String()
	}
	data := json.RawMessage(`{}`)
	if c.data != nil {
		b, err := encode(c.data)
		if err != nil {
			t.Fatalf("sagatest: %s saga: Data: %v", def.Name, err)
			return nil
		}
		data = b
	}
	in := saga.NewInstance(def, c.id, c.aggregate, c.key, data, c.start)
	in.Secret = c.secret
	if len(in.Secret) == 0 {
		in.Secret = []byte(uuid.NewSHA1(c.id, []byte("sagatest secret")).String())
	}
	return &Harness{t: t, def: def, in: in, start: c.start, now: c.start}
}

func encode(v any) (json.RawMessage, error) {
	var b []byte
	switch p := v.(type) {
	case nil:
		return nil, nil
	case json.RawMessage:
		b = p
	case []byte:
		b = p
	default:
		var err error
		if b, err = json.Marshal(v); err != nil {
			return nil, fmt.Errorf("encode %T: %w", v, err)
		}
		return b, nil
	}
	if !json.Valid(b) {
		return nil, fmt.Errorf("not JSON: %.80q", b)
	}
	return append(json.RawMessage(nil), b...), nil
}

// fatalf fails the test with the saga's name, id, clock and position.
func (h *Harness) fatalf(format string, args ...any) {
	h.t.Helper()
	h.t.Fatalf("sagatest: %s: %s", h.where(), fmt.Sprintf(format, args...))
}

func (h *Harness) where() string {
	at := ""
	if s := h.in.CurrentStep(); s != "" {
		at = fmt.Sprintf(" at step %q (%s)", s, h.in.Steps[h.in.Cursor].State)
	}
	state := string(h.in.State)
	if h.in.Cursor < 0 {
		state = "not started"
	}
	return fmt.Sprintf("%s saga %s, clock +%s, %s%s", h.def.Name, h.in.ID, h.now.Sub(h.start), state, at)
}

// Deliver decides any event (a reply, timer or operator event built by the
// test; a zero At means now), checks the invariants and records the result.
// Unlike the other methods it returns Decide's error (a stray reply, a
// refused operator action, a command that cannot be built) instead of
// failing the test; the saga is then unchanged.
func (h *Harness) Deliver(ev saga.Event) (saga.Decision, error) {
	h.t.Helper()
	if ev.At.IsZero() {
		ev.At = h.now
	}
	prev := h.in
	d, err := saga.Decide(h.def, prev, ev)
	if err != nil {
		return d, err
	}
	CheckDecision(h.t, h.def, prev, ev, d)
	h.in, h.last = d.Next, d
	h.journal = append(h.journal, d.Journal...)
	h.decisions++
	if h.sentIn == nil {
		h.sentIn = map[uuid.UUID]int{}
	}
	for _, o := range d.Send {
		h.sentIn[o.Command.MessageID] = h.decisions
		h.sent = append(h.sent, o.Command)
		h.queue = append(h.queue, o.Command)
	}
	if ev.Kind == saga.EventReply {
		h.lastReply = ev.Reply
	}
	return d, nil
}

func (h *Harness) must(ev saga.Event) saga.Decision {
	h.t.Helper()
	d, err := h.Deliver(ev)
	if err != nil {
		h.fatalf("%s: %v", describeEvent(ev), err)
	}
	return d
}

// Start starts the saga: its first command is sent (see [Harness.Expect]).
func (h *Harness) Start() saga.Decision {
	h.t.Helper()
	return h.must(saga.Event{Kind: saga.EventStart, At: h.now})
}

// Expect asserts that the next command sent and not yet expected is for
// step and action (in the order they were sent) and returns it.
func (h *Harness) Expect(step string, action message.Action) message.Command {
	h.t.Helper()
	h.index(step)
	if len(h.queue) == 0 {
		h.fatalf("Expect: want a %s command for step %q, but none was sent since the last one expected (journal: %s)", action, step, h.tail(3))
		return message.Command{}
	}
	c := h.queue[0]
	if c.Step != step || c.Action != action {
		h.fatalf("Expect: want a %s command for step %q, got %s for step %q (attempt %d)", action, step, c.Action, c.Step, c.Attempt)
		return c
	}
	h.queue = h.queue[1:]
	return c
}

// ExpectSends asserts that the next commands sent and not yet expected
// begin with one or more for step and action, and takes all of those (a
// command and its re-sends, say after [Harness.Advance] over several
// timeouts).
func (h *Harness) ExpectSends(step string, action message.Action) []message.Command {
	h.t.Helper()
	first := h.Expect(step, action)
	out := []message.Command{first}
	for len(h.queue) > 0 && h.queue[0].Step == step && h.queue[0].Action == action {
		out = append(out, h.queue[0])
		h.queue = h.queue[1:]
	}
	return out
}

// ExpectNoCommand asserts that every command sent has been expected.
func (h *Harness) ExpectNoCommand() {
	h.t.Helper()
	if len(h.queue) > 0 {
		h.fatalf("ExpectNoCommand: %d commands sent and not expected: %s", len(h.queue), commands(h.queue))
	}
}

// Unexpected returns the commands sent and not yet taken by Expect.
func (h *Harness) Unexpected() []message.Command { return append([]message.Command(nil), h.queue...) }

// Sent returns every command sent so far, in order.
func (h *Harness) Sent() []message.Command { return append([]message.Command(nil), h.sent...) }

func commands(cs []message.Command) string {
	s := make([]string, len(cs))
	for i, c := range cs {
		s[i] = fmt.Sprintf("%s %s #%d", c.Step, c.Action, c.Attempt)
	}
	return strings.Join(s, ", ")
}

// Awaited returns the command the saga awaits an answer to now: the latest
// send of the active step's action (it may be waiting out a backoff before
// the next). False for a saga not started or terminal.
func (h *Harness) Awaited() (message.Command, bool) {
	if h.in.State.Terminal() || h.in.Cursor < 0 {
		return message.Command{}, false
	}
	id := h.in.Steps[h.in.Cursor].AwaitID
	for i := len(h.sent) - 1; i >= 0; i-- {
		if h.sent[i].MessageID == id {
			return h.sent[i], true
		}
	}
	return message.Command{}, false
}

func (h *Harness) awaited(what string) message.Command {
	h.t.Helper()
	c, ok := h.Awaited()
	if !ok {
		h.fatalf("%s: no command awaits an answer", what)
	}
	return c
}

// Succeed answers the awaited command with success and the step's output
// (nil for none; see [Answer.Payload]).
func (h *Harness) Succeed(payload any) saga.Decision {
	h.t.Helper()
	return h.Reply(h.awaited("Succeed"), Succeeded(payload))
}

// Fail answers the awaited command with a business failure.
func (h *Harness) Fail(reason string) saga.Decision {
	h.t.Helper()
	return h.Reply(h.awaited("Fail"), Failed(reason))
}

// Retry answers the awaited command with retry (not now, ask again).
func (h *Harness) Retry(reason string) saga.Decision {
	h.t.Helper()
	return h.Reply(h.awaited("Retry"), RetryLater(reason))
}

// Accept answers the awaited forward accepted (see [AcceptedLater]).
func (h *Harness) Accept(cancellable bool) saga.Decision {
	h.t.Helper()
	return h.Reply(h.awaited("Accept"), AcceptedLater(cancellable))
}

// Reply answers cmd, any command the saga sent (the awaited one, an earlier
// send, one of a step already settled), now. An answer the saga no longer
// awaits is journaled as ignored (a late reply), as in production.
func (h *Harness) Reply(cmd message.Command, a Answer) saga.Decision {
	h.t.Helper()
	payload, err := encode(a.Payload)
	if err != nil {
		h.fatalf("reply to step %q %s: payload: %v", cmd.Step, cmd.Action, err)
	}
	h.replies++
	r := &message.Reply{
		MessageID: uuid.NewSHA1(h.in.ID, fmt.Appendf(nil, "sagatest reply %d", h.replies)),
		InReplyTo: cmd.MessageID, SagaID: cmd.SagaID, Step: cmd.Step, Action: cmd.Action,
		Outcome: a.Outcome, Reason: a.Reason, Payload: payload,
	}
	return h.must(saga.Event{Kind: saga.EventReply, At: h.now, Reply: r})
}

// AnswerEarlier answers the attempt-th send of the awaited step and action
// (of the last command sent, when nothing is awaited): a slow participant's
// answer to a send that timed out and was re-sent, or a duplicate. Unless
// attempt is the latest send, the saga journals it as a late reply and
// ignores it.
func (h *Harness) AnswerEarlier(attempt int, a Answer) saga.Decision {
	h.t.Helper()
	ref, ok := h.Awaited()
	if !ok {
		if len(h.sent) == 0 {
			h.fatalf("AnswerEarlier: no command was sent")
		}
		ref = h.sent[len(h.sent)-1]
	}
	for _, c := range h.sent {
		if c.Step == ref.Step && c.Action == ref.Action && c.Attempt == attempt {
			return h.Reply(c, a)
		}
	}
	h.fatalf("AnswerEarlier: step %q %s was sent %d times, there is no attempt %d", ref.Step, ref.Action, ref.Attempt, attempt)
	return saga.Decision{}
}

// Redeliver delivers the last reply again, with the same message id, now
// (at-least-once delivery; the inbox would normally drop it first).
func (h *Harness) Redeliver() saga.Decision {
	h.t.Helper()
	if h.lastReply == nil {
		h.fatalf("Redeliver: no reply was delivered")
	}
	return h.must(saga.Event{Kind: saga.EventReply, At: h.now, Reply: h.lastReply})
}

// Operate applies an operator action now. An empty Actor or Reason is
// filled in ("sagatest", "test"); a refused action returns its
// *saga.RefusedError and changes nothing.
func (h *Harness) Operate(op saga.Operator) (saga.Decision, error) {
	h.t.Helper()
	if op.Actor == "" {
		op.Actor = "sagatest"
	}
	if op.Reason == "" {
		op.Reason = "test"
	}
	d, err := h.Deliver(saga.Event{Kind: saga.EventOperator, At: h.now, Operator: &op})
	if err != nil && !errors.Is(err, saga.ErrRefused) {
		h.fatalf("operator %s: %v", op.Action, err)
	}
	return d, err
}

// Now is the harness's clock.
func (h *Harness) Now() time.Time { return h.now }

// Elapsed is how far the clock moved since it started.
func (h *Harness) Elapsed() time.Duration { return h.now.Sub(h.start) }

// NextWakeup is when the saga's timer falls due (see
// [saga.Instance.NextWakeup]); false when it has none.
func (h *Harness) NextWakeup() (time.Time, bool) {
	w := h.in.NextWakeup()
	if w == nil {
		return time.Time{}, false
	}
	return *w, true
}

func (h *Harness) timer() saga.Decision {
	h.t.Helper()
	return h.must(saga.Event{Kind: saga.EventTimer, At: h.now})
}

// Advance moves the clock forward by d, firing the saga's timer at each
// wake-up that falls due on the way, at its time, as a punctual timer loop
// would. It returns how many timer events fired.
func (h *Harness) Advance(d time.Duration) int {
	h.t.Helper()
	if d < 0 {
		h.fatalf("Advance(%s): the clock only goes forward", d)
	}
	to, n := h.now.Add(d), 0
	for w, ok := h.NextWakeup(); ok && !w.After(to); w, ok = h.NextWakeup() {
		if n++; n > maxTimers {
			h.fatalf("Advance(%s): %d timer events and the saga still wakes up before the end", d, maxTimers)
		}
		h.now = later(h.now, w)
		h.timer()
	}
	h.now = to
	return n
}

// FireTimers fires the saga's timer while it is due at the current time
// (the clock does not move) and returns how many timer events fired.
func (h *Harness) FireTimers() int { h.t.Helper(); return h.Advance(0) }

// FireNextTimer moves the clock to the saga's next wake-up (a timeout, the
// end of a backoff, a deadline) and fires its timer there.
func (h *Harness) FireNextTimer() saga.Decision {
	h.t.Helper()
	w, ok := h.NextWakeup()
	if !ok {
		h.fatalf("FireNextTimer: the saga has no wake-up")
	}
	h.now = later(h.now, w)
	return h.timer()
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// DeadlineOf is when step, sent and before or at the pivot, is given up
// without a definite answer: its first send plus
// [saga.StepDef.GiveUpAfter].
func (h *Harness) DeadlineOf(step string) time.Time {
	h.t.Helper()
	i := h.index(step)
	if h.def.Pivot >= 0 && i > h.def.Pivot {
		h.fatalf("DeadlineOf(%q): the step runs after the pivot %q and has no deadline (it is retried until it succeeds)", step, h.def.Steps[h.def.Pivot].Name)
	}
	s := h.in.Steps[i]
	if s.StartedAt == nil {
		h.fatalf("DeadlineOf(%q): the step was never sent", step)
		return time.Time{}
	}
	return s.StartedAt.Add(h.def.Steps[i].GiveUpAfter())
}

// TimeoutUntilGivenUp plays a participant that never answers step: it
// fires the saga's timers (timeouts, then re-sends after the backoff) until
// the step is given up at its deadline, or at the saga's pre-pivot
// deadline if that comes first, and returns that last decision. The step's
// re-sends on the way are taken as expected; what giving up sends (before
// the pivot the step's own compensation; at the pivot nothing, the saga is
// failed) is left for [Harness.Expect]. The step must be active and before
// or at the pivot: after it nothing is given up.
func (h *Harness) TimeoutUntilGivenUp(step string) saga.Decision {
	h.t.Helper()
	i := h.index(step)
	if h.def.Pivot >= 0 && i > h.def.Pivot {
		h.fatalf("TimeoutUntilGivenUp(%q): the step runs after the pivot %q: it is retried until it succeeds and never given up", step, h.def.Steps[h.def.Pivot].Name)
	}
	active := func() bool {
		st := h.in.Steps[i].State
		return (h.in.State == saga.Running || h.in.State == saga.Compensating) && (st == saga.StepRunning || st == saga.StepRetrying)
	}
	if !active() {
		h.fatalf("TimeoutUntilGivenUp(%q): the step is %s, not awaiting its forward", step, h.in.Steps[i].State)
	}
	var d saga.Decision
	for n := 0; active(); n++ {
		if n == maxTimers {
			h.fatalf("TimeoutUntilGivenUp(%q): %d timer events and not given up", step, n)
		}
		before := len(h.queue)
		d = h.FireNextTimer()
		kept := append([]message.Command(nil), h.queue[:before]...)
		for _, c := range h.queue[before:] {
			if c.Step != step || c.Action != message.Forward {
				kept = append(kept, c)
			}
		}
		h.queue = kept
	}
	return d
}

// QueriesUnanswered lets every query of step (given up without a definite
// answer, now asking its participant what it recorded) time out unanswered,
// dropping them, until the give-up goes ahead: before the pivot the saga
// compensates, that step included; at the pivot it is failed. It returns the
// decision of the last timer.
func (h *Harness) QueriesUnanswered(step string) saga.Decision {
	h.t.Helper()
	i := h.index(step)
	querying := func() bool { return !h.in.State.Terminal() && h.in.Steps[i].State == saga.StepQuerying }
	if !querying() {
		h.fatalf("QueriesUnanswered(%q): the step is %s, not querying", step, h.in.Steps[i].State)
	}
	var d saga.Decision
	for n := 0; querying(); n++ {
		if n == maxTimers {
			h.fatalf("QueriesUnanswered(%q): %d timer events and still querying", step, n)
		}
		kept := h.queue[:0:0]
		for _, c := range h.queue {
			if c.Step != step || c.Action != message.Query {
				kept = append(kept, c)
			}
		}
		h.queue = kept
		d = h.FireNextTimer()
	}
	kept := h.queue[:0:0]
	for _, c := range h.queue {
		if c.Step != step || c.Action != message.Query {
			kept = append(kept, c)
		}
	}
	h.queue = kept
	return d
}

// index returns step's index, failing the test for a name the definition
// lacks.
func (h *Harness) index(step string) int {
	h.t.Helper()
	i, ok := h.def.StepIndex(step)
	if !ok {
		names := make([]string, len(h.def.Steps))
		for k, s := range h.def.Steps {
			names[k] = s.Name
		}
		h.fatalf("%s has no step %q (its steps: %s)", h.def.Name, step, strings.Join(names, ", "))
	}
	return i
}

// State is the saga's state.
func (h *Harness) State() saga.State { return h.in.State }

// ExpectState asserts the saga's state.
func (h *Harness) ExpectState(want saga.State) {
	h.t.Helper()
	if h.in.State != want {
		h.fatalf("ExpectState: the saga is %s, want %s (journal: %s)", h.in.State, want, h.tail(5))
	}
}

// Step returns the state of the step called name.
func (h *Harness) Step(name string) saga.StepState { h.t.Helper(); return h.in.Steps[h.index(name)] }

// Instance returns the saga as the engine would store it.
func (h *Harness) Instance() saga.Instance {
	in := h.in
	in.Steps = append([]saga.StepState(nil), h.in.Steps...)
	return in
}

// Def is the definition the harness drives.
func (h *Harness) Def() *saga.Def { return h.def }

// DecodeData decodes the saga's data (with the outputs merged so far) into v.
func (h *Harness) DecodeData(v any) {
	h.t.Helper()
	if err := json.Unmarshal(h.in.Data, v); err != nil {
		h.fatalf("DecodeData into %T: %v", v, err)
	}
}

// Last is the latest decision.
func (h *Harness) Last() saga.Decision { return h.last }

// Journal returns every journal entry so far, ignored ones included.
func (h *Harness) Journal() []saga.JournalEntry {
	return append([]saga.JournalEntry(nil), h.journal...)
}

// Events returns the journal as lines "<event> <step>" (the event alone
// for an entry without step), e.g. "step succeeded reserve-inventory".
func (h *Harness) Events() []string { return lines(h.journal) }

func lines(js []saga.JournalEntry) []string {
	out := make([]string, len(js))
	for i, j := range js {
		out[i] = strings.TrimSpace(j.Event + " " + j.Step)
	}
	return out
}

func (h *Harness) tail(n int) string {
	ls := lines(h.journal[max(0, len(h.journal)-n):])
	if len(ls) == 0 {
		return "empty"
	}
	return strings.Join(ls, "; ")
}

// ExpectJournal asserts the journal entries written since the previous
// ExpectJournal (since the start, the first time), in order. Each want
// matches an entry by its event ("step succeeded"), its event and step
// ("step succeeded lock-coupon", as [Harness.Events] prints it) or its
// event, step and action ("timeout lock-coupon/compensate").
func (h *Harness) ExpectJournal(want ...string) {
	h.t.Helper()
	got := h.journal[h.matched:]
	ok := len(got) == len(want)
	for i := 0; ok && i < len(want); i++ {
		e := got[i]
		w := want[i]
		ok = w == e.Event || w == e.Event+" "+e.Step || w == e.Event+" "+e.Step+"/"+e.Action
	}
	if !ok {
		h.fatalf("ExpectJournal: the journal since entry %d is\n\t%s\nwant\n\t%s", h.matched+1,
			strings.Join(lines(got), "\n\t"), strings.Join(want, "\n\t"))
	}
	h.matched = len(h.journal)
}
