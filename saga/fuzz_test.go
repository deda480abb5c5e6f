package saga_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/saga"
)

// choices turns the fuzzer's bytes into decisions; exhausted input reads 0.
type choices struct {
	b []byte
	i int
}

func (c *choices) more() bool { return c.i < len(c.b) }

func (c *choices) next() int {
	if c.i >= len(c.b) {
		return 0
	}
	c.i++
	return int(c.b[c.i-1])
}

var outcomes = []message.Outcome{message.Success, message.Failure, message.Retry}

// model follows one saga through random events and checks the invariants
// the state machine promises after every decision.
type model struct {
	t        testing.TB
	h        *harness
	replies  []*message.Reply // delivered
	held     []*message.Reply // produced but not yet delivered (reordering)
	fwdSent  map[int]bool
	compSeen map[int]bool
	lastComp int
	compSent bool
	pivotOK  bool
	resolved bool
	// lastSend is when the latest command of each step and action was sent.
	lastSend map[string]time.Time
}

func newModel(t testing.TB, def *saga.Def, id uuid.UUID) *model {
	return &model{t: t, h: newHarness(t, def, id), fwdSent: map[int]bool{}, compSeen: map[int]bool{}, lastComp: len(def.Steps), lastSend: map[string]time.Time{}}
}

func (m *model) reply(c message.Command, outcome message.Outcome) *message.Reply {
	return m.h.replyTo(c, outcome)
}

// answer is the k-th kind of answer to c: success, failure, retry, and
// for a forward accepted, or accepted and cancellable (a retry for any
// other action, which is never answered accepted).
func (m *model) answer(c message.Command, k int) *message.Reply {
	k %= 5
	if k < 3 {
		return m.reply(c, outcomes[k])
	}
	if c.Action != message.Forward {
		return m.reply(c, message.Retry)
	}
	r := m.reply(c, message.Accepted)
	if k == 4 {
		r.Payload = message.AcceptedAnswer{Cancellable: true}.Encode()
	}
	return r
}

// outstanding is the command the saga awaits, if any.
func (m *model) outstanding() (message.Command, bool) {
	in := m.h.in
	if in.State.Terminal() || in.Cursor < 0 || len(m.h.sent) == 0 {
		return message.Command{}, false
	}
	s := in.Steps[in.Cursor]
	for k := len(m.h.sent) - 1; k >= 0; k-- {
		if m.h.sent[k].MessageID == s.AwaitID {
			return m.h.sent[k], true
		}
	}
	return message.Command{}, false
}

// sendsOf is how many commands of action st has sent.
func sendsOf(st saga.StepState, action message.Action) int {
	switch action {
	case message.Compensate:
		return st.CompAttempts
	case message.Query:
		return st.QueryAttempts
	}
	return st.Attempts
}

// apply decides ev and checks every invariant.
func (m *model) apply(ev saga.Event) saga.Decision {
	t, h := m.t, m.h
	t.Helper()
	prev := h.in
	sentBefore := len(h.sent)
	d, err := h.decide(ev)
	if err != nil {
		if ev.Kind == saga.EventReply && errors.Is(err, saga.ErrStrayReply) {
			// Only a reply that answers no send of its step and action is stray.
			r := ev.Reply
			for i, st := range prev.Steps {
				if st.Name != r.Step {
					continue
				}
				for k := 1; k <= sendsOf(st, r.Action); k++ {
					if prev.CommandID(r.Step, r.Action, k) == r.InReplyTo {
						t.Fatalf("reply to send %d of step %d %s %s rejected as stray: %v", k, i, r.Step, r.Action, err)
					}
				}
			}
			return d
		}
		var re *saga.RefusedError
		if ev.Kind != saga.EventOperator || !errors.As(err, &re) || !errors.Is(err, saga.ErrRefused) {
			t.Fatalf("%s event: unexpected error %v", ev.Kind, err)
		}
		return d
	}
	if ev.Kind == saga.EventReply {
		m.replies = append(m.replies, ev.Reply)
		// Only the latest send of a step's action is answered: a reply to
		// an earlier one, in whatever order it comes, changes nothing.
		r := ev.Reply
		if i, ok := h.def.StepIndex(r.Step); ok {
			st := prev.Steps[i]
			if n := sendsOf(st, r.Action); r.InReplyTo != prev.CommandID(r.Step, r.Action, n) && (d.Changed || !d.Late || len(d.Send) > 0) {
				t.Fatalf("reply to an earlier %s %s send (latest is attempt %d) was taken: changed=%v late=%v", r.Step, r.Action, n, d.Changed, d.Late)
			}
		}
	}
	// A timer at or after the wake-up the saga asked for must move it;
	// otherwise the engine's timer would claim it again and again.
	if w := prev.NextWakeup(); ev.Kind == saga.EventTimer && w != nil && !ev.At.Before(*w) && !d.Changed {
		t.Fatalf("timer at %s, at or after NextWakeup %s, changed nothing (saga %s, step %s %s)",
			ev.At, w, prev.State, prev.CurrentStep(), prev.Steps[prev.Cursor].State)
	}
	next := h.in
	if prev.State.Terminal() {
		if ev.Kind != saga.EventOperator && (d.Changed || next.State != prev.State || next.Version != prev.Version) {
			t.Fatalf("terminal %s saga moved on a %s event to %s v%d", prev.State, ev.Kind, next.State, next.Version)
		}
		reopen := ev.Operator != nil && ev.Operator.Action == saga.ActionRetry && prev.State == saga.Failed && prev.Steps[prev.Cursor].DueAt == nil &&
			(prev.Steps[prev.Cursor].State == saga.StepRetrying || prev.Steps[prev.Cursor].State == saga.StepCompRetrying)
		if d.Changed && (prev.State != saga.Failed || ev.Operator.Action != saga.ActionResolve) && !reopen {
			t.Fatalf("terminal %s saga left by operator %s", prev.State, ev.Operator.Action)
		}
	}
	if d.Changed && ev.Kind == saga.EventOperator && ev.Operator.Action == saga.ActionResolve {
		m.resolved = true
	}
	def := h.def
	m.checkSendBound(prev, ev, d)
	m.checkTimeouts(prev, ev, d)
	for _, c := range h.sent[sentBefore:] {
		i, _ := def.StepIndex(c.Step)
		// Between two sends of one step and action at least the backoff
		// passes (an operator's "retry now" aside): one re-send per timeout
		// or retry answer, after the pause, never a burst.
		key := c.Step + "/" + string(c.Action)
		if last, ok := m.lastSend[key]; ok && ev.Kind != saga.EventOperator && c.Attempt > 1 {
			p, name := def.Steps[i].Retry, c.Step
			if c.Action == message.Compensate {
				p, name = def.Steps[i].CompRetry, c.Step+"/compensate"
			}
			if gap, min := ev.At.Sub(last), saga.Backoff(p, prev.ID, name, c.Attempt-1); gap < min {
				t.Fatalf("%s %s attempt %d sent %s after the previous send, sooner than its backoff %s", c.Step, c.Action, c.Attempt, gap, min)
			}
		}
		m.lastSend[key] = ev.At
		switch c.Action {
		case message.Forward:
			if m.compSent {
				t.Fatalf("forward command for %s after compensation began", c.Step)
			}
			for j := 0; j < i; j++ {
				if next.Steps[j].State != saga.StepSucceeded {
					t.Fatalf("forward command for %s while earlier step %s is %s", c.Step, next.Steps[j].Name, next.Steps[j].State)
				}
			}
			m.fwdSent[i] = true
		case message.Compensate:
			if def.Pivot >= 0 && i >= def.Pivot {
				t.Fatalf("compensate command for %s, at or after the pivot", c.Step)
			}
			if m.pivotOK {
				t.Fatalf("compensate command for %s after the pivot succeeded", c.Step)
			}
			if !m.fwdSent[i] {
				t.Fatalf("compensate command for %s, whose forward was never sent", c.Step)
			}
			if i > m.lastComp || (i < m.lastComp && m.compSeen[i]) {
				t.Fatalf("compensate command for step %d (%s) after step %d: not in strictly decreasing order", i, c.Step, m.lastComp)
			}
			m.lastComp, m.compSeen[i], m.compSent = i, true, true
		}
	}
	if def.Pivot >= 0 && next.Steps[def.Pivot].State == saga.StepSucceeded {
		m.pivotOK = true
	}
	if m.pivotOK && next.State == saga.Compensating {
		t.Fatalf("saga compensating after its pivot succeeded")
	}
	if !m.resolved {
		switch next.State {
		case saga.Completed:
			for _, s := range next.Steps {
				if s.State != saga.StepSucceeded {
					t.Fatalf("completed saga with step %s %s", s.Name, s.State)
				}
			}
		case saga.Compensated:
			if m.pivotOK {
				t.Fatalf("compensated after the pivot succeeded")
			}
			for _, s := range next.Steps {
				if s.State != saga.StepCompensated && s.State != saga.StepFailed && s.State != saga.StepPending {
					t.Fatalf("compensated saga with step %s %s (an effect left behind)", s.Name, s.State)
				}
			}
		}
	}
	return d
}

// checkSendBound: at its send bound a saga sends nothing on a timer, and
// the first timer that comes due fails it, flagged, naming the bound.
func (m *model) checkSendBound(prev saga.Instance, ev saga.Event, d saga.Decision) {
	t, def, next := m.t, m.h.def, m.h.in
	t.Helper()
	at := def.MaxSends > 0 && prev.Sends() >= def.MaxSends
	if ev.Kind != saga.EventTimer || !at {
		return
	}
	if len(d.Send) != 0 {
		t.Fatalf("timer sent %d commands at the bound (%d sends of %d)", len(d.Send), prev.Sends(), def.MaxSends)
	}
	w := prev.NextWakeup()
	if prev.State.Terminal() || w == nil || ev.At.Before(*w) {
		return
	}
	if next.State != saga.Failed || !strings.Contains(next.Flag, fmt.Sprintf("max sends %d", def.MaxSends)) || len(d.Journal) != 1 || d.Journal[0].Event != saga.JournalSendBound {
		t.Fatalf("a due timer at the bound left the saga %s, flag %q, journal %+v; want failed, flagged with the bound", next.State, next.Flag, d.Journal)
	}
}

// checkTimeouts: what a timeout may and may not do.
func (m *model) checkTimeouts(prev saga.Instance, ev saga.Event, d saga.Decision) {
	t, def, next := m.t, m.h.def, m.h.in
	t.Helper()
	if len(d.Send) > 1 {
		t.Fatalf("%s event sent %d commands, want at most one", ev.Kind, len(d.Send))
	}
	// A timeout waits for the backoff before it re-sends: a timer that
	// finds the awaited forward unanswered sends no forward at once.
	if ev.Kind == saga.EventTimer && prev.Cursor >= 0 && prev.Steps[prev.Cursor].State == saga.StepRunning {
		for _, o := range d.Send {
			if o.Command.Action == message.Forward {
				t.Fatalf("timer at %s on running step %s sent forward attempt %d at once", ev.At, o.Command.Step, o.Command.Attempt)
			}
		}
	}
	sagaDeadline := ev.Kind == saga.EventTimer && prev.State == saga.Running && prev.DeadlineAt != nil && !ev.At.Before(*prev.DeadlineAt)
	for j := range next.Steps {
		ps, ns, sd := prev.Steps[j], next.Steps[j], &def.Steps[j]
		if d := ns.RetryAnswers - ps.RetryAnswers; d < 0 || d > 1 || (d == 1 && (ev.Kind != saga.EventReply || ev.Reply.Outcome != message.Retry)) {
			t.Fatalf("step %s: retry answers %d -> %d on a %s event", ns.Name, ps.RetryAnswers, ns.RetryAnswers, ev.Kind)
		}
		if def.Pivot >= 0 && j > def.Pivot {
			continue // after the pivot nothing is given up
		}
		// A step's wake-up is never later than its deadline.
		if (ns.State == saga.StepRunning || ns.State == saga.StepRetrying) && ns.DueAt != nil {
			if dl := ns.StartedAt.Add(sd.GiveUpAfter()); ns.DueAt.After(dl) {
				t.Fatalf("step %s %s due at %s, after its deadline %s", ns.Name, ns.State, ns.DueAt, dl)
			}
		}
		// A forward step is never given up before its deadline by
		// timeouts alone: only by its retry answers reaching MaxAttempts,
		// the saga's deadline or an operator. Given up: it leaves running
		// or retrying for neither succeeded nor failed (unknown, or at once
		// compensating), on any event but a definite answer.
		if ps.State != saga.StepRunning && ps.State != saga.StepRetrying {
			continue
		}
		switch ns.State {
		case saga.StepRunning, saga.StepRetrying, saga.StepAccepted, saga.StepSucceeded, saga.StepFailed:
			continue
		}
		switch {
		case ev.Kind == saga.EventReply && ev.Reply.Outcome == message.Success: // its output was rejected
		case ev.Kind == saga.EventOperator && ev.Operator.Action == saga.ActionCompensate:
		case sagaDeadline && (def.Pivot < 0 || j < def.Pivot):
		case ev.Kind == saga.EventReply && ev.Reply.Outcome == message.Retry && ns.RetryAnswers >= sd.Retry.MaxAttempts:
		case !ev.At.Before(ns.StartedAt.Add(sd.GiveUpAfter())):
		default:
			t.Fatalf("step %s given up on a %s event at %s, %s after its first send, before its deadline %s (retry answers %d of %d)",
				ns.Name, ev.Kind, ev.At, ev.At.Sub(*ns.StartedAt), sd.GiveUpAfter(), ns.RetryAnswers, sd.Retry.MaxAttempts)
		}
	}
}

// step performs one event chosen by c.
func (m *model) step(c *choices) {
	h := m.h
	h.tick(time.Duration(c.next()%4) * time.Second)
	switch c.next() % 12 {
	case 0, 1, 2: // answer the awaited command
		if cmd, ok := m.outstanding(); ok {
			m.apply(h.replyEv(m.answer(cmd, c.next())))
		}
	case 3: // answer any command sent so far (stale, duplicate, other attempts)
		if len(h.sent) > 0 {
			cmd := h.sent[c.next()%len(h.sent)]
			m.apply(h.replyEv(m.answer(cmd, c.next())))
		}
	case 4: // redeliver a reply already delivered
		if len(m.replies) > 0 {
			m.apply(h.replyEv(m.replies[c.next()%len(m.replies)]))
		}
	case 5: // produce an answer now, deliver it later
		if cmd, ok := m.outstanding(); ok {
			m.held = append(m.held, m.answer(cmd, c.next()))
		}
	case 6: // deliver a held answer, out of order
		if len(m.held) > 0 {
			k := c.next() % len(m.held)
			r := m.held[k]
			m.held = append(m.held[:k], m.held[k+1:]...)
			m.apply(h.replyEv(r))
		}
	case 7: // a stray reply: never sent, or naming another step
		if len(h.sent) > 0 {
			r := m.answer(h.sent[c.next()%len(h.sent)], c.next())
			if c.next()%2 == 0 {
				r.InReplyTo = uuid.NewSHA1(uuid.NameSpaceOID, []byte(fmt.Sprint("stray", c.i)))
			} else {
				r.Step = h.def.Steps[c.next()%len(h.def.Steps)].Name
			}
			if c.next()%2 == 0 {
				r.Action = message.Compensate
			}
			m.apply(h.replyEv(r))
		}
	case 8, 9: // a timer
		switch c.next() % 5 {
		case 4: // far ahead: past an accepted deadline
			h.tick(saga.AcceptedDeadlineDefault)
		case 0, 1:
			if w := h.in.NextWakeup(); w != nil && w.After(h.now) {
				h.now = *w
			}
		case 2:
			h.tick(time.Duration(c.next()) * 100 * time.Millisecond)
		case 3:
			h.tick(time.Duration(c.next()) * time.Second)
		}
		m.apply(saga.Event{Kind: saga.EventTimer, At: h.now})
	case 10: // an operator
		op := &saga.Operator{
			Action:  []saga.OperatorAction{saga.ActionRetry, saga.ActionCompensate, saga.ActionResolve}[c.next()%3],
			Actor:   "ops",
			Reason:  "fuzz",
			Outcome: []saga.State{saga.Completed, saga.Compensated, saga.Failed}[c.next()%3],
		}
		switch c.next() % 8 {
		case 0:
			op.Actor = ""
		case 1:
			op.Reason = ""
		}
		m.apply(saga.Event{Kind: saga.EventOperator, At: h.now, Operator: op})
	case 11: // a second start
		m.apply(saga.Event{Kind: saga.EventStart, At: h.now})
	}
}

// The fuzz target's definitions are built once; Decide never mutates them.
var (
	fuzzPivotDef   = buildOrPanic(pivotDefinition())
	fuzzNoPivotDef = buildOrPanic(noPivotDefinition())
	// Small send bounds, so that the fuzzer reaches them.
	fuzzBoundDefs = []*saga.Def{buildOrPanic(withMaxSends(pivotDefinition(), 9)), buildOrPanic(withMaxSends(noPivotDefinition(), 5))}
)

func withMaxSends(d saga.Definition[item], n int) saga.Definition[item] {
	d.MaxSends = n
	return d
}

func buildOrPanic(d saga.Definition[item]) *saga.Def {
	def, err := d.Build()
	if err != nil {
		panic(fmt.Sprintf("test definition %s: %v", d.Name, err))
	}
	return def
}

func FuzzDecide(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})                // all success
	f.Add([]byte{1, 0, 1, 1, 0, 1, 0, 0, 2, 0, 1})                            // a failure: compensate
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 8, 0, 0, 0, 8, 0, 0, 0, 8, 0, 0, 0, 8}) // timeouts
	f.Add([]byte{0, 0, 2, 0, 8, 0, 0, 0, 2, 0, 8, 0, 0, 10, 0, 0, 2, 0, 4, 0, 3, 3, 1})
	f.Add([]byte{0, 5, 1, 0, 0, 0, 0, 6, 0, 0, 4, 0, 0, 7, 0, 0, 1, 0, 7, 1, 1, 1, 1, 10, 1, 1, 3})
	f.Add([]byte{0, 0, 0, 0, 0, 3, 0, 8, 4, 0, 0, 0, 0, 0, 4, 0, 8, 4, 0, 0, 0}) // accepted, its deadline; accepted cancellable
	f.Add([]byte("a mixture of everything: replies, stale, timers, operators \x08\x09\x0a\x0b"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 4096 {
			data = data[:4096]
		}
		id := uuid.NewSHA1(uuid.NameSpaceOID, data)
		for _, def := range append([]*saga.Def{fuzzPivotDef, fuzzNoPivotDef}, fuzzBoundDefs...) {
			m := newModel(t, def, id)
			m.apply(saga.Event{Kind: saga.EventStart, At: m.h.now})
			c := &choices{b: data}
			for n := 0; c.more() && n < 1000; n++ {
				m.step(c)
			}
		}
	})
}

// TestEventuallyTerminal: when every command eventually gets an answer
// (success more likely than failure or retry) or its timer fires, every
// saga ends in a terminal state within a bounded number of events.
func TestEventuallyTerminal(t *testing.T) {
	t.Parallel()
	defs := map[string]*saga.Def{
		"pivot":          pivotDef(t),
		"no-pivot":       noPivotDef(t),
		"pivot-deadline": withDeadline(15 * time.Second)(t),
	}
	const seeds, maxEvents = 300, 500
	for name, def := range defs {
		ends := map[saga.State]int{}
		for seed := uint64(1); seed <= seeds; seed++ {
			rng := rand.New(rand.NewPCG(seed, 0x5a6a))
			m := newModel(t, def, uuid.NewSHA1(uuid.NameSpaceOID, []byte(fmt.Sprint(name, seed))))
			h := m.h
			m.apply(saga.Event{Kind: saga.EventStart, At: h.now})
			n := 0
			for ; n < maxEvents && !h.in.State.Terminal(); n++ {
				cmd, ok := m.outstanding()
				if ok && rng.Float64() < 0.8 {
					h.tick(time.Duration(rng.IntN(3000)) * time.Millisecond)
					var k int // success, failure, retry, accepted, accepted and cancellable
					switch r := rng.Float64(); {
					case r < 0.6:
						k = 0
					case r < 0.72:
						k = 1
					case r < 0.9:
						k = 2
					default:
						k = 3 + rng.IntN(2)
					}
					m.apply(h.replyEv(m.answer(cmd, k)))
					continue
				}
				h.fireEv()
				m.apply(saga.Event{Kind: saga.EventTimer, At: h.now})
			}
			if !h.in.State.Terminal() {
				t.Fatalf("%s seed %d: still %s (step %s %s) after %d events", name, seed, h.in.State, h.in.CurrentStep(), h.in.Steps[h.in.Cursor].State, n)
			}
			ends[h.in.State]++
			if h.in.State == saga.Failed {
				failedOK := false
				for i, s := range h.in.Steps {
					if (def.Pivot >= 0 && i > def.Pivot && s.State == saga.StepFailed) || (i == def.Pivot && s.State == saga.StepUnknown) {
						failedOK = true
					}
				}
				if !failedOK {
					t.Fatalf("%s seed %d: failed without a post-pivot failure or an unknown pivot: %s", name, seed, h.stepStates())
				}
			}
		}
		// The random walk must reach more than one ending, or it tests little.
		if ends[saga.Completed] == 0 || ends[saga.Compensated] == 0 {
			t.Fatalf("%s: endings %v: want both completed and compensated sagas", name, ends)
		}
		if def.Pivot < 0 && ends[saga.Failed] != 0 {
			t.Fatalf("%s: a saga without pivot failed %d times; it should always compensate", name, ends[saga.Failed])
		}
	}
}
