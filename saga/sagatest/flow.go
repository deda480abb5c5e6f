package sagatest

import (
	"errors"

	"sort"
	"strings"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/saga"
)

// AwaitedBy returns the command step awaits an answer to now: the latest
// send of its forward, compensation or query while it is in flight,
// compensating or querying. With a parallel group several steps await
// answers at once; [Harness.Awaited] returns the active step's only.
func (h *Harness) AwaitedBy(step string) (message.Command, bool) {
	h.t.Helper()
	i := h.index(step)
	s := h.in.Steps[i]
	switch s.State {
	case saga.StepRunning, saga.StepRetrying, saga.StepQuerying, saga.StepAccepted, saga.StepCompensating, saga.StepCompRetrying:
	default:
		return message.Command{}, false
	}
	if h.in.State.Terminal() {
		return message.Command{}, false
	}
	for k := len(h.sent) - 1; k >= 0; k-- {
		if h.sent[k].MessageID == s.AwaitID {
			return h.sent[k], true
		}
	}
	return message.Command{}, false
}

// Answer answers the command step awaits (see [Harness.AwaitedBy]) with a:
// the way to answer the members of a parallel group in any order.
func (h *Harness) Answer(step string, a Answer) saga.Decision {
	h.t.Helper()
	c, ok := h.AwaitedBy(step)
	if !ok {
		h.fatalf("Answer(%q): the step is %s and awaits no answer", step, h.in.Steps[h.index(step)].State)
	}
	return h.Reply(c, a)
}

// ExpectTogether asserts that the next commands sent and not yet expected
// are one action command for each of steps (in any order), all sent by
// one decision (a parallel group's members: every command in the same
// transaction, before any reply is applied), and returns them in the
// order of steps.
func (h *Harness) ExpectTogether(action message.Action, steps ...string) []message.Command {
	h.t.Helper()
	for _, s := range steps {
		h.index(s)
	}
	if len(h.queue) < len(steps) {
		h.fatalf("ExpectTogether: want %s commands for %s, but only %d were sent since the last expected: %s", action, strings.Join(steps, ", "), len(h.queue), commands(h.queue))
	}
	got := h.queue[:len(steps)]
	byStep := map[string]message.Command{}
	for _, c := range got {
		if c.Action != action {
			h.fatalf("ExpectTogether: want %s commands for %s, got %s", action, strings.Join(steps, ", "), commands(got))
		}
		byStep[c.Step] = c
	}
	out := make([]message.Command, len(steps))
	for k, s := range steps {
		c, ok := byStep[s]
		if !ok {
			h.fatalf("ExpectTogether: want %s commands for %s, got %s", action, strings.Join(steps, ", "), commands(got))
		}
		out[k] = c
	}
	first := h.sentIn[got[0].MessageID]
	for _, c := range got[1:] {
		if h.sentIn[c.MessageID] != first {
			h.fatalf("ExpectTogether: %s was sent by decision %d and %s by decision %d: want one decision", got[0].Step, first, c.Step, h.sentIn[c.MessageID])
		}
	}
	h.queue = h.queue[len(steps):]
	return out
}

// SendEvent sends the external event name with id and data (a value
// encoded to JSON, JSON itself, or nil for {}) now, as Engine.SendEvent
// does. The event's refusal (a *saga.EventError: unknown name, finished
// saga, not awaited, malformed) is returned and changes nothing; a
// duplicate id returns a decision with Duplicate set.
func (h *Harness) SendEvent(name, id string, data any) (saga.Decision, error) {
	h.t.Helper()
	b, err := encode(data)
	if err != nil {
		h.fatalf("SendEvent(%q): data: %v", name, err)
	}
	d, err := h.Deliver(saga.Event{Kind: saga.EventExternal, At: h.now, External: &saga.External{Name: name, ID: id, Data: b}})
	var ee *saga.EventError
	if err != nil && !errors.As(err, &ee) {
		h.fatalf("event %q: %v", name, err)
	}
	return d, err
}

// Cancel cancels the saga now as its client would (actor "sagatest" when
// empty). A refused cancel (from the pivot on, or a finished saga) returns
// its *saga.RefusedError and changes nothing.
func (h *Harness) Cancel(actor, reason string) (saga.Decision, error) {
	h.t.Helper()
	if actor == "" {
		actor = "sagatest"
	}
	if reason == "" {
		reason = "test"
	}
	d, err := h.Deliver(saga.Event{Kind: saga.EventCancel, At: h.now, Cancel: &saga.Cancel{Actor: actor, Reason: reason}})
	if err != nil && !errors.Is(err, saga.ErrRefused) {
		h.fatalf("cancel: %v", err)
	}
	return d, err
}

// ExpectStepState asserts the state of each named step.
func (h *Harness) ExpectStepState(want saga.StepStatus, steps ...string) {
	h.t.Helper()
	for _, s := range steps {
		if got := h.in.Steps[h.index(s)].State; got != want {
			h.fatalf("step %q is %s, want %s", s, got, want)
		}
	}
}

// CompletionOrder lists the steps that succeeded, in the order they did
// (saga.StepState.Seq): what compensation reverses.
func (h *Harness) CompletionOrder() []string {
	type done struct {
		name string
		seq  int
	}
	var ds []done
	for _, s := range h.in.Steps {
		if s.Seq > 0 {
			ds = append(ds, done{s.Name, s.Seq})
		}
	}
	sort.Slice(ds, func(a, b int) bool { return ds[a].seq < ds[b].seq })
	out := make([]string, len(ds))
	for k, d := range ds {
		out[k] = d.name
	}
	return out
}
