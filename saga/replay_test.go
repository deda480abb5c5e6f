package saga_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/saga/sagatest"
)

// noteDef is noPivotDefinition whose first step keeps its output's note in
// the saga's data, so a taken reply shows in the data.
func noteDef(t *testing.T) *saga.Def {
	d := noPivotDefinition()
	d.Steps[0].OnSuccess = func(it *item, out json.RawMessage) error {
		var o struct {
			Note string `json:"note"`
		}
		if err := json.Unmarshal(out, &o); err != nil {
			return err
		}
		it.Note = o.Note
		return nil
	}
	return mustBuild(t, d)
}

// sentAt returns the attempt-th command of step's action the harness saw.
func sentAt(t *testing.T, h *sagatest.Harness, step string, action message.Action, attempt int) message.Command {
	t.Helper()
	for _, c := range h.Sent() {
		if c.Step == step && c.Action == action && c.Attempt == attempt {
			return c
		}
	}
	t.Fatalf("no %s %s attempt %d was sent", step, action, attempt)
	return message.Command{}
}

// A forward success for attempt 1 after attempt 2 was sent is not applied:
// its payload is not merged, the step keeps running. Only the latest send
// is answered (a reply forged from a command id seen earlier is not taken).
func TestDecideForwardSuccessToEarlierAttemptIsNotApplied(t *testing.T) {
	t.Parallel()
	h := sagatest.New(t, noteDef(t), sagatest.Data(item{ID: "i-1"}))
	h.Start()
	first := h.Expect("x", sagatest.Forward)
	h.FireNextTimer() // timeout
	h.FireNextTimer() // backoff over: attempt 2
	second := h.Expect("x", sagatest.Forward)
	if second.Attempt != 2 {
		t.Fatalf("re-send is attempt %d, want 2", second.Attempt)
	}
	d := h.Reply(first, sagatest.Succeeded(map[string]string{"note": "forged"}))
	if d.Changed || !d.Late || len(d.Journal) != 1 || !d.Journal[0].Ignored {
		t.Fatalf("answer to attempt 1: changed=%v late=%v journal=%+v, want an ignored late reply", d.Changed, d.Late, d.Journal)
	}
	if r := d.Journal[0].Reason; !strings.Contains(r, "answers attempt 1; the saga awaits attempt 2") {
		t.Fatalf("journal reason %q does not name the attempts", r)
	}
	var it item
	h.DecodeData(&it)
	if s := h.Step("x"); s.State != saga.StepRunning || len(s.Output) != 0 || it.Note != "" {
		t.Fatalf("x is %s with output %s, data note %q: the earlier attempt's payload was taken", s.State, s.Output, it.Note)
	}
	h.ExpectNoCommand()
	// The participant's answer to the awaited attempt is taken.
	h.Reply(second, sagatest.Succeeded(map[string]string{"note": "real"}))
	h.Expect("y", sagatest.Forward)
	h.DecodeData(&it)
	if it.Note != "real" {
		t.Fatalf("data note %q, want the awaited attempt's", it.Note)
	}
}

// A compensation success for an earlier compensation attempt is ignored:
// the compensation is still awaited.
func TestDecideCompensationSuccessToEarlierAttemptIsIgnored(t *testing.T) {
	t.Parallel()
	h := sagatest.New(t, noPivotDef(t), sagatest.Data(item{ID: "i-1"}))
	h.Start()
	h.Expect("x", sagatest.Forward)
	h.Succeed(nil)
	h.Expect("y", sagatest.Forward)
	h.Fail("no")
	first := h.Expect("x", sagatest.Compensate)
	h.FireNextTimer() // compensation timeout
	h.FireNextTimer() // re-sent
	second := h.Expect("x", sagatest.Compensate)
	d := h.Reply(first, sagatest.Succeeded(nil))
	if d.Changed || !d.Late {
		t.Fatalf("compensation success to attempt 1: changed=%v late=%v, want ignored", d.Changed, d.Late)
	}
	if s := h.Step("x"); s.State != saga.StepCompensating || h.State() != saga.Compensating {
		t.Fatalf("x is %s, saga %s; want still compensating", s.State, h.State())
	}
	h.Reply(second, sagatest.Succeeded(nil))
	h.ExpectState(saga.Compensated)
}

// A query answer to an earlier query id is ignored, whatever it says: only
// the latest query is awaited.
func TestDecideQueryAnswerToEarlierQueryIsIgnored(t *testing.T) {
	t.Parallel()
	h := toPivotQuery(t)
	first := h.Expect("p", sagatest.Query)
	h.FireNextTimer() // no answer to query 1: query 2
	second := h.Expect("p", sagatest.Query)
	if second.Attempt != first.Attempt+1 {
		t.Fatalf("second query is attempt %d, want %d", second.Attempt, first.Attempt+1)
	}
	d := h.Reply(first, sagatest.Recorded(message.QueryDone, map[string]string{"charge": "forged"}))
	if d.Changed || !d.Late {
		t.Fatalf("answer to query 1: changed=%v late=%v, want ignored", d.Changed, d.Late)
	}
	if s := h.Step("p"); s.State != saga.StepQuerying || len(s.Output) != 0 {
		t.Fatalf("pivot is %s with output %s, want still querying with none", s.State, s.Output)
	}
	h.Reply(second, sagatest.Recorded(message.QueryDone, map[string]string{"charge": "c-1"}))
	h.Expect("r1", sagatest.Forward)
	if out := string(h.Step("p").Output); out != `{"charge":"c-1"}` {
		t.Fatalf("pivot output %s, want the awaited query's", out)
	}
}

// While the step is queried, a definite answer to its latest forward send
// is still taken (TestDecideDefiniteAnswerWhileQueryingIsTaken), but one to
// an earlier forward send is not.
func TestDecideEarlierForwardAnswerWhileQueryingIsIgnored(t *testing.T) {
	t.Parallel()
	h := toPivotQuery(t)
	h.Expect("p", sagatest.Query)
	d := h.Reply(sentAt(t, h, "p", message.Forward, 1), sagatest.Succeeded(nil))
	if d.Changed || !d.Late {
		t.Fatalf("answer to the pivot's attempt 1 while querying: changed=%v late=%v, want ignored", d.Changed, d.Late)
	}
	if s := h.Step("p"); s.State != saga.StepQuerying {
		t.Fatalf("pivot is %s, want still querying", s.State)
	}
}

// A check's answers: an answer to an earlier check's query is ignored,
// the latest one is compared.
func TestDecideCheckAnswerToEarlierCheckIsIgnored(t *testing.T) {
	t.Parallel()
	h := sagatest.New(t, noPivotDef(t), sagatest.Data(item{ID: "i-1"}))
	h.Start()
	for _, s := range []string{"x", "y", "z"} {
		h.Expect(s, sagatest.Forward)
		h.Succeed(nil)
	}
	h.ExpectState(saga.Completed)
	check := func() {
		t.Helper()
		if _, err := h.Operate(saga.Operator{Action: saga.ActionCheck, Actor: "ops", Reason: "audit"}); err != nil {
			t.Fatal(err)
		}
	}
	check()
	first := h.Expect("x", sagatest.Query)
	h.Expect("y", sagatest.Query)
	h.Expect("z", sagatest.Query)
	check()
	second := h.Expect("x", sagatest.Query)
	d := h.Reply(first, sagatest.Recorded(message.QueryCompensated, nil))
	if !d.Late || len(d.Differences) != 0 {
		t.Fatalf("answer to the first check: late=%v differences=%+v, want ignored", d.Late, d.Differences)
	}
	d = h.Reply(second, sagatest.Recorded(message.QueryCompensated, nil))
	if len(d.Differences) != 1 {
		t.Fatalf("answer to the latest check: differences %+v, want one", d.Differences)
	}
}
