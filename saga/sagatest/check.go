package sagatest

import (
	"encoding/json"
	"fmt"
	"reflect"
	"time"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/saga"
)

// CheckDecision fails t unless decision d, which [saga.Decide] returned for
// def, instance prev and event ev, keeps the promises every decision makes
// whatever the event:
//
//   - a decision that changed the saga bumps its version by one, stamps it
//     with the event time and journals why; one that did not leaves the
//     instance exactly as it was and sends nothing;
//   - journal entries carry the saga id, the event time and the states
//     before and after, and are marked ignored exactly when nothing changed
//     (late and illegal events change nothing);
//   - at most one command is sent per decision, to the step's participant,
//     under the id [saga.Instance.CommandID] derives for it, with a JSON
//     payload, and the step then awaits that command;
//   - a forward command is sent only when every earlier step succeeded and
//     never while compensating; a compensation only for a step before the
//     pivot, never once the pivot succeeded, and in reverse order (no later
//     step is left succeeded or unknown);
//   - the saga never compensates after its pivot succeeded;
//   - a terminal saga absorbs every event but an operator resolve of a
//     failed one, and only a terminal saga has no wake-up; only the active
//     step has a due time;
//   - a timer at or after the saga's wake-up moves it (or the timer loop
//     would spin);
//   - only a reply to the latest send of its step's action (the awaited
//     attempt, compensation or query) moves the saga;
//   - a completed saga has every step succeeded and a compensated one
//     leaves no effect behind (steps compensated, failed or never run),
//     unless an operator resolved it so.
//
// [Harness] calls it after every event; call it yourself when you drive
// [saga.Decide] directly.
func CheckDecision(t TB, def *saga.Def, prev saga.Instance, ev saga.Event, d saga.Decision) {
	t.Helper()
	next := d.Next
	bad := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("sagatest: %s saga %s, %s: %s", def.Name, prev.ID, describeEvent(ev), fmt.Sprintf(format, args...))
	}
	op := saga.OperatorAction("")
	if ev.Kind == saga.EventOperator && ev.Operator != nil {
		op = ev.Operator.Action
	}
	// resolve settles a failed saga; a query re-opens a failed saga to
	// settle its given-up step; a check of a finished saga sends queries
	// and changes nothing else.
	// A retry re-opens a failed saga its send bound stopped; a resume
	// runs a failed saga forward again from a chosen step.
	resolve := op == saga.ActionResolve || ((op == saga.ActionQuery || op == saga.ActionRetry || op == saga.ActionResume) && prev.State == saga.Failed)
	check := op == saga.ActionCheck
	if d.Changed {
		if next.Version != prev.Version+1 {
			bad("the saga changed but its version went %d -> %d, want +1", prev.Version, next.Version)
		}
		if !next.UpdatedAt.Equal(ev.At) {
			bad("the saga changed but UpdatedAt is %s, want the event time %s", stamp(next.UpdatedAt), stamp(ev.At))
		}
		if len(d.Journal) == 0 {
			bad("the saga changed (%s -> %s) without a journal entry", prev.State, next.State)
		}
	} else {
		if !reflect.DeepEqual(next, prev) {
			bad("nothing changed, yet the instance differs:\nbefore %+v\nafter  %+v", prev, next)
		}
		if len(d.Send) != 0 {
			bad("nothing changed, yet %d commands are sent", len(d.Send))
		}
	}
	for _, j := range d.Journal {
		if j.Ignored == d.Changed {
			bad("journal entry %q (step %q) has ignored=%v but the decision changed=%v", j.Event, j.Step, j.Ignored, d.Changed)
		}
		if j.SagaID != prev.ID || !j.At.Equal(ev.At) || j.From != prev.State || j.To != next.State {
			bad("journal entry %q (step %q) is for saga %s at %s, %s -> %s; want saga %s at %s, %s -> %s",
				j.Event, j.Step, j.SagaID, stamp(j.At), j.From, j.To, prev.ID, stamp(ev.At), prev.State, next.State)
		}
	}
	if (d.Late || d.Illegal) && d.Changed {
		bad("the event is late=%v illegal=%v but changed the saga", d.Late, d.Illegal)
	}
	if r := ev.Reply; ev.Kind == saga.EventReply && r != nil && d.Changed {
		if i, ok := def.StepIndex(r.Step); ok && i < len(prev.Steps) {
			st := prev.Steps[i]
			n := st.Attempts
			switch r.Action {
			case message.Compensate:
				n = st.CompAttempts
			case message.Query:
				n = st.QueryAttempts
			}
			if r.InReplyTo != prev.CommandID(r.Step, r.Action, n) {
				bad("a reply to an earlier %s send of step %q (the latest is attempt %d) moved the saga: only the awaited send is answered", r.Action, r.Step, n)
			}
		}
	}
	if check && d.Changed && next.State != prev.State {
		bad("a check moved the saga %s -> %s; it only sends queries", prev.State, next.State)
	}
	if prev.State.Terminal() && d.Changed && !(resolve && prev.State == saga.Failed) && !check {
		bad("the saga was %s (terminal) and moved to %s: a terminal saga absorbs every event but an operator resolve of a failed one", prev.State, next.State)
	}
	if ev.Kind == saga.EventTimer && len(d.Send) > 0 && def.MaxSends > 0 && prev.Sends() >= def.MaxSends {
		bad("a timer sent a %s command for step %q although the saga had sent %d commands, its bound %d", d.Send[0].Command.Action, d.Send[0].Command.Step, prev.Sends(), def.MaxSends)
	}
	if len(d.Send) > 1 && !check {
		bad("%d commands sent by one decision, want at most one", len(d.Send))
	}
	if next.Cursor >= 0 {
		if term, wake := next.State.Terminal(), next.NextWakeup(); term != (wake == nil) {
			bad("the saga is %s with wake-up %v: want a wake-up exactly while it is not terminal", next.State, wake)
		}
	}
	for i, s := range next.Steps {
		if s.DueAt != nil && (next.State.Terminal() || i != next.Cursor) {
			bad("step %q (%s) has a due time but the saga is %s at step %d", s.Name, s.State, next.State, next.Cursor)
		}
	}
	if w := prev.NextWakeup(); ev.Kind == saga.EventTimer && w != nil && !ev.At.Before(*w) && !d.Changed {
		bad("a timer at or after the wake-up %s changed nothing (step %q)", stamp(*w), prev.CurrentStep())
	}
	pivotDone := def.Pivot >= 0 && def.Pivot < len(prev.Steps) && prev.Steps[def.Pivot].State == saga.StepSucceeded
	if pivotDone && d.Changed && !resolve && (next.State == saga.Compensating || next.State == saga.Compensated) {
		bad("the saga is %s after its pivot %q succeeded: past the point of no return it only goes forward", next.State, def.Steps[def.Pivot].Name)
	}
	for _, o := range d.Send {
		c := o.Command
		i, ok := def.StepIndex(c.Step)
		if !ok {
			bad("a command for step %q, which the definition does not have", c.Step)
			return
		}
		if o.Participant != def.Steps[i].Participant {
			bad("the %s command for step %q goes to %q, want its participant %q", c.Action, c.Step, o.Participant, def.Steps[i].Participant)
		}
		if want := prev.CommandID(c.Step, c.Action, c.Attempt); c.MessageID != want {
			bad("the %s command for step %q attempt %d has id %s, want CommandID %s", c.Action, c.Step, c.Attempt, c.MessageID, want)
		}
		if c.SagaID != prev.ID || c.SagaType != def.Name || c.AggregateID != prev.AggregateID || !c.SentAt.Equal(ev.At) {
			bad("the %s command for step %q carries saga %s type %q aggregate %q sent at %s; want the saga's ids and the event time",
				c.Action, c.Step, c.SagaID, c.SagaType, c.AggregateID, stamp(c.SentAt))
		}
		if len(c.Payload) > 0 && !json.Valid(c.Payload) || len(c.Payload) == 0 && c.Action != message.Query {
			bad("the %s command for step %q has a payload that is not JSON: %.80q", c.Action, c.Step, c.Payload)
		}
		if check && c.Action != message.Query {
			bad("a check sent a %s command for step %q; it sends queries only", c.Action, c.Step)
		}
		if next.Steps[i].AwaitID != c.MessageID && !check {
			bad("step %q awaits %s, but command %s was just sent for it", c.Step, next.Steps[i].AwaitID, c.MessageID)
		}
		switch c.Action {
		case message.Forward:
			if prev.State == saga.Compensating || next.State != saga.Running {
				bad("a forward command for step %q while the saga goes %s -> %s", c.Step, prev.State, next.State)
			}
			for j := 0; j < i; j++ {
				if next.Steps[j].State != saga.StepSucceeded {
					bad("a forward command for step %q while the earlier step %q is %s", c.Step, next.Steps[j].Name, next.Steps[j].State)
				}
			}
		case message.Compensate:
			if def.Pivot >= 0 && i >= def.Pivot {
				bad("a compensation for step %q, at or after the pivot %q", c.Step, def.Steps[def.Pivot].Name)
			}
			if pivotDone {
				bad("a compensation for step %q after the pivot %q succeeded", c.Step, def.Steps[def.Pivot].Name)
			}
			for j := i + 1; j < len(next.Steps); j++ {
				if st := next.Steps[j].State; st == saga.StepSucceeded || st == saga.StepUnknown {
					bad("a compensation for step %q while the later step %q is %s: compensations run in reverse order", c.Step, next.Steps[j].Name, st)
				}
			}
		}
	}
	if d.Changed && !resolve {
		switch next.State {
		case saga.Completed:
			for _, s := range next.Steps {
				if s.State != saga.StepSucceeded {
					bad("the saga completed with step %q %s", s.Name, s.State)
				}
			}
		case saga.Compensated:
			for _, s := range next.Steps {
				if s.State != saga.StepCompensated && s.State != saga.StepFailed && s.State != saga.StepPending {
					bad("the saga is compensated with step %q %s (an effect left behind)", s.Name, s.State)
				}
			}
		}
	}
}

// describeEvent names an event for a failure message.
func describeEvent(ev saga.Event) string {
	switch ev.Kind {
	case saga.EventReply:
		if r := ev.Reply; r != nil {
			return fmt.Sprintf("reply %s to step %q %s at %s", r.Outcome, r.Step, r.Action, stamp(ev.At))
		}
	case saga.EventOperator:
		if op := ev.Operator; op != nil {
			return fmt.Sprintf("operator %s at %s", op.Action, stamp(ev.At))
		}
	}
	return fmt.Sprintf("%s event at %s", ev.Kind, stamp(ev.At))
}

func stamp(t time.Time) string { return t.Format(time.RFC3339Nano) }
