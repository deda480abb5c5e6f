package saga_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/saga/sagatest"
)

// queryDef is pivotDefinition with queries on (the default).
func queryDef(t *testing.T) *saga.Def {
	d := pivotDefinition()
	for i := range d.Steps {
		d.Steps[i].QueryAttempts = 0
	}
	return mustBuild(t, d)
}

// toPivot runs a and b to success and gives the pivot p up by retry answers.
func toPivotQuery(t *testing.T) *sagatest.Harness {
	t.Helper()
	h := sagatest.New(t, queryDef(t), sagatest.Data(item{ID: "i-1"}))
	h.Start()
	h.Expect("a", sagatest.Forward)
	h.Succeed(nil)
	h.Expect("b", sagatest.Forward)
	h.Succeed(nil)
	h.Expect("p", sagatest.Forward)
	h.TimeoutUntilGivenUp("p")
	if st := h.Step("p").State; st != saga.StepQuerying {
		t.Fatalf("pivot given up is %s, want querying", st)
	}
	return h
}

func lastEvent(h *sagatest.Harness, event string) (saga.JournalEntry, bool) {
	j := h.Journal()
	for k := len(j) - 1; k >= 0; k-- {
		if j[k].Event == event {
			return j[k], true
		}
	}
	return saga.JournalEntry{}, false
}

func TestDecideQuerySettlesAGivenUpPivot(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		answer sagatest.Answer
		then   func(t *testing.T, h *sagatest.Harness)
		want   saga.State
		steps  string
	}{
		{"done: forward with the recorded output", sagatest.Recorded(message.QueryDone, map[string]string{"charge": "c-1"}), func(t *testing.T, h *sagatest.Harness) {
			if out := string(h.Step("p").Output); out != `{"charge":"c-1"}` {
				t.Fatalf("pivot output %s, want the recorded one", out)
			}
			h.Expect("r1", sagatest.Forward)
			h.Succeed(nil)
			h.Expect("r2", sagatest.Forward)
			h.Succeed(nil)
		}, saga.Completed, "succeeded succeeded succeeded succeeded succeeded"},
		{"closed: compensate the steps before it", sagatest.Recorded(message.QueryClosed, nil), func(t *testing.T, h *sagatest.Harness) {
			h.Expect("b", sagatest.Compensate)
			h.Succeed(nil)
			h.Expect("a", sagatest.Compensate)
			h.Succeed(nil)
		}, saga.Compensated, "compensated compensated failed pending pending"},
		{"failed: compensate the steps before it", sagatest.Recorded(message.QueryFailed, nil), func(t *testing.T, h *sagatest.Harness) {
			h.Expect("b", sagatest.Compensate)
			h.Succeed(nil)
			h.Expect("a", sagatest.Compensate)
			h.Succeed(nil)
		}, saga.Compensated, "compensated compensated failed pending pending"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := toPivotQuery(t)
			q := h.Expect("p", sagatest.Query)
			h.Reply(q, c.answer)
			e, ok := lastEvent(h, saga.JournalQueryAnswered)
			if !ok || e.Actor != saga.ActorReconciler || e.Step != "p" || e.Action != string(message.Query) {
				t.Fatalf("journal has no query answered entry by the reconciler: %+v", e)
			}
			c.then(t, h)
			h.ExpectState(c.want)
			var got []string
			for _, s := range h.Instance().Steps {
				got = append(got, string(s.State))
			}
			if strings.Join(got, " ") != c.steps {
				t.Fatalf("steps %s, want %s", strings.Join(got, " "), c.steps)
			}
		})
	}
}

func TestDecideQueriesUnansweredFailThePivot(t *testing.T) {
	t.Parallel()
	h := toPivotQuery(t)
	h.Expect("p", sagatest.Query)
	h.QueriesUnanswered("p")
	h.ExpectState(saga.Failed)
	h.ExpectNoCommand()
	if s := h.Step("p"); s.State != saga.StepUnknown || s.QueryAttempts != saga.QueryAttemptsDefault {
		t.Fatalf("pivot %s after %d queries, want unknown after %d", s.State, s.QueryAttempts, saga.QueryAttemptsDefault)
	}
	// The reconciler (or an operator) asks again; the answer settles it.
	if _, err := h.Operate(saga.Operator{Action: saga.ActionQuery, Actor: saga.ActorReconciler, Reason: "failed pivot: ask again"}); err != nil {
		t.Fatal(err)
	}
	h.ExpectState(saga.Running)
	q := h.Expect("p", sagatest.Query)
	if q.Attempt != saga.QueryAttemptsDefault+1 {
		t.Fatalf("query attempt %d, want %d (every query has an id of its own)", q.Attempt, saga.QueryAttemptsDefault+1)
	}
	h.Reply(q, sagatest.Recorded(message.QueryDone, nil))
	h.Expect("r1", sagatest.Forward)
	if h.Instance().FinishedAt != nil {
		t.Fatal("a re-opened saga keeps its finish time")
	}
}

func TestDecideQueryBeforeThePivot(t *testing.T) {
	t.Parallel()
	h := sagatest.New(t, queryDef(t), sagatest.Data(item{ID: "i-1"}))
	h.Start()
	h.Expect("a", sagatest.Forward)
	h.Succeed(nil)
	h.Expect("b", sagatest.Forward)
	for range 2 {
		h.Retry("busy")
		h.FireNextTimer()
		h.Expect("b", sagatest.Forward)
	}
	h.Retry("busy") // third retry answer: given up, queried
	q := h.Expect("b", sagatest.Query)
	// The participant is busy: asked again after the backoff.
	h.Reply(q, sagatest.RetryLater("db busy"))
	h.ExpectNoCommand()
	h.FireNextTimer()
	q = h.Expect("b", sagatest.Query)
	if q.Attempt != 2 {
		t.Fatalf("query attempt %d, want 2", q.Attempt)
	}
	// It was compensated meanwhile: nothing of b remains; a is undone next.
	h.Reply(q, sagatest.Recorded(message.QueryCompensated, nil))
	h.Expect("a", sagatest.Compensate)
	h.Succeed(nil)
	h.ExpectState(saga.Compensated)
	if s := h.Step("b"); s.State != saga.StepCompensated {
		t.Fatalf("b is %s, want compensated", s.State)
	}
}

func TestDecideDefiniteAnswerWhileQueryingIsTaken(t *testing.T) {
	t.Parallel()
	h := toPivotQuery(t)
	q := h.Expect("p", sagatest.Query)
	last := h.Step("p").Attempts
	if last < 2 {
		t.Fatalf("pivot sent %d times, want re-sends before it was given up", last)
	}
	for _, c := range h.Sent() {
		if c.Step == "p" && c.Action == message.Forward && c.Attempt == last {
			h.Reply(c, sagatest.Succeeded(nil)) // the latest charge's late reply
		}
	}
	h.Expect("r1", sagatest.Forward)
	// The query's answer comes after: late, ignored.
	d := h.Reply(q, sagatest.Recorded(message.QueryDone, nil))
	if !d.Late || d.Changed {
		t.Fatalf("a query answer after the step settled: late=%v changed=%v, want late, unchanged", d.Late, d.Changed)
	}
}

func TestDecideQueryInvalidAnswerIsAnError(t *testing.T) {
	t.Parallel()
	h := toPivotQuery(t)
	q := h.Expect("p", sagatest.Query)
	_, err := h.Deliver(saga.Event{Kind: saga.EventReply, At: h.Now(), Reply: &message.Reply{
		MessageID: q.MessageID, InReplyTo: q.MessageID, SagaID: q.SagaID, Step: "p", Action: message.Query,
		Outcome: message.Success, Payload: []byte(`{"state":"perhaps"}`),
	}})
	if !errors.Is(err, message.ErrInvalid) || !strings.Contains(err.Error(), "payload.state") {
		t.Fatalf("err = %v, want ErrInvalid naming payload.state", err)
	}
}

func TestDecideCheckOfAFinishedSaga(t *testing.T) {
	t.Parallel()
	h := sagatest.New(t, queryDef(t), sagatest.Data(item{ID: "i-1"}))
	h.Start()
	h.Expect("a", sagatest.Forward)
	h.Succeed(nil)
	h.Expect("b", sagatest.Forward)
	h.Fail("no stock")
	h.Expect("a", sagatest.Compensate)
	h.Succeed(nil)
	h.ExpectState(saga.Compensated)
	if _, err := h.Operate(saga.Operator{Action: saga.ActionCheck, Actor: saga.ActorReconciler, Reason: "sampled"}); err != nil {
		t.Fatal(err)
	}
	qa := h.Expect("a", sagatest.Query)
	qb := h.Expect("b", sagatest.Query)
	h.ExpectNoCommand()
	h.ExpectState(saga.Compensated)
	// a: the participant still has the forward done: its compensation was lost.
	d := h.Reply(qa, sagatest.Recorded(message.QueryDone, nil))
	if d.Changed || len(d.Differences) != 1 || d.Differences[0].Kind != "participant_done_step_compensated" {
		t.Fatalf("check answer for a: changed=%v differences %+v", d.Changed, d.Differences)
	}
	// b: failed, as the saga says.
	d = h.Reply(qb, sagatest.Recorded(message.QueryFailed, nil))
	if len(d.Differences) != 0 || d.Journal[0].Event != saga.JournalCheckAgrees {
		t.Fatalf("check answer for b: %+v %+v", d.Differences, d.Journal)
	}
	if _, err := h.Operate(saga.Operator{Action: saga.ActionCheck, Actor: "x", Reason: "y"}); err != nil {
		t.Fatalf("a second check: %v", err)
	}
	running := sagatest.New(t, queryDef(t), sagatest.Data(item{ID: "i-2"}))
	running.Start()
	if _, err := running.Operate(saga.Operator{Action: saga.ActionCheck, Actor: "x", Reason: "y"}); !errors.Is(err, saga.ErrRefused) {
		t.Fatalf("check of a running saga: %v, want refused", err)
	}
}

func TestDisagreement(t *testing.T) {
	t.Parallel()
	cases := []struct {
		step saga.StepStatus
		got  message.QueryState
		want string
	}{
		{saga.StepSucceeded, message.QueryDone, ""},
		{saga.StepSucceeded, message.QueryClosed, "participant_closed_step_succeeded"},
		{saga.StepSucceeded, message.QueryCompensated, "participant_compensated_step_succeeded"},
		{saga.StepFailed, message.QueryFailed, ""},
		{saga.StepFailed, message.QueryClosed, ""},
		{saga.StepFailed, message.QueryDone, "participant_done_step_failed"},
		{saga.StepCompensated, message.QueryCompensated, ""},
		{saga.StepCompensated, message.QueryClosed, ""},
		{saga.StepCompensated, message.QueryDone, "participant_done_step_compensated"},
		{saga.StepUnknown, message.QueryClosed, ""},
		{saga.StepUnknown, message.QueryDone, "participant_done_step_unknown"},
		{saga.StepRunning, message.QueryDone, "participant_done_step_running"},
	}
	for _, c := range cases {
		if got := saga.Disagreement(saga.Completed, c.step, c.got); got != c.want {
			t.Errorf("Disagreement(%s, %s) = %q, want %q", c.step, c.got, got, c.want)
		}
	}
}
