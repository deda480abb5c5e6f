package saga_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/saga"
)

func boundedDef(t testing.TB, d saga.Definition[item], maxSends int) *saga.Def {
	d.MaxSends = maxSends
	return mustBuild(t, d)
}

// fireUntilStopped fires the saga's wake-ups until stop says so, at most n.
func fireUntilStopped(t *testing.T, h *harness, n int, stop func(saga.Decision) bool) saga.Decision {
	t.Helper()
	for range n {
		if d := h.fire(); stop(d) {
			return d
		}
	}
	t.Fatalf("not stopped after %d timers: %s, steps %s, %d sends", n, h.in.State, h.stepStates(), h.in.Sends())
	return saga.Decision{}
}

func stoppedBy(d saga.Decision) bool {
	return len(d.Journal) > 0 && d.Journal[0].Event == saga.JournalSendBound
}

// checkStopped: the saga failed on a timer at its bound, sent nothing,
// flagged and journaled with the bound named, its step re-sendable and no
// wake-up left.
func checkStopped(t *testing.T, h *harness, d saga.Decision, step string, stepState saga.StepStatus, sends int) {
	t.Helper()
	in := h.in
	s := in.Steps[in.Cursor]
	if in.State != saga.Failed || s.Name != step || s.State != stepState || s.DueAt != nil || in.NextWakeup() != nil || len(d.Send) != 0 {
		t.Fatalf("at the bound: saga %s, step %s %s due %v, %d sent; want failed, %s %s, nothing due or sent", in.State, s.Name, s.State, s.DueAt, len(d.Send), step, stepState)
	}
	if in.Sends() != sends {
		t.Fatalf("stopped after %d sends, want %d", in.Sends(), sends)
	}
	want := "max sends " + strconv.Itoa(h.def.MaxSends)
	if !strings.Contains(in.Flag, want) || !strings.Contains(d.Journal[0].Reason, want) || !strings.Contains(s.LastError, want) {
		t.Fatalf("flag %q, journal %q, last error %q: want each to name %q", in.Flag, d.Journal[0].Reason, s.LastError, want)
	}
}

// TestSendBoundStopsRetryingAfterThePivot: a retryable step after the pivot
// is re-sent forever by the transition table, unless the saga reaches its
// send bound: then the next due timer fails it, flagged, with nothing sent;
// a late reply is ignored; an operator's retry re-opens it with one send;
// replies still move it on (a next step's first send included), and the
// next due timer stops it again.
func TestSendBoundStopsRetryingAfterThePivot(t *testing.T) {
	t.Parallel()
	const bound = 10
	h := newHarness(t, boundedDef(t, pivotDefinition(), bound), uuid.NewSHA1(uuid.NameSpaceOID, []byte("bound-1")))
	h.start()
	h.ok("a")
	h.ok("b")
	h.ok("p")
	first := h.cmd("r1", message.Forward, 1)
	d := fireUntilStopped(t, h, 100, stoppedBy)
	checkStopped(t, h, d, "r1", saga.StepRetrying, bound)
	if n := h.in.Steps[3].Attempts; n != bound-3 {
		t.Fatalf("r1 sent %d times, want %d", n, bound-3)
	}
	if d := h.must(h.replyEv(h.replyTo(first, message.Success))); !d.Late || d.Changed {
		t.Fatalf("a reply after the stop: late %v changed %v; want ignored as late", d.Late, d.Changed)
	}
	d = h.must(h.opEv(saga.ActionRetry, ""))
	if h.in.State != saga.Running || h.in.Flag != "" || h.in.FinishedAt != nil || len(d.Send) != 1 || d.Send[0].Command.Step != "r1" || d.Send[0].Command.Attempt != bound-2 {
		t.Fatalf("operator retry: saga %s flag %q, sent %+v; want running, unflagged, r1 attempt %d", h.in.State, h.in.Flag, d.Send, bound-2)
	}
	d = h.ok("r1")
	if len(d.Send) != 1 || d.Send[0].Command.Step != "r2" {
		t.Fatalf("r1's success at the bound sent %+v, want r2's first command", d.Send)
	}
	d = fireUntilStopped(t, h, 1, stoppedBy)
	checkStopped(t, h, d, "r2", saga.StepRetrying, bound+2)
	h.must(h.opEv(saga.ActionResolve, saga.Completed))
	if h.in.State != saga.Completed || h.in.Flag != "" {
		t.Fatalf("resolve: %s flag %q", h.in.State, h.in.Flag)
	}
}

// TestSendBoundStopsACompensation: compensations too are retried until
// they succeed, unless the saga reaches its bound; an operator's retry
// re-opens the compensation and its success compensates the saga.
func TestSendBoundStopsACompensation(t *testing.T) {
	t.Parallel()
	const bound = 6
	h := newHarness(t, boundedDef(t, noPivotDefinition(), bound), uuid.NewSHA1(uuid.NameSpaceOID, []byte("bound-2")))
	h.start()
	h.ok("x")
	h.answer("y", message.Forward, message.Failure)
	if h.in.State != saga.Compensating {
		t.Fatalf("after y failed: %s", h.in.State)
	}
	d := fireUntilStopped(t, h, 100, stoppedBy)
	checkStopped(t, h, d, "x", saga.StepCompRetrying, bound)
	if d.Journal[0].Action != string(message.Compensate) {
		t.Fatalf("journal action %q, want compensate", d.Journal[0].Action)
	}
	d = h.must(h.opEv(saga.ActionRetry, ""))
	if h.in.State != saga.Compensating || len(d.Send) != 1 || d.Send[0].Command.Action != message.Compensate {
		t.Fatalf("operator retry: %s, sent %+v; want compensating with x's compensation", h.in.State, d.Send)
	}
	h.answer("x", message.Compensate, message.Success)
	if h.in.State != saga.Compensated {
		t.Fatalf("after the compensation succeeded: %s", h.in.State)
	}
}

// TestSendBoundBeforeThePivot: a step before the pivot at the bound is
// stopped at its next due timer like any other, before its own deadline
// would have given it up (a retry answer is still taken first).
func TestSendBoundBeforeThePivot(t *testing.T) {
	t.Parallel()
	const bound = 3
	h := newHarness(t, boundedDef(t, pivotDefinition(), bound), uuid.NewSHA1(uuid.NameSpaceOID, []byte("bound-3")))
	h.start()
	h.answer("a", message.Forward, message.Retry) // retry answers count toward MaxAttempts (3), not reached
	h.fire()                                      // re-send 2
	h.fire()                                      // timeout
	h.fire()                                      // re-send 3: the bound
	d := h.fire()                                 // its timeout
	checkStopped(t, h, d, "a", saga.StepRetrying, bound)
}

// TestSendBoundDefaultsAndOff: Build defaults the bound, a negative one
// turns it off (the table's retry-forever rows hold), and the registry's
// SetMaxSends sets every registered definition's without touching the
// values already handed out.
func TestSendBoundDefaultsAndOff(t *testing.T) {
	t.Parallel()
	if def := mustBuild(t, pivotDefinition()); def.MaxSends != saga.MaxSendsDefault {
		t.Fatalf("default MaxSends %d, want %d", def.MaxSends, saga.MaxSendsDefault)
	}
	h := newHarness(t, boundedDef(t, pivotDefinition(), -1), uuid.NewSHA1(uuid.NameSpaceOID, []byte("bound-4")))
	h.start()
	h.ok("a")
	h.ok("b")
	h.ok("p")
	for range 2 * saga.MaxSendsDefault {
		h.fire()
	}
	if h.in.State != saga.Running || h.in.Sends() < saga.MaxSendsDefault {
		t.Fatalf("without a bound: %s after %d sends", h.in.State, h.in.Sends())
	}
	reg := saga.NewRegistry()
	before := mustBuild(t, pivotDefinition())
	if err := reg.Register(before); err != nil {
		t.Fatal(err)
	}
	reg.SetMaxSends(42)
	if got, _ := reg.Latest("five"); got.MaxSends != 42 || before.MaxSends != saga.MaxSendsDefault {
		t.Fatalf("SetMaxSends(42): registered %d, the value handed out before %d", got.MaxSends, before.MaxSends)
	}
	reg.SetMaxSends(-1)
	if got, _ := reg.Latest("five"); got.MaxSends != 0 {
		t.Fatalf("SetMaxSends(-1): %d, want 0 (none)", got.MaxSends)
	}
}
