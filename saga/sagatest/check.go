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
//   - at most one command is sent per decision, but one per member of a
//     parallel group (entered together, or timers due together), each to the step's
//     participant, under the id [saga.Instance.CommandID] derives for it,
//     with a JSON payload, and the step then awaits that command;
//   - a forward command is sent only when every step of the earlier units
//     succeeded or was skipped, and while compensating only to settle a
//     step already in flight (a re-send); a compensation only for a step
//     before the pivot, never once the pivot succeeded, never while a step
//     is still in flight, and in reverse order of completion (no step of a
//     later unit, nor a member of its group that completed later, is left
//     succeeded or unknown);
//   - a skipped step is never sent; a wait step is never sent;
//   - the saga never compensates after its pivot succeeded;
//   - a terminal saga absorbs every event but an operator resolve of a
//     failed one, and only a terminal saga (or one waiting for an event
//     without a deadline) has no wake-up; only steps that await something
//     (in flight, compensating, waiting) have a due time;
//   - a timer at or after the saga's wake-up moves it (or the timer loop
//     would spin);
//   - only a reply to the latest send of its step's action (the awaited
//     attempt, compensation or query) moves the saga;
//   - a completed saga has every step succeeded or skipped and a
//     compensated one leaves no effect behind (steps compensated, failed,
//     skipped or never run; waits), unless an operator resolved it so.
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
		unit, steps := -1, map[string]bool{}
		for _, o := range d.Send {
			i, ok := def.StepIndex(o.Command.Step)
			if !ok || steps[o.Command.Step] || (unit >= 0 && def.Steps[i].Unit != unit) || def.Steps[i].Group == "" {
				bad("%d commands sent by one decision (%s %s #%d among them): want at most one, or one per member of a parallel group", len(d.Send), o.Command.Step, o.Command.Action, o.Command.Attempt)
			}
			unit, steps[o.Command.Step] = def.Steps[i].Unit, true
		}
	}
	waiting := false
	for _, s := range next.Steps {
		waiting = waiting || (s.State == saga.StepWaiting && s.DueAt == nil)
	}
	if next.Cursor >= 0 {
		if term, wake := next.State.Terminal(), next.NextWakeup(); (term && wake != nil) || (!term && wake == nil && !waiting) {
			bad("the saga is %s with wake-up %v: want a wake-up exactly while it is not terminal (or waits without deadline)", next.State, wake)
		}
	}
	for _, s := range next.Steps {
		active := s.State == saga.StepRunning || s.State == saga.StepRetrying || s.State == saga.StepQuerying || s.State == saga.StepAccepted ||
			s.State == saga.StepCompensating || s.State == saga.StepCompRetrying || s.State == saga.StepWaiting
		if s.DueAt != nil && (next.State.Terminal() || !active) {
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
			if def.Steps[i].Kind == saga.Wait || prev.Steps[i].State == saga.StepSkipped {
				bad("a forward command for step %q, a %s step %s", c.Step, def.Steps[i].Kind, prev.Steps[i].State)
			}
			settling := c.Attempt > 1 && (prev.Steps[i].State == saga.StepRetrying || prev.Steps[i].State == saga.StepRunning || prev.Steps[i].State == saga.StepAccepted)
			if (prev.State == saga.Compensating || next.State != saga.Running) && !(settling && next.State == saga.Compensating) {
				bad("a forward command for step %q while the saga goes %s -> %s", c.Step, prev.State, next.State)
			}
			for j := 0; j < def.Units[def.Steps[i].Unit].Start; j++ {
				if st := next.Steps[j].State; st != saga.StepSucceeded && st != saga.StepSkipped {
					bad("a forward command for step %q while the earlier step %q is %s", c.Step, next.Steps[j].Name, st)
				}
			}
		case message.Compensate:
			if def.Pivot >= 0 && i >= def.Pivot {
				bad("a compensation for step %q, at or after the pivot %q", c.Step, def.Steps[def.Pivot].Name)
			}
			if pivotDone {
				bad("a compensation for step %q after the pivot %q succeeded", c.Step, def.Steps[def.Pivot].Name)
			}
			for j := range next.Steps {
				st := next.Steps[j].State
				if st == saga.StepRunning || st == saga.StepRetrying || st == saga.StepQuerying || st == saga.StepAccepted {
					bad("a compensation for step %q while step %q is still in flight (%s): in-flight steps settle first", c.Step, next.Steps[j].Name, st)
				}
				if def.Steps[j].Kind == saga.Wait || (st != saga.StepSucceeded && st != saga.StepUnknown) {
					continue
				}
				later := def.Steps[j].Unit > def.Steps[i].Unit ||
					(def.Steps[j].Unit == def.Steps[i].Unit && st == saga.StepSucceeded && next.Steps[i].Seq > 0 && next.Steps[j].Seq > next.Steps[i].Seq)
				if later {
					bad("a compensation for step %q while the later step %q is %s: compensations run in reverse order of completion", c.Step, next.Steps[j].Name, st)
				}
			}
		}
	}
	if d.Changed && !resolve {
		switch next.State {
		case saga.Completed:
			for _, s := range next.Steps {
				if s.State != saga.StepSucceeded && s.State != saga.StepSkipped {
					bad("the saga completed with step %q %s", s.Name, s.State)
				}
			}
		case saga.Compensated:
			for i, s := range next.Steps {
				if def.Steps[i].Kind == saga.Wait {
					continue
				}
				if s.State != saga.StepCompensated && s.State != saga.StepFailed && s.State != saga.StepPending && s.State != saga.StepSkipped {
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
	case saga.EventExternal:
		if x := ev.External; x != nil {
			return fmt.Sprintf("event %q id %q at %s", x.Name, x.ID, stamp(ev.At))
		}
	case saga.EventCancel:
		if c := ev.Cancel; c != nil {
			return fmt.Sprintf("cancel by %q at %s", c.Actor, stamp(ev.At))
		}
	}
	return fmt.Sprintf("%s event at %s", ev.Kind, stamp(ev.At))
}

func stamp(t time.Time) string { return t.Format(time.RFC3339Nano) }
