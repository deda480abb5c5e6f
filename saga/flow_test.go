package saga_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/saga/sagatest"
)

// flowData is the data of the flow definition below: which conditional
// steps run, and what the members returned (Log keeps their merge order).
type flowData struct {
	WithC    bool     `json:"with_c"`
	Approval bool     `json:"approval"`
	Log      []string `json:"log,omitempty"`
	Approved bool     `json:"approved,omitempty"`
}

func logOutput(d *flowData, out json.RawMessage) error {
	if len(out) == 0 || string(out) == "null" {
		return nil
	}
	var s string
	if err := json.Unmarshal(out, &s); err != nil {
		return err
	}
	d.Log = append(d.Log, s)
	return nil
}

// flowDefinition: group g1 (a, b, c when WithC; compensable), wait w for
// event "ok" (when Approval, 1 m deadline), pivot p, group g2 (x, y;
// retryable).
func flowDefinition() saga.Definition[flowData] {
	cmd := func(flowData) (any, error) { return map[string]int{}, nil }
	member := func(name string) saga.Step[flowData] {
		return saga.Step[flowData]{Name: name, Participant: "part-" + name, Kind: saga.Compensable, Command: cmd, Compensation: cmd,
			OnSuccess: logOutput, Timeout: time.Second, Retry: saga.RetryPolicy{MaxAttempts: 3}}
	}
	c := member("c")
	c.When = func(d flowData) bool { return d.WithC }
	after := func(name string) saga.Step[flowData] {
		return saga.Step[flowData]{Name: name, Participant: "part-" + name, Kind: saga.Retryable, Command: cmd, OnSuccess: logOutput, Timeout: time.Second}
	}
	return saga.Definition[flowData]{
		Name: "flow",
		Steps: slices.Concat(
			saga.Parallel("g1", nil, member("a"), member("b"), c),
			[]saga.Step[flowData]{
				{Name: "w", Kind: saga.Wait, Event: "ok", Deadline: time.Minute,
					When: func(d flowData) bool { return d.Approval },
					OnEvent: func(d *flowData, ev json.RawMessage) error {
						var a struct{ Approved bool }
						if err := json.Unmarshal(ev, &a); err != nil {
							return err
						}
						if !a.Approved {
							return errors.New("refused")
						}
						d.Approved = true
						return nil
					}},
				{Name: "p", Participant: "part-p", Kind: saga.Pivot, Command: cmd, OnSuccess: logOutput, Timeout: time.Second},
			},
			saga.Parallel("g2", nil, after("x"), after("y")),
		),
	}
}

func flowDef(t testing.TB) *saga.Def {
	t.Helper()
	d, err := flowDefinition().Build()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestBuildGroupAndWaitRules(t *testing.T) {
	cmd := func(flowData) (any, error) { return map[string]int{}, nil }
	comp := func(name, group string) saga.Step[flowData] {
		return saga.Step[flowData]{Name: name, Participant: "p", Kind: saga.Compensable, Command: cmd, Compensation: cmd, Group: group}
	}
	pivot := saga.Step[flowData]{Name: "pv", Participant: "p", Kind: saga.Pivot, Command: cmd}
	retry := func(name, group string) saga.Step[flowData] {
		return saga.Step[flowData]{Name: name, Participant: "p", Kind: saga.Retryable, Command: cmd, Group: group}
	}
	wait := saga.Step[flowData]{Name: "w", Kind: saga.Wait, Event: "ev"}
	rows := []struct {
		name  string
		steps []saga.Step[flowData]
		want  string
	}{
		{"pivot in group", []saga.Step[flowData]{comp("a", "g"), func() saga.Step[flowData] { p := pivot; p.Group = "g"; return p }()}, `group "g", step "pv": is the pivot`},
		{"mixed kinds", []saga.Step[flowData]{comp("a", ""), pivot, retry("x", "g"), func() saga.Step[flowData] { s := comp("b", "g"); return s }()}, `step "b": is compensable but runs after the pivot`},
		{"group across pivot", []saga.Step[flowData]{comp("a", "g"), pivot, retry("x", "g")}, `group "g", step "x": members must be consecutive`},
		{"not consecutive", []saga.Step[flowData]{comp("a", "g"), comp("b", ""), comp("c", "g"), pivot}, `group "g", step "c": members must be consecutive`},
		{"bad group name", []saga.Step[flowData]{comp("a", "G!"), pivot}, `group "G!", step "a": group name must be`},
		{"wait in group", []saga.Step[flowData]{comp("a", "g"), func() saga.Step[flowData] { w := wait; w.Group = "g"; return w }(), pivot}, `step "w": is a wait and cannot be in the parallel group "g"`},
		{"wait without event", []saga.Step[flowData]{comp("a", ""), {Name: "w", Kind: saga.Wait}, pivot}, `step "w": is a wait: its Event "" must be`},
		{"wait with participant", []saga.Step[flowData]{{Name: "w", Kind: saga.Wait, Event: "ev", Participant: "p"}, pivot}, `must not name a participant`},
		{"wait with command", []saga.Step[flowData]{{Name: "w", Kind: saga.Wait, Event: "ev", Command: cmd}, pivot}, `must not have a Command`},
		{"wait bad on-deadline", []saga.Step[flowData]{{Name: "w", Kind: saga.Wait, Event: "ev", OnDeadline: "explode"}, pivot}, `on-deadline "explode" must be compensate or fail`},
		{"wait after pivot compensating", []saga.Step[flowData]{pivot, {Name: "w", Kind: saga.Wait, Event: "ev", OnDeadline: saga.WaitCompensate}}, `past the point of no return its deadline cannot compensate`},
		{"event on command step", []saga.Step[flowData]{func() saga.Step[flowData] { s := comp("a", ""); s.Event = "ev"; return s }(), pivot}, `are for wait steps only`},
		{"pivot with condition", []saga.Step[flowData]{func() saga.Step[flowData] { p := pivot; p.When = func(flowData) bool { return true }; return p }()}, `pivot and cannot have a When`},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			_, err := saga.Definition[flowData]{Name: "bad", Steps: row.steps}.Build()
			var de *saga.DefinitionError
			if !errors.As(err, &de) || !errors.Is(err, saga.ErrInvalidDefinition) || !strings.Contains(err.Error(), row.want) || !strings.Contains(err.Error(), `saga definition "bad"`) {
				t.Fatalf("error %v, want a DefinitionError naming the saga and %q", err, row.want)
			}
		})
	}
	ok := []saga.Step[flowData]{comp("a", "g"), comp("b", "g"), wait, pivot, retry("x", "h"), retry("y", "h"), {Name: "w2", Kind: saga.Wait, Event: "ev2"}}
	d, err := saga.Definition[flowData]{Name: "good", Steps: ok}.Build()
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Units) != 5 || d.Units[0] != (saga.Unit{Group: "g", Start: 0, End: 2}) || d.Units[3] != (saga.Unit{Group: "h", Start: 4, End: 6}) {
		t.Fatalf("units %+v", d.Units)
	}
	if w := d.Steps[6]; w.OnDeadline != saga.WaitFail {
		t.Fatalf("a wait after the pivot defaults to on-deadline %q, want fail", w.OnDeadline)
	}
	if !d.Waits("ev") || d.Waits("nope") {
		t.Fatal("Waits")
	}
}

// Transition table rows of groups, conditions, waits and cancel.
func TestDecideFlowTable(t *testing.T) {
	def := flowDef(t)
	start := func(t *testing.T, d flowData) *sagatest.Harness {
		h := sagatest.New(t, def, sagatest.Data(d))
		h.Start()
		return h
	}
	t.Run("group sent in one decision, condition skips", func(t *testing.T) {
		h := start(t, flowData{})
		h.ExpectTogether(sagatest.Forward, "a", "b")
		h.ExpectStepState(saga.StepSkipped, "c")
		h.ExpectStepState(saga.StepPending, "w")
		h.Answer("b", sagatest.Succeeded(nil))
		h.Answer("a", sagatest.Succeeded(nil))
		h.ExpectStepState(saga.StepSkipped, "w")
		h.Expect("p", sagatest.Forward)
	})
	t.Run("a retry answer of one member does not move the others", func(t *testing.T) {
		h := start(t, flowData{WithC: true})
		h.ExpectTogether(sagatest.Forward, "a", "b", "c")
		h.Answer("b", sagatest.RetryLater("busy"))
		h.ExpectStepState(saga.StepRetrying, "b")
		h.ExpectStepState(saga.StepRunning, "a", "c")
		h.Answer("a", sagatest.Succeeded(json.RawMessage(`"a"`)))
		h.Answer("c", sagatest.Succeeded(json.RawMessage(`"c"`)))
		h.FireNextTimer()
		h.Expect("b", sagatest.Forward)
		h.Answer("b", sagatest.Succeeded(json.RawMessage(`"b"`)))
		h.Expect("p", sagatest.Forward)
		var d flowData
		h.DecodeData(&d)
		if !slices.Equal(d.Log, []string{"a", "b", "c"}) {
			t.Fatalf("merge order %v, want definition order", d.Log)
		}
	})
	t.Run("the current step is a member still out", func(t *testing.T) {
		h := start(t, flowData{WithC: true})
		h.ExpectTogether(sagatest.Forward, "a", "b", "c")
		cur := func() string { in := h.Instance(); return in.CurrentStep() }
		if cur := cur(); cur != "a" {
			t.Fatalf("current step %q, want a", cur)
		}
		h.Answer("a", sagatest.Succeeded(nil))
		if cur := cur(); cur != "b" {
			t.Fatalf("current step %q after a succeeded, want b (still out)", cur)
		}
		h.Answer("b", sagatest.Failed("no"))
		if cur := cur(); cur != "c" {
			t.Fatalf("current step %q while settling, want c (still out)", cur)
		}
		h.Answer("c", sagatest.Succeeded(nil))
		h.Expect("c", sagatest.Compensate)
		if cur := cur(); cur != "c" {
			t.Fatalf("current step %q, want c (compensating)", cur)
		}
	})
	t.Run("member given up is compensated first", func(t *testing.T) {
		h := start(t, flowData{})
		h.ExpectTogether(sagatest.Forward, "a", "b")
		h.Answer("a", sagatest.Succeeded(json.RawMessage(`"a"`)))
		h.TimeoutUntilGivenUp("b")
		h.QueriesUnanswered("b")
		h.Expect("b", sagatest.Compensate)
		h.Succeed(nil)
		h.Expect("a", sagatest.Compensate)
		h.Succeed(nil)
		h.ExpectState(saga.Compensated)
	})
	t.Run("saga deadline-free wait past its deadline compensates", func(t *testing.T) {
		h := start(t, flowData{Approval: true})
		h.ExpectTogether(sagatest.Forward, "a", "b")
		h.Answer("a", sagatest.Succeeded(nil))
		h.Answer("b", sagatest.Succeeded(nil))
		h.ExpectStepState(saga.StepWaiting, "w")
		h.Advance(time.Minute)
		h.Expect("b", sagatest.Compensate)
	})
	t.Run("event racing the wait's deadline: the first decided wins", func(t *testing.T) {
		h := start(t, flowData{Approval: true})
		h.ExpectTogether(sagatest.Forward, "a", "b")
		h.Answer("a", sagatest.Succeeded(nil))
		h.Answer("b", sagatest.Succeeded(nil))
		w, _ := h.NextWakeup()
		h.Advance(w.Sub(h.Now()) - time.Nanosecond)
		if _, err := h.SendEvent("ok", "e1", map[string]bool{"approved": true}); err != nil {
			t.Fatal(err)
		}
		h.Expect("p", sagatest.Forward)
		h.FireTimers()
		h.ExpectNoCommand()
		// The other way round: the deadline first, then the event.
		h = start(t, flowData{Approval: true})
		h.ExpectTogether(sagatest.Forward, "a", "b")
		h.Answer("a", sagatest.Succeeded(nil))
		h.Answer("b", sagatest.Succeeded(nil))
		h.FireNextTimer()
		if _, err := h.SendEvent("ok", "e1", map[string]bool{"approved": true}); !errors.Is(err, saga.ErrEventNotAwaited) {
			t.Fatalf("an event after the wait's deadline: %v, want ErrEventNotAwaited", err)
		}
	})
	t.Run("cancel racing the pivot's reply", func(t *testing.T) {
		h := start(t, flowData{})
		h.ExpectTogether(sagatest.Forward, "a", "b")
		h.Answer("a", sagatest.Succeeded(nil))
		h.Answer("b", sagatest.Succeeded(nil))
		pv := h.Expect("p", sagatest.Forward)
		if _, err := h.Cancel("client", "stop"); !errors.Is(err, saga.ErrRefused) {
			t.Fatalf("cancel with the pivot in flight: %v", err)
		}
		h.Reply(pv, sagatest.Succeeded(nil))
		h.ExpectTogether(sagatest.Forward, "x", "y")
		if _, err := h.Cancel("client", "stop"); !errors.Is(err, saga.ErrRefused) {
			t.Fatalf("cancel after the pivot: %v", err)
		}
	})
	t.Run("cancel while waiting abandons the wait", func(t *testing.T) {
		h := start(t, flowData{Approval: true})
		h.ExpectTogether(sagatest.Forward, "a", "b")
		h.Answer("a", sagatest.Succeeded(nil))
		h.Answer("b", sagatest.Succeeded(nil))
		if _, err := h.Cancel("client", "stop"); err != nil {
			t.Fatal(err)
		}
		h.ExpectStepState(saga.StepFailed, "w")
		h.Expect("b", sagatest.Compensate)
		if _, err := h.Cancel("client", "again"); !errors.Is(err, saga.ErrRefused) {
			t.Fatalf("a second cancel: %v", err)
		}
		if _, err := h.Cancel("", ""); !errors.Is(err, saga.ErrRefused) {
			t.Fatal("cancel without actor")
		}
	})
	t.Run("failure after the pivot in a group fails the saga", func(t *testing.T) {
		h := start(t, flowData{})
		h.ExpectTogether(sagatest.Forward, "a", "b")
		h.Answer("a", sagatest.Succeeded(nil))
		h.Answer("b", sagatest.Succeeded(nil))
		h.Expect("p", sagatest.Forward)
		h.Succeed(nil)
		h.ExpectTogether(sagatest.Forward, "x", "y")
		h.Answer("y", sagatest.Failed("broken"))
		h.ExpectState(saga.Failed)
	})
}

// FuzzGroupMergeOrder: whatever the order (and interleaving with retry
// answers and timers) of a group's replies, the saga's data after the group
// is the same: the outputs merged in definition order.
func FuzzGroupMergeOrder(f *testing.F) {
	f.Add([]byte{0, 1, 2})
	f.Add([]byte{2, 1, 0, 7, 9})
	f.Add([]byte{1, 5, 1, 2, 0, 0, 3})
	def := flowDef(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		c := &choices{b: b}
		h := sagatest.New(t, def, sagatest.Data(flowData{WithC: true}))
		h.Start()
		h.ExpectTogether(sagatest.Forward, "a", "b", "c")
		members := []string{"a", "b", "c"}
		for n := 0; h.Step("a").State != saga.StepSucceeded || h.Step("b").State != saga.StepSucceeded || h.Step("c").State != saga.StepSucceeded; n++ {
			if n > 200 {
				t.Fatalf("the group did not complete: %s, steps %+v, journal %v", h.State(), h.Instance().Steps[:3], h.Events())
			}
			var open []string
			for _, m := range members {
				if h.Step(m).State != saga.StepSucceeded {
					open = append(open, m)
				}
			}
			s := open[c.next()%len(open)]
			if _, ok := h.AwaitedBy(s); !ok {
				if w, ok := h.NextWakeup(); ok && h.Step(s).State == saga.StepRetrying {
					h.Advance(w.Sub(h.Now()))
				}
				continue
			}
			if c.next()%4 == 0 && c.more() && h.Step(s).RetryAnswers < 2 && h.Step(s).State == saga.StepRunning { // below MaxAttempts: never given up
				h.Answer(s, sagatest.RetryLater("later"))
				continue
			}
			h.Answer(s, sagatest.Succeeded(json.RawMessage(fmt.Sprintf("%q", s))))
		}
		var d flowData
		h.DecodeData(&d)
		if !slices.Equal(d.Log, []string{"a", "b", "c"}) {
			t.Fatalf("merged %v, want [a b c] whatever the order", d.Log)
		}
	})
}

// FuzzDecideFlow drives the flow saga through any interleaving of replies
// to any command it sent (any member, any outcome, late ones too), timers,
// events (early, duplicate, refused) and cancels; sagatest.CheckDecision
// checks every decision's invariants (one group's first sends per
// decision, nothing compensated while a step is in flight, reverse order of
// completion, never compensating past the pivot). Then every outstanding
// command is answered with success and timers fired: the saga must end,
// and never charge (send the pivot) after an accepted cancel or a refusal.
func FuzzDecideFlow(f *testing.F) {
	f.Add([]byte{0, 0, 1, 0, 2, 0})
	f.Add([]byte{3, 1, 4, 0, 5, 2, 6, 1})
	f.Add([]byte{7, 2, 0, 1, 1, 3, 4, 4, 5, 5, 9})
	def := flowDef(f)
	f.Fuzz(func(t *testing.T, b []byte) { runFlow(t, def, b) })
}

func runFlow(t *testing.T, def *saga.Def, b []byte) {
	{
		c := &choices{b: b}
		h := sagatest.New(t, def, sagatest.Data(flowData{WithC: c.next()%2 == 0, Approval: c.next()%2 == 0}))
		h.Start()
		turnedBack := false
		for n := 0; c.more() && n < 200 && !h.State().Terminal(); n++ {
			wasBack, sentBefore := turnedBack, len(h.Sent())
			switch c.next() % 6 {
			case 0, 1: // a reply to any command sent, any outcome
				sent := h.Sent()
				cmd := sent[c.next()%len(sent)]
				answers := []sagatest.Answer{sagatest.Succeeded(nil), sagatest.Failed("no"), sagatest.RetryLater("later"),
					sagatest.AcceptedLater(false), sagatest.AcceptedLater(true)}
				switch cmd.Action {
				case message.Query:
					answers = []sagatest.Answer{sagatest.Recorded(message.QueryDone, nil), sagatest.Recorded(message.QueryFailed, nil), sagatest.RetryLater("later"),
						sagatest.Recorded(message.QueryAccepted, nil)}
				case message.Compensate:
					answers = answers[:3] // never answered accepted
				}
				h.Reply(cmd, answers[c.next()%len(answers)])
			case 2: // the next timer
				if _, ok := h.NextWakeup(); ok {
					h.FireNextTimer()
				}
			case 3: // time passes
				h.Advance(time.Duration(c.next()) * 100 * time.Millisecond)
			case 4: // an event, maybe duplicate, maybe refused
				_, err := h.SendEvent("ok", fmt.Sprintf("e%d", c.next()%3), map[string]bool{"approved": c.next()%3 != 0})
				var ee *saga.EventError
				if err != nil && !errors.As(err, &ee) {
					t.Fatal(err)
				}
			case 5:
				if _, err := h.Cancel("client", "fuzz"); err == nil {
					turnedBack = true
				}
			}
			if h.State() == saga.Compensating {
				turnedBack = true
			}
			if wasBack {
				for _, cmd := range h.Sent()[sentBefore:] {
					if cmd.Step == "p" && cmd.Action == message.Forward {
						t.Fatalf("the pivot was sent after the saga turned back")
					}
				}
			}
		}
		for n := 0; !h.State().Terminal(); n++ {
			if n > 10_000 {
				t.Fatalf("the saga did not end: %s, steps %+v", h.State(), h.Instance().Steps)
			}
			answered := false
			for _, s := range def.Steps {
				if cmd, ok := h.AwaitedBy(s.Name); ok {
					a := sagatest.Succeeded(nil)
					if cmd.Action == message.Query {
						a = sagatest.Recorded(message.QueryDone, nil)
					}
					h.Reply(cmd, a)
					answered = true
					break
				}
			}
			if answered {
				continue
			}
			if h.Step("w").State == saga.StepWaiting {
				if _, err := h.SendEvent("ok", fmt.Sprintf("drain-%d", n), map[string]bool{"approved": true}); err != nil {
					t.Fatal(err)
				}
				continue
			}
			if _, ok := h.NextWakeup(); !ok {
				t.Fatalf("the saga is %s with nothing awaited and no wake-up", h.State())
			}
			h.FireNextTimer()
		}
	}
}

// A group member's compensation is built from the data with its own output
// merged, although the group never completed (its outputs were never
// merged into the saga's data).
func TestCompensationSeesItsMembersOutput(t *testing.T) {
	def, err := saga.Definition[flowData]{
		Name: "comp-output",
		Steps: slices.Concat(
			saga.Parallel("g", nil,
				saga.Step[flowData]{Name: "a", Participant: "pa", Kind: saga.Compensable, OnSuccess: logOutput,
					Command:      func(flowData) (any, error) { return map[string]int{}, nil },
					Compensation: func(d flowData) (any, error) { return map[string][]string{"undo": d.Log}, nil }},
				saga.Step[flowData]{Name: "b", Participant: "pb", Kind: saga.Compensable,
					Command:      func(flowData) (any, error) { return map[string]int{}, nil },
					Compensation: func(flowData) (any, error) { return map[string]int{}, nil }},
			),
			[]saga.Step[flowData]{{Name: "p", Participant: "pp", Kind: saga.Pivot, Command: func(flowData) (any, error) { return map[string]int{}, nil }}},
		),
	}.Build()
	if err != nil {
		t.Fatal(err)
	}
	h := sagatest.New(t, def)
	h.Start()
	h.ExpectTogether(sagatest.Forward, "a", "b")
	h.Answer("a", sagatest.Succeeded(json.RawMessage(`"res-a"`)))
	h.Answer("b", sagatest.Failed("no"))
	c := h.Expect("a", sagatest.Compensate)
	if string(c.Payload) != `{"undo":["res-a"]}` {
		t.Fatalf("compensation payload %s, want the member's output merged", c.Payload)
	}
	var d flowData
	h.DecodeData(&d)
	if len(d.Log) != 0 {
		t.Fatalf("the saga data took the output of a group that never completed: %v", d.Log)
	}
}
