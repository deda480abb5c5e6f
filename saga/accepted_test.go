package saga_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/saga/sagatest"
)

// acceptedDef is the 5-step pivot saga (a, b, p, r1, r2) with queries as
// given (-1: off, 0: the default) and accepted deadlines of an hour.
func acceptedDef(t *testing.T, queries int) *saga.Def {
	d := pivotDefinition()
	for i := range d.Steps {
		d.Steps[i].QueryAttempts = queries
		d.Steps[i].AcceptedDeadline = time.Hour
	}
	return mustBuild(t, d)
}

// acceptB runs a to success and answers b accepted.
func acceptB(h *sagatest.Harness, cancellable bool) {
	h.Start()
	h.Expect("a", sagatest.Forward)
	h.Succeed(nil)
	h.Expect("b", sagatest.Forward)
	h.Advance(time.Second)
	h.Accept(cancellable)
}

func stepStates(h *sagatest.Harness) string {
	in := h.Instance()
	s := make([]string, len(in.Steps))
	for i, st := range in.Steps {
		s[i] = string(st.State)
	}
	return strings.Join(s, " ")
}

// TestDecideAccepted drives steps answered accepted through every event
// that may meet them: the final answer, duplicates and stale answers,
// timers before and at the accepted deadline, queries, a cancel, an
// operator, the saga deadline.
func TestDecideAccepted(t *testing.T) {
	t.Parallel()
	rows := []struct {
		name    string
		queries int // QueryAttempts of every step
		run     func(t *testing.T, h *sagatest.Harness)
		state   saga.State
		steps   string
	}{
		{"accepted: nothing re-sent until the accepted deadline", -1, func(t *testing.T, h *sagatest.Harness) {
			acceptB(h, false)
			h.ExpectJournal("started", "step succeeded a", "step accepted b")
			if w, _ := h.NextWakeup(); !w.Equal(h.Now().Add(time.Hour)) {
				t.Fatalf("wake-up %s, want the accepted deadline %s", w, h.Now().Add(time.Hour))
			}
			// Far beyond the step's timeout (10s) and deadline (2m).
			h.Advance(59 * time.Minute)
			h.ExpectNoCommand()
			if s := h.Step("b"); s.Attempts != 1 || s.AcceptedAt == nil || s.Cancellable {
				t.Fatalf("b: %+v; want one send, accepted, not cancellable", s)
			}
		}, saga.Running, "succeeded accepted pending pending pending"},
		{"accepted then done: the saga goes on", -1, func(t *testing.T, h *sagatest.Harness) {
			acceptB(h, false)
			h.Advance(30 * time.Minute)
			h.Succeed(nil)
			h.ExpectJournal("started", "step succeeded a", "step accepted b", "step succeeded b")
			h.Expect("p", sagatest.Forward)
		}, saga.Running, "succeeded succeeded running pending pending"},
		{"accepted then failed: compensate what took effect", -1, func(t *testing.T, h *sagatest.Harness) {
			acceptB(h, false)
			h.Fail("declined later")
			h.Expect("a", sagatest.Compensate)
		}, saga.Compensating, "compensating failed pending pending pending"},
		{"accepted twice (a redelivery): late, ignored", -1, func(t *testing.T, h *sagatest.Harness) {
			acceptB(h, false)
			if d := h.Redeliver(); d.Changed || !d.Late {
				t.Fatalf("redelivered accepted: changed=%v late=%v, want ignored as late", d.Changed, d.Late)
			}
		}, saga.Running, "succeeded accepted pending pending pending"},
		{"retry after accepted: ignored", -1, func(t *testing.T, h *sagatest.Harness) {
			acceptB(h, false)
			if d := h.Retry("busy"); d.Changed || !d.Late {
				t.Fatalf("retry after accepted: changed=%v, want ignored", d.Changed)
			}
			h.ExpectNoCommand()
		}, saga.Running, "succeeded accepted pending pending pending"},
		{"accepted answer to an earlier send: late; the latest send is awaited", -1, func(t *testing.T, h *sagatest.Harness) {
			h.Start()
			h.Expect("a", sagatest.Forward)
			h.Succeed(nil)
			h.Expect("b", sagatest.Forward)
			h.FireNextTimer() // timeout
			h.FireNextTimer() // re-send
			h.Expect("b", sagatest.Forward)
			if d := h.AnswerEarlier(1, sagatest.AcceptedLater(false)); d.Changed {
				t.Fatal("accepted answer to attempt 1 moved the saga")
			}
			h.Accept(false) // the barrier answers attempt 2 alike
		}, saga.Running, "succeeded accepted pending pending pending"},
		{"accepted deadline, no queries: given up and compensated", -1, func(t *testing.T, h *sagatest.Harness) {
			acceptB(h, false)
			h.Advance(time.Hour)
			h.ExpectJournal("started", "step succeeded a", "step accepted b", "accepted deadline passed b")
			h.Expect("b", sagatest.Compensate)
		}, saga.Compensating, "succeeded compensating pending pending pending"},
		{"accepted deadline: queried; accepted again is no answer; done settles it", 0, func(t *testing.T, h *sagatest.Harness) {
			acceptB(h, false)
			h.Advance(time.Hour)
			q := h.Expect("b", sagatest.Query)
			h.Reply(q, sagatest.Recorded(message.QueryAccepted, nil))
			h.ExpectJournal("started", "step succeeded a", "step accepted b", "accepted deadline passed b", "querying participant b", "query not answered b")
			h.FireNextTimer()
			q = h.Expect("b", sagatest.Query)
			h.Reply(q, sagatest.Recorded(message.QueryDone, nil))
			h.Expect("p", sagatest.Forward)
		}, saga.Running, "succeeded succeeded running pending pending"},
		{"accepted deadline: every query answers accepted; abandoned and compensated", 0, func(t *testing.T, h *sagatest.Harness) {
			acceptB(h, false)
			h.Advance(time.Hour)
			for range saga.QueryAttemptsDefault {
				q := h.Expect("b", sagatest.Query)
				h.Reply(q, sagatest.Recorded(message.QueryAccepted, nil))
				h.FireNextTimer()
			}
			h.Expect("b", sagatest.Compensate)
		}, saga.Compensating, "succeeded compensating pending pending pending"},
		{"final answer while queried after the accepted deadline: taken", 0, func(t *testing.T, h *sagatest.Harness) {
			acceptB(h, false)
			h.Advance(time.Hour)
			h.Expect("b", sagatest.Query)
			h.Reply(h.Sent()[1], sagatest.Succeeded(nil)) // the forward's own final reply
			h.Expect("p", sagatest.Forward)
		}, saga.Running, "succeeded succeeded running pending pending"},
		{"cancel while accepted: held until settled, then compensated", -1, func(t *testing.T, h *sagatest.Harness) {
			acceptB(h, false)
			if _, err := h.Cancel("client", "changed mind"); err != nil {
				t.Fatal(err)
			}
			h.ExpectNoCommand()
			if st := h.Step("b").State; st != saga.StepAccepted {
				t.Fatalf("b %s after the cancel, want accepted (held)", st)
			}
			h.Advance(10 * time.Minute)
			h.ExpectNoCommand()
			h.Succeed(nil) // settled: now it is compensated, latest first
			h.Expect("b", sagatest.Compensate)
		}, saga.Compensating, "succeeded compensating pending pending pending"},
		{"cancel while accepted and cancellable: compensated at once", -1, func(t *testing.T, h *sagatest.Harness) {
			acceptB(h, true)
			if !h.Step("b").Cancellable {
				t.Fatal("b not recorded cancellable")
			}
			if _, err := h.Cancel("client", "changed mind"); err != nil {
				t.Fatal(err)
			}
			h.Expect("b", sagatest.Compensate)
			h.Reply(h.Sent()[len(h.Sent())-1], sagatest.Answer{Outcome: message.Success, Reason: "empty"})
			h.Expect("a", sagatest.Compensate)
			h.Succeed(nil)
		}, saga.Compensated, "compensated compensated pending pending pending"},
		{"operator compensate while accepted: given up and compensated", -1, func(t *testing.T, h *sagatest.Harness) {
			acceptB(h, false)
			if _, err := h.Operate(saga.Operator{Action: saga.ActionCompensate}); err != nil {
				t.Fatal(err)
			}
			h.Expect("b", sagatest.Compensate)
		}, saga.Compensating, "succeeded compensating pending pending pending"},
		{"operator retry while accepted: re-sent (the barrier answers again)", -1, func(t *testing.T, h *sagatest.Harness) {
			acceptB(h, false)
			if _, err := h.Operate(saga.Operator{Action: saga.ActionRetry}); err != nil {
				t.Fatal(err)
			}
			if c := h.Expect("b", sagatest.Forward); c.Attempt != 2 {
				t.Fatalf("re-sent attempt %d, want 2", c.Attempt)
			}
			h.Succeed(nil)
			h.Expect("p", sagatest.Forward)
		}, saga.Running, "succeeded succeeded running pending pending"},
		{"pivot accepted, deadline passed, no queries: failed for an operator", -1, func(t *testing.T, h *sagatest.Harness) {
			acceptB(h, false)
			h.Succeed(nil)
			h.Expect("p", sagatest.Forward)
			h.Accept(false)
			h.Advance(time.Hour)
			h.ExpectNoCommand()
		}, saga.Failed, "succeeded succeeded unknown pending pending"},
		{"after the pivot: accepted deadline re-sends and flags", -1, func(t *testing.T, h *sagatest.Harness) {
			acceptB(h, false)
			h.Succeed(nil)
			h.Expect("p", sagatest.Forward)
			h.Succeed(nil)
			h.Expect("r1", sagatest.Forward)
			h.Accept(false)
			h.Advance(time.Hour)
			if c := h.Expect("r1", sagatest.Forward); c.Attempt != 2 {
				t.Fatalf("r1 re-sent as attempt %d, want 2", c.Attempt)
			}
			if h.Instance().Flag == "" {
				t.Fatal("saga not flagged after an accepted deadline past the pivot")
			}
			h.Accept(false) // answered accepted again: waits again
			h.Succeed(nil)
			h.Expect("r2", sagatest.Forward)
		}, saga.Running, "succeeded succeeded succeeded succeeded running"},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			h := sagatest.New(t, acceptedDef(t, row.queries), sagatest.Data(item{ID: "i-1"}))
			row.run(t, h)
			if got := h.State(); got != row.state {
				t.Fatalf("saga %s, want %s; journal %v", got, row.state, h.Events())
			}
			if got := stepStates(h); got != row.steps {
				t.Fatalf("steps\n got  %s\n want %s", got, row.steps)
			}
		})
	}
}

// TestDecideAcceptedSagaDeadline: the saga's own deadline before the
// pivot is not suspended by an accepted step: the step is given up and
// compensated (its participant holds the compensation until it settles,
// or cancels it).
func TestDecideAcceptedSagaDeadline(t *testing.T) {
	t.Parallel()
	d := pivotDefinition()
	d.Deadline = 10 * time.Minute
	for i := range d.Steps {
		d.Steps[i].QueryAttempts = -1
	}
	h := sagatest.New(t, mustBuild(t, d), sagatest.Data(item{ID: "i-1"}))
	acceptB(h, false)
	h.Advance(10 * time.Minute)
	h.Expect("b", sagatest.Compensate)
	if got := stepStates(h); got != "succeeded compensating pending pending pending" {
		t.Fatalf("steps %s", got)
	}
}

// TestAcceptedDeadlineDefaultAndOverride: the default is hours, and a
// configuration override replaces it.
func TestAcceptedDeadlineDefaultAndOverride(t *testing.T) {
	t.Parallel()
	def := mustBuild(t, pivotDefinition())
	if got := def.Steps[1].AcceptedDeadline; got != saga.AcceptedDeadlineDefault || got < time.Hour {
		t.Fatalf("default accepted deadline %s, want %s (hours)", got, saga.AcceptedDeadlineDefault)
	}
	reg := saga.NewRegistry()
	if err := reg.Register(def); err != nil {
		t.Fatal(err)
	}
	if err := reg.Override("five", "b", saga.StepOverride{AcceptedDeadline: 90 * time.Second}); err != nil {
		t.Fatal(err)
	}
	got, ok := reg.Lookup("five", 1)
	if !ok {
		t.Fatal("five v1 not registered")
	}
	if got.Steps[1].AcceptedDeadline != 90*time.Second || got.Steps[0].AcceptedDeadline != saga.AcceptedDeadlineDefault {
		t.Fatalf("after the override: b %s, a %s; want 1m30s and the default", got.Steps[1].AcceptedDeadline, got.Steps[0].AcceptedDeadline)
	}
	bad := pivotDefinition()
	bad.Steps[0].AcceptedDeadline = -time.Second
	if _, err := bad.Build(); err == nil || !strings.Contains(err.Error(), "accepted deadline must not be negative") {
		t.Fatalf("negative accepted deadline: %v", err)
	}
}
