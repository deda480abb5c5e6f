package saga_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/saga/sagatest"
)

var testT0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

var testRetry = saga.RetryPolicy{InitialInterval: time.Second, MaxInterval: 8 * time.Second, Multiplier: 2, MaxAttempts: 3}

// pivotDefinition: a, b compensable (10s timeout), p pivot (20s), r1, r2
// retryable (15s); every retry policy 1s..8s x2, 3 attempts; compensations
// flagged after 2 attempts. Queries are off (QueryAttempts -1), so a
// given-up step is abandoned at once, as the transition table's give-up
// rows say; query_test.go drives the same saga with queries on.
func pivotDefinition() saga.Definition[item] {
	a, b, p, r1, r2 := compStep("a"), compStep("b"), pivotStep("p"), retryStep("r1"), retryStep("r2")
	a.Timeout, b.Timeout, p.Timeout, r1.Timeout, r2.Timeout = 10*time.Second, 10*time.Second, 20*time.Second, 15*time.Second, 15*time.Second
	a.Retry, b.Retry, p.Retry, r1.Retry, r2.Retry = testRetry, testRetry, testRetry, testRetry, testRetry
	a.QueryAttempts, b.QueryAttempts, p.QueryAttempts = -1, -1, -1
	return saga.Definition[item]{Name: "five", Version: 1, Steps: []saga.Step[item]{a, b, p, r1, r2}, CompensationFlagAfter: 2}
}

// noPivotDefinition: x, y, z compensable, 5s timeout, same retry policy.
func noPivotDefinition() saga.Definition[item] {
	x, y, z := compStep("x"), compStep("y"), compStep("z")
	x.Timeout, y.Timeout, z.Timeout = 5*time.Second, 5*time.Second, 5*time.Second
	x.Retry, y.Retry, z.Retry = testRetry, testRetry, testRetry
	x.QueryAttempts, y.QueryAttempts, z.QueryAttempts = -1, -1, -1
	return saga.Definition[item]{Name: "three", Version: 1, Steps: []saga.Step[item]{x, y, z}, CompensationFlagAfter: 2}
}

func mustBuild(t testing.TB, d saga.Definition[item]) *saga.Def {
	t.Helper()
	def, err := d.Build()
	if err != nil {
		t.Fatalf("build %s: %v", d.Name, err)
	}
	return def
}

func pivotDef(t testing.TB) *saga.Def   { return mustBuild(t, pivotDefinition()) }
func noPivotDef(t testing.TB) *saga.Def { return mustBuild(t, noPivotDefinition()) }

// harness drives one saga instance through Decide with explicit time,
// recording every command sent and checking the invariants every decision
// must keep.
type harness struct {
	t         testing.TB
	def       *saga.Def
	in        saga.Instance
	now       time.Time
	sent      []message.Command
	lastReply *message.Reply
	n         int
}

func newHarness(t testing.TB, def *saga.Def, sagaID uuid.UUID) *harness {
	in := saga.NewInstance(def, sagaID, "agg-1", "idem-1", json.RawMessage(`{"id":"it-1"}`), testT0)
	// As the engine does at start, with a secret fixed by the saga id so
	// that runs repeat.
	in.Secret = []byte(uuid.NewSHA1(sagaID, []byte("secret")).String())
	return &harness{t: t, def: def, in: in, now: testT0}
}

func (h *harness) decide(ev saga.Event) (saga.Decision, error) {
	h.t.Helper()
	prev := h.in
	d, err := saga.Decide(h.def, prev, ev)
	if err != nil {
		return d, err
	}
	sagatest.CheckDecision(h.t, h.def, prev, ev, d)
	h.in = d.Next
	for _, o := range d.Send {
		h.sent = append(h.sent, o.Command)
	}
	return d, nil
}

func (h *harness) must(ev saga.Event) saga.Decision {
	h.t.Helper()
	d, err := h.decide(ev)
	if err != nil {
		h.t.Fatalf("decide %s at %s: %v", ev.Kind, ev.At.Format(time.TimeOnly), err)
	}
	return d
}

func (h *harness) tick(d time.Duration) { h.now = h.now.Add(d) }

func (h *harness) start() saga.Decision {
	h.t.Helper()
	return h.must(saga.Event{Kind: saga.EventStart, At: h.now})
}

// cmd returns the latest command sent for step and action (attempt 0), or
// the given attempt.
func (h *harness) cmd(step string, action message.Action, attempt int) message.Command {
	h.t.Helper()
	for i := len(h.sent) - 1; i >= 0; i-- {
		c := h.sent[i]
		if c.Step == step && c.Action == action && (attempt == 0 || c.Attempt == attempt) {
			return c
		}
	}
	h.t.Fatalf("no %s command (attempt %d) was sent for step %s", action, attempt, step)
	return message.Command{}
}

func (h *harness) replyTo(c message.Command, outcome message.Outcome) *message.Reply {
	h.n++
	r := &message.Reply{
		MessageID: uuid.NewSHA1(h.in.ID, []byte(fmt.Sprintf("reply-%d", h.n))),
		InReplyTo: c.MessageID, SagaID: c.SagaID, Step: c.Step, Action: c.Action, Outcome: outcome,
	}
	if outcome != message.Success {
		r.Reason = "because " + string(outcome)
	}
	return r
}

func (h *harness) replyEv(r *message.Reply) saga.Event {
	h.lastReply = r
	return saga.Event{Kind: saga.EventReply, At: h.now, Reply: r}
}

// answerEv answers the latest (or the attempt-th) command for step/action
// one second from now.
func (h *harness) answerEv(step string, action message.Action, attempt int, outcome message.Outcome) saga.Event {
	h.t.Helper()
	h.tick(time.Second)
	return h.replyEv(h.replyTo(h.cmd(step, action, attempt), outcome))
}

func (h *harness) answer(step string, action message.Action, outcome message.Outcome) saga.Decision {
	h.t.Helper()
	return h.must(h.answerEv(step, action, 0, outcome))
}

func (h *harness) ok(step string) saga.Decision {
	h.t.Helper()
	return h.answer(step, message.Forward, message.Success)
}

// fireEv moves the clock to the saga's next wake-up and returns the timer event.
func (h *harness) fireEv() saga.Event {
	h.t.Helper()
	w := h.in.NextWakeup()
	if w == nil {
		h.t.Fatalf("saga %s has no wake-up to fire", h.in.State)
	}
	h.now = *w
	return saga.Event{Kind: saga.EventTimer, At: h.now}
}

func (h *harness) fire() saga.Decision {
	h.t.Helper()
	return h.must(h.fireEv())
}

func (h *harness) opEv(action saga.OperatorAction, outcome saga.State) saga.Event {
	h.tick(time.Second)
	return saga.Event{Kind: saga.EventOperator, At: h.now, Operator: &saga.Operator{Action: action, Actor: "alice", Reason: "ticket-7", Outcome: outcome}}
}

func (h *harness) stepStates() string {
	s := make([]string, len(h.in.Steps))
	for i, st := range h.in.Steps {
		s[i] = string(st.State)
	}
	return strings.Join(s, " ")
}

type wantCmd struct {
	participant, step string
	action            message.Action
	attempt           int
}

func fwd(step string, attempt int) wantCmd {
	return wantCmd{"svc-" + step, step, message.Forward, attempt}
}
func comp(step string, attempt int) wantCmd {
	return wantCmd{"svc-" + step, step, message.Compensate, attempt}
}

// Wake-up expectations: given the harness after the event (h.now is the
// event time) and the instance before it, the window the next wake-up
// must fall in; a zero lo means "no wake-up".
type wakeFn func(h *harness, prev saga.Instance) (lo, hi time.Time)

func noWake(*harness, saga.Instance) (lo, hi time.Time) { return }

func wakeIn(d time.Duration) wakeFn {
	return func(h *harness, _ saga.Instance) (time.Time, time.Time) { return h.now.Add(d), h.now.Add(d) }
}

func unchangedWake(_ *harness, prev saga.Instance) (time.Time, time.Time) {
	w := prev.NextWakeup()
	if w == nil {
		return time.Time{}, time.Time{}
	}
	return *w, *w
}

// backoffWake: exactly saga.Backoff of step's retry policy for attempt.
func backoffWake(step string, attempt int) wakeFn {
	return func(h *harness, _ saga.Instance) (time.Time, time.Time) {
		i, _ := h.def.StepIndex(step)
		w := h.now.Add(saga.Backoff(h.def.Steps[i].Retry, h.in.ID, step, attempt))
		return w, w
	}
}

// awaitWake: the attempt-th forward send of step is awaited for the
// step's timeout plus the backoff before that send.
func awaitWake(step string, attempt int) wakeFn {
	return func(h *harness, _ saga.Instance) (time.Time, time.Time) {
		i, _ := h.def.StepIndex(step)
		sd := h.def.Steps[i]
		w := h.now.Add(sd.Timeout + saga.Backoff(sd.Retry, h.in.ID, step, attempt-1))
		return w, w
	}
}

// compAwaitWake: awaitWake for the attempt-th compensation send.
func compAwaitWake(step string, attempt int) wakeFn {
	return func(h *harness, _ saga.Instance) (time.Time, time.Time) {
		i, _ := h.def.StepIndex(step)
		sd := h.def.Steps[i]
		w := h.now.Add(sd.Timeout + saga.Backoff(sd.CompRetry, h.in.ID, step+"/compensate", attempt-1))
		return w, w
	}
}

// jitteredWake: somewhere in [d/2, d] of the capped exponential delay.
func jitteredWake(step string, attempt int) wakeFn {
	return func(h *harness, _ saga.Instance) (time.Time, time.Time) {
		i, _ := h.def.StepIndex(step)
		d := capped(h.def.Steps[i].CompRetry, attempt)
		return h.now.Add(d / 2), h.now.Add(d)
	}
}

func capped(p saga.RetryPolicy, attempt int) time.Duration {
	d := p.InitialInterval
	for k := 1; k < attempt && d < p.MaxInterval; k++ {
		d = time.Duration(float64(d) * p.Multiplier)
	}
	return min(d, p.MaxInterval)
}

type decideRow struct {
	name  string
	def   func(testing.TB) *saga.Def // nil: the 5-step pivot saga
	prep  func(h *harness)
	event func(h *harness) saga.Event

	wantErr     error // errors.Is; the rest is not checked then
	wantState   saga.State
	wantSteps   string
	wantSend    []wantCmd
	wantWake    wakeFn
	wantFlag    bool
	wantEvent   string // first journal entry's event; "" = no journal, unchanged
	wantIgnored bool
	wantLate    bool
	wantIllegal bool
	check       func(t *testing.T, h *harness, d saga.Decision)
}

// Preparations of the 5-step saga.
func toB(h *harness)  { h.start(); h.ok("a") }
func toP(h *harness)  { toB(h); h.ok("b") }
func toR1(h *harness) { toP(h); h.ok("p") }
func toR2(h *harness) { toR1(h); h.ok("r1") }

// Preparations of the 3-step saga: z failed, y's compensation sent.
func toCompY(h *harness) {
	h.start()
	h.ok("x")
	h.ok("y")
	h.answer("z", message.Forward, message.Failure)
}

func answerEv(step string, action message.Action, outcome message.Outcome) func(h *harness) saga.Event {
	return func(h *harness) saga.Event { return h.answerEv(step, action, 0, outcome) }
}
func okEv(step string) func(h *harness) saga.Event {
	return answerEv(step, message.Forward, message.Success)
}
func failEv(step string) func(h *harness) saga.Event {
	return answerEv(step, message.Forward, message.Failure)
}
func retryEv(step string) func(h *harness) saga.Event {
	return answerEv(step, message.Forward, message.Retry)
}
func fireEv(h *harness) saga.Event { return h.fireEv() }
func replayEv(h *harness) saga.Event {
	h.tick(time.Second)
	return h.replyEv(h.lastReply)
}
func opEv(a saga.OperatorAction, outcome saga.State) func(h *harness) saga.Event {
	return func(h *harness) saga.Event { return h.opEv(a, outcome) }
}

func then(fs ...func(h *harness)) func(h *harness) {
	return func(h *harness) {
		for _, f := range fs {
			f(h)
		}
	}
}
func doRetry(step string) func(h *harness) {
	return func(h *harness) { h.answer(step, message.Forward, message.Retry) }
}
func doFail(step string) func(h *harness) {
	return func(h *harness) { h.answer(step, message.Forward, message.Failure) }
}
func doCompFail(step string) func(h *harness) {
	return func(h *harness) { h.answer(step, message.Compensate, message.Failure) }
}
func doFire(h *harness) { h.fire() }

// fireUntil fires the saga's wake-ups (and nothing else) until done holds.
func fireUntil(done func(h *harness) bool) func(h *harness) {
	return func(h *harness) {
		h.t.Helper()
		for n := 0; !done(h); n++ {
			if n == 1000 {
				h.t.Fatalf("fireUntil: 1000 timers and still %s, steps %s", h.in.State, h.stepStates())
			}
			h.fire()
		}
	}
}

// untilTerminal: fireUntil's condition for a saga that ended.
func untilTerminal(h *harness) bool { return h.in.State.Terminal() }

// deadlineOf is when step's forward runs out of time.
func deadlineOf(h *harness, step string) time.Time {
	h.t.Helper()
	i, _ := h.def.StepIndex(step)
	s := h.in.Steps[i]
	if s.StartedAt == nil {
		h.t.Fatalf("step %s was never sent", step)
	}
	return s.StartedAt.Add(h.def.Steps[i].GiveUpAfter())
}

// fireToDeadline fires the timeouts and re-sends of step until its next
// wake-up is its deadline (the event that gives it up is left to the row).
func fireToDeadline(step string) func(h *harness) {
	return fireUntil(func(h *harness) bool {
		w := h.in.NextWakeup()
		return w == nil || !w.Before(deadlineOf(h, step))
	})
}

// withStepDeadline: the 5-step saga with step's deadline set.
func withStepDeadline(step string, d time.Duration) func(testing.TB) *saga.Def {
	return func(t testing.TB) *saga.Def {
		def := pivotDefinition()
		for i := range def.Steps {
			if def.Steps[i].Name == step {
				def.Steps[i].Deadline = d
			}
		}
		return mustBuild(t, def)
	}
}

func withDeadline(d time.Duration) func(testing.TB) *saga.Def {
	return func(t testing.TB) *saga.Def {
		def := pivotDefinition()
		def.Deadline = d
		return mustBuild(t, def)
	}
}

func TestDecideTransitions(t *testing.T) {
	t.Parallel()
	rows := []decideRow{
		// --- The docs/DESIGN.md table: before the pivot (step b). ---
		{name: "before pivot/success: next step", prep: toB, event: okEv("b"),
			wantState: saga.Running, wantSteps: "succeeded succeeded running pending pending",
			wantSend: []wantCmd{fwd("p", 1)}, wantWake: wakeIn(20 * time.Second), wantEvent: saga.JournalStepSucceeded,
			check: func(t *testing.T, h *harness, d saga.Decision) {
				if len(d.Settled) != 1 || d.Settled[0].Step != "b" || d.Settled[0].Outcome != message.Success || d.Settled[0].Duration != time.Second {
					t.Fatalf("Settled = %+v, want b forward success after 1s", d.Settled)
				}
				if h.in.CurrentStep() != "p" || h.in.Steps[2].AwaitID != h.in.CommandID("p", message.Forward, 1) {
					t.Fatalf("current step %q awaiting %s, want p attempt 1", h.in.CurrentStep(), h.in.Steps[2].AwaitID)
				}
			}},
		{name: "before pivot/failure: compensate done steps in reverse", prep: toB, event: failEv("b"),
			wantState: saga.Compensating, wantSteps: "compensating failed pending pending pending",
			wantSend: []wantCmd{comp("a", 1)}, wantWake: wakeIn(10 * time.Second), wantEvent: saga.JournalStepFailed,
			check: func(t *testing.T, h *harness, d saga.Decision) {
				if d.Journal[0].Reason != "because failure" || h.in.Steps[1].LastError != "because failure" {
					t.Fatalf("failure reason not kept: journal %q, step %q", d.Journal[0].Reason, h.in.Steps[1].LastError)
				}
			}},
		{name: "before pivot/failure then compensation: compensated", prep: then(toB, doFail("b")), event: answerEv("a", message.Compensate, message.Success),
			wantState: saga.Compensated, wantSteps: "compensated failed pending pending pending",
			wantWake: noWake, wantEvent: saga.JournalCompensated,
			check: func(t *testing.T, h *harness, d saga.Decision) {
				if h.in.FinishedAt == nil || !h.in.FinishedAt.Equal(h.now) {
					t.Fatalf("FinishedAt %v, want %s", h.in.FinishedAt, h.now)
				}
			}},
		{name: "before pivot/retry reply: re-send with backoff", prep: toB, event: retryEv("b"),
			wantState: saga.Running, wantSteps: "succeeded retrying pending pending pending",
			wantWake: backoffWake("b", 1), wantEvent: saga.JournalRetryAnswer},
		{name: "before pivot/retry backoff due: re-sent as attempt 2", prep: then(toB, doRetry("b")), event: fireEv,
			wantState: saga.Running, wantSteps: "succeeded running pending pending pending",
			wantSend: []wantCmd{fwd("b", 2)}, wantWake: awaitWake("b", 2), wantEvent: saga.JournalResent},
		// DESIGN says "after max attempts treat as failure"; Decide is
		// stricter and compensates the step too (a duplicate of an earlier
		// send may still execute, the barrier makes the compensation safe).
		{name: "before pivot/retry reply at max attempts: compensate it and the done ones",
			prep: then(toB, doRetry("b"), doFire, doRetry("b"), doFire), event: retryEv("b"),
			wantState: saga.Compensating, wantSteps: "succeeded compensating pending pending pending",
			wantSend: []wantCmd{comp("b", 1)}, wantWake: wakeIn(10 * time.Second), wantEvent: saga.JournalRetryAnswer},
		// Retry answers count against MaxAttempts (3), timeouts do not: 4
		// sends, the 3rd retry answer gives up.
		{name: "before pivot/retry answers count, timeouts do not",
			prep: then(toB, doFire, doFire, doRetry("b"), doFire, doRetry("b"), doFire), event: retryEv("b"),
			wantState: saga.Compensating, wantSteps: "succeeded compensating pending pending pending",
			wantSend: []wantCmd{comp("b", 1)}, wantWake: wakeIn(10 * time.Second), wantEvent: saga.JournalRetryAnswer,
			check: func(t *testing.T, h *harness, d saga.Decision) {
				if s := h.in.Steps[1]; s.Attempts != 4 || s.RetryAnswers != 3 || !strings.Contains(s.LastError, "answered retry 3 times") {
					t.Fatalf("b: attempts %d retry answers %d last error %q; want 4, 3, given up for its retry answers", s.Attempts, s.RetryAnswers, s.LastError)
				}
			}},
		// DESIGN: timeout = outcome unknown: re-send the same action
		// (idempotent at the barrier) with backoff until the deadline.
		{name: "before pivot/timeout: outcome unknown, re-send after backoff", prep: toB, event: fireEv,
			wantState: saga.Running, wantSteps: "succeeded retrying pending pending pending",
			wantWake: backoffWake("b", 1), wantEvent: saga.JournalTimeout,
			check: func(t *testing.T, h *harness, d saga.Decision) {
				if s := h.in.Steps[1]; s.RetryAnswers != 0 || s.AwaitID != h.in.CommandID("b", message.Forward, 1) {
					t.Fatalf("b after a timeout: %+v; want no retry answer counted, still awaiting attempt 1", s)
				}
			}},
		{name: "before pivot/timeout backoff due: the same action re-sent as attempt 2", prep: then(toB, doFire), event: fireEv,
			wantState: saga.Running, wantSteps: "succeeded running pending pending pending",
			wantSend: []wantCmd{fwd("b", 2)}, wantWake: awaitWake("b", 2), wantEvent: saga.JournalResent,
			check: func(t *testing.T, h *harness, d saga.Decision) {
				if string(d.Send[0].Command.Payload) != string(h.cmd("b", message.Forward, 1).Payload) {
					t.Fatalf("re-send payload %s differs from the first send's %s", d.Send[0].Command.Payload, h.cmd("b", message.Forward, 1).Payload)
				}
			}},
		{name: "before pivot/timeouts alone do not exhaust MaxAttempts", prep: then(toB, doFire, doFire, doFire, doFire, doFire, doFire), event: fireEv,
			wantState: saga.Running, wantSteps: "succeeded retrying pending pending pending",
			wantWake: backoffWake("b", 4), wantEvent: saga.JournalTimeout},
		{name: "before pivot/step deadline: give up, compensate that step too", def: withStepDeadline("b", 40*time.Second),
			prep: then(toB, fireToDeadline("b")), event: fireEv,
			wantState: saga.Compensating, wantSteps: "succeeded compensating pending pending pending",
			wantSend: []wantCmd{comp("b", 1)}, wantWake: wakeIn(10 * time.Second), wantEvent: saga.JournalTimeout,
			check: func(t *testing.T, h *harness, d saga.Decision) {
				if want := h.in.Steps[1].StartedAt.Add(40 * time.Second); !h.now.Equal(want) {
					t.Fatalf("given up at %s, want its deadline %s", h.now, want)
				}
				if s := h.in.Steps[1]; s.Attempts < 3 || !strings.Contains(s.LastError, "deadline") {
					t.Fatalf("b: %d sends, last error %q; want several sends, given up for its deadline", s.Attempts, s.LastError)
				}
			}},
		{name: "before pivot/default step deadline: give up at it", prep: then(toB, fireToDeadline("b")), event: fireEv,
			wantState: saga.Compensating, wantSteps: "succeeded compensating pending pending pending",
			wantSend: []wantCmd{comp("b", 1)}, wantWake: wakeIn(10 * time.Second), wantEvent: saga.JournalTimeout,
			check: func(t *testing.T, h *harness, d saga.Decision) {
				if want := h.in.Steps[1].StartedAt.Add(saga.StepDeadlineDefault); !h.now.Equal(want) {
					t.Fatalf("given up at %s, want the default deadline %s", h.now, want)
				}
			}},
		{name: "before pivot/timeout then compensations: reverse order", def: withStepDeadline("b", 10*time.Second),
			prep: then(toB, doFire), event: answerEv("b", message.Compensate, message.Success),
			wantState: saga.Compensating, wantSteps: "compensating compensated pending pending pending",
			wantSend: []wantCmd{comp("a", 1)}, wantWake: wakeIn(10 * time.Second), wantEvent: saga.JournalCompensated},
		// Only the latest send of the awaited action is answered: a
		// definite answer to it is taken while the step waits for the
		// backoff too; an answer to an earlier send is ignored, whatever
		// it says (the barrier, keyed by (saga, step, action), answers the
		// latest send with the same outcome; a forged reply from a seen id
		// is not taken).
		{name: "before pivot/success of the timed-out latest send taken while retrying", prep: then(toB, doFire),
			event:     func(h *harness) saga.Event { return h.answerEv("b", message.Forward, 1, message.Success) },
			wantState: saga.Running, wantSteps: "succeeded succeeded running pending pending",
			wantSend: []wantCmd{fwd("p", 1)}, wantWake: wakeIn(20 * time.Second), wantEvent: saga.JournalStepSucceeded},
		{name: "before pivot/success of an earlier send while the re-send runs: ignored", prep: then(toB, doFire, doFire, doFire, doFire),
			event:     func(h *harness) saga.Event { return h.answerEv("b", message.Forward, 1, message.Success) },
			wantState: saga.Running, wantSteps: "succeeded running pending pending pending",
			wantWake: unchangedWake, wantEvent: saga.JournalLate, wantIgnored: true, wantLate: true,
			check: func(t *testing.T, h *harness, d saga.Decision) {
				if !strings.Contains(d.Journal[0].Reason, "answers attempt 1; the saga awaits attempt 3") {
					t.Fatalf("journal reason %q does not name the attempts", d.Journal[0].Reason)
				}
			}},
		{name: "before pivot/failure of an earlier send: ignored", prep: then(toB, doFire, doFire),
			event:     func(h *harness) saga.Event { return h.answerEv("b", message.Forward, 1, message.Failure) },
			wantState: saga.Running, wantSteps: "succeeded running pending pending pending",
			wantWake: unchangedWake, wantEvent: saga.JournalLate, wantIgnored: true, wantLate: true},
		{name: "before pivot/failure of the latest send taken", prep: then(toB, doFire, doFire),
			event:     func(h *harness) saga.Event { return h.answerEv("b", message.Forward, 2, message.Failure) },
			wantState: saga.Compensating, wantSteps: "compensating failed pending pending pending",
			wantSend: []wantCmd{comp("a", 1)}, wantWake: wakeIn(10 * time.Second), wantEvent: saga.JournalStepFailed},
		{name: "before pivot/retry answer to an earlier send: ignored", prep: then(toB, doFire, doFire),
			event:     func(h *harness) saga.Event { return h.answerEv("b", message.Forward, 1, message.Retry) },
			wantState: saga.Running, wantSteps: "succeeded running pending pending pending",
			wantWake: unchangedWake, wantEvent: saga.JournalLate, wantIgnored: true, wantLate: true},
		{name: "before pivot/retry answer to the timed-out send while retrying: ignored", prep: then(toB, doFire),
			event:     func(h *harness) saga.Event { return h.answerEv("b", message.Forward, 1, message.Retry) },
			wantState: saga.Running, wantSteps: "succeeded retrying pending pending pending",
			wantWake: unchangedWake, wantEvent: saga.JournalLate, wantIgnored: true, wantLate: true},
		{name: "before pivot/late reply: success after the step failed", prep: then(toB, doFail("b")),
			event:     func(h *harness) saga.Event { return h.answerEv("b", message.Forward, 1, message.Success) },
			wantState: saga.Compensating, wantSteps: "compensating failed pending pending pending",
			wantWake: unchangedWake, wantEvent: saga.JournalLate, wantIgnored: true, wantLate: true},
		{name: "before pivot/late reply: duplicate success", prep: then(toB, func(h *harness) { h.ok("b") }), event: replayEv,
			wantState: saga.Running, wantSteps: "succeeded succeeded running pending pending",
			wantWake: unchangedWake, wantEvent: saga.JournalLate, wantIgnored: true, wantLate: true},

		// --- The pivot (step p). ---
		{name: "pivot/success: next step, no way back", def: withDeadline(time.Hour), prep: toP, event: okEv("p"),
			wantState: saga.Running, wantSteps: "succeeded succeeded succeeded running pending",
			wantSend: []wantCmd{fwd("r1", 1)}, wantWake: wakeIn(15 * time.Second), wantEvent: saga.JournalStepSucceeded,
			check: func(t *testing.T, h *harness, d saga.Decision) {
				if h.in.DeadlineAt != nil {
					t.Fatalf("pre-pivot deadline %v still set after the pivot succeeded", h.in.DeadlineAt)
				}
			}},
		{name: "pivot/failure: compensate steps before it", prep: toP, event: failEv("p"),
			wantState: saga.Compensating, wantSteps: "succeeded compensating failed pending pending",
			wantSend: []wantCmd{comp("b", 1)}, wantWake: wakeIn(10 * time.Second), wantEvent: saga.JournalStepFailed},
		{name: "pivot/retry reply: re-send with backoff", prep: toP, event: retryEv("p"),
			wantState: saga.Running, wantSteps: "succeeded succeeded retrying pending pending",
			wantWake: backoffWake("p", 1), wantEvent: saga.JournalRetryAnswer},
		{name: "pivot/retry reply at max attempts: failed, not compensated",
			prep: then(toP, doRetry("p"), doFire, doRetry("p"), doFire), event: retryEv("p"),
			wantState: saga.Failed, wantSteps: "succeeded succeeded unknown pending pending",
			wantWake: noWake, wantEvent: saga.JournalRetryAnswer},
		{name: "pivot/timeout: re-send after backoff", prep: toP, event: fireEv,
			wantState: saga.Running, wantSteps: "succeeded succeeded retrying pending pending",
			wantWake: backoffWake("p", 1), wantEvent: saga.JournalTimeout},
		{name: "pivot/timeout backoff due: re-sent as attempt 2", prep: then(toP, doFire), event: fireEv,
			wantState: saga.Running, wantSteps: "succeeded succeeded running pending pending",
			wantSend: []wantCmd{fwd("p", 2)}, wantWake: awaitWake("p", 2), wantEvent: saga.JournalResent},
		{name: "pivot/timeouts alone do not exhaust MaxAttempts",
			prep: then(toP, doFire, doFire, doFire, doFire, doFire, doFire), event: fireEv,
			wantState: saga.Running, wantSteps: "succeeded succeeded retrying pending pending",
			wantWake: backoffWake("p", 4), wantEvent: saga.JournalTimeout},
		{name: "pivot/default deadline: failed, never compensated", prep: then(toP, fireToDeadline("p")), event: fireEv,
			wantState: saga.Failed, wantSteps: "succeeded succeeded unknown pending pending",
			wantWake: noWake, wantEvent: saga.JournalTimeout,
			check: func(t *testing.T, h *harness, d saga.Decision) {
				if want := h.in.Steps[2].StartedAt.Add(saga.PivotDeadlineDefault); !h.now.Equal(want) {
					t.Fatalf("failed at %s, want the pivot's default deadline %s", h.now, want)
				}
				if h.in.Steps[2].Attempts <= 3 {
					t.Fatalf("pivot attempts %d: want more than MaxAttempts (3), timeouts do not count", h.in.Steps[2].Attempts)
				}
				for _, c := range h.sent {
					if c.Action == message.Compensate {
						t.Fatalf("a compensation was sent around an unknown pivot: %+v", c)
					}
				}
				if !strings.Contains(d.Journal[0].Reason, "operator") {
					t.Fatalf("journal reason %q does not say an operator must resolve it", d.Journal[0].Reason)
				}
			}},
		{name: "pivot/success of an earlier send while retrying: ignored", prep: then(toP, doFire, doFire, doFire),
			event:     func(h *harness) saga.Event { return h.answerEv("p", message.Forward, 1, message.Success) },
			wantState: saga.Running, wantSteps: "succeeded succeeded retrying pending pending",
			wantWake: unchangedWake, wantEvent: saga.JournalLate, wantIgnored: true, wantLate: true},
		{name: "pivot/success of the latest send taken while retrying", prep: then(toP, doFire, doFire, doFire),
			event:     func(h *harness) saga.Event { return h.answerEv("p", message.Forward, 2, message.Success) },
			wantState: saga.Running, wantSteps: "succeeded succeeded succeeded running pending",
			wantSend: []wantCmd{fwd("r1", 1)}, wantWake: wakeIn(15 * time.Second), wantEvent: saga.JournalStepSucceeded},
		{name: "pivot/timeout past its deadline: failed",
			def: func(t testing.TB) *saga.Def {
				d := pivotDefinition()
				d.Steps[2].Deadline = 30 * time.Second
				d.Steps[2].Retry.MaxAttempts = 10
				return mustBuild(t, d)
			},
			prep: then(toP, doFire, doFire), event: fireEv,
			wantState: saga.Failed, wantSteps: "succeeded succeeded unknown pending pending",
			wantWake: noWake, wantEvent: saga.JournalTimeout,
			check: func(t *testing.T, h *harness, d saga.Decision) {
				// Sent at T0+2s: the 2nd send's wait is cut at the deadline.
				if !h.now.Equal(testT0.Add(32 * time.Second)) {
					t.Fatalf("failed at %s, want the deadline T0+32s", h.now)
				}
			}},
		{name: "pivot/late reply: duplicate success", prep: then(toP, func(h *harness) { h.ok("p") }), event: replayEv,
			wantState: saga.Running, wantSteps: "succeeded succeeded succeeded running pending",
			wantWake: unchangedWake, wantEvent: saga.JournalLate, wantIgnored: true, wantLate: true},
		{name: "pivot/late reply: failure after the pivot succeeded", prep: then(toP, func(h *harness) { h.ok("p") }), event: failEv("p"),
			wantState: saga.Running, wantSteps: "succeeded succeeded succeeded running pending",
			wantWake: unchangedWake, wantEvent: saga.JournalLate, wantIgnored: true, wantLate: true},

		// --- After the pivot (r1, r2). ---
		{name: "after pivot/success: next step", prep: toR1, event: okEv("r1"),
			wantState: saga.Running, wantSteps: "succeeded succeeded succeeded succeeded running",
			wantSend: []wantCmd{fwd("r2", 1)}, wantWake: wakeIn(15 * time.Second), wantEvent: saga.JournalStepSucceeded},
		{name: "after pivot/success of the last step: completed", prep: toR2, event: okEv("r2"),
			wantState: saga.Completed, wantSteps: "succeeded succeeded succeeded succeeded succeeded",
			wantWake: noWake, wantEvent: saga.JournalStepSucceeded,
			check: func(t *testing.T, h *harness, d saga.Decision) {
				if h.in.FinishedAt == nil || !h.in.FinishedAt.Equal(h.now) || h.in.CurrentStep() != "" {
					t.Fatalf("completed saga: FinishedAt %v, current step %q", h.in.FinishedAt, h.in.CurrentStep())
				}
			}},
		{name: "after pivot/failure: definition error, failed", prep: toR1, event: failEv("r1"),
			wantState: saga.Failed, wantSteps: "succeeded succeeded succeeded failed pending",
			wantWake: noWake, wantEvent: saga.JournalStepFailed,
			check: func(t *testing.T, h *harness, d saga.Decision) {
				if !strings.Contains(d.Journal[0].Reason, "after the pivot") {
					t.Fatalf("journal reason %q does not explain the post-pivot failure", d.Journal[0].Reason)
				}
			}},
		{name: "after pivot/retry reply: re-send with backoff", prep: toR1, event: retryEv("r1"),
			wantState: saga.Running, wantSteps: "succeeded succeeded succeeded retrying pending",
			wantWake: backoffWake("r1", 1), wantEvent: saga.JournalRetryAnswer},
		{name: "after pivot/retry reply at max attempts: flagged, keeps retrying",
			prep: then(toR1, doRetry("r1"), doFire, doRetry("r1"), doFire), event: retryEv("r1"),
			wantState: saga.Running, wantSteps: "succeeded succeeded succeeded retrying pending",
			wantWake: backoffWake("r1", 3), wantFlag: true, wantEvent: saga.JournalRetryAnswer},
		{name: "after pivot/flagged step is still re-sent",
			prep: then(toR1, doRetry("r1"), doFire, doRetry("r1"), doFire, doRetry("r1")), event: fireEv,
			wantState: saga.Running, wantSteps: "succeeded succeeded succeeded running pending",
			wantSend: []wantCmd{fwd("r1", 4)}, wantWake: awaitWake("r1", 4), wantFlag: true, wantEvent: saga.JournalResent},
		{name: "after pivot/timeout: re-send with backoff", prep: toR1, event: fireEv,
			wantState: saga.Running, wantSteps: "succeeded succeeded succeeded retrying pending",
			wantWake: backoffWake("r1", 1), wantEvent: saga.JournalTimeout},
		{name: "after pivot/no deadline: still re-sent long after any default",
			prep: fireUntil(func(h *harness) bool {
				if h.in.Cursor < 3 {
					toR1(h)
				}
				s := h.in.Steps[3]
				return s.State == saga.StepRunning && h.now.Sub(*s.StartedAt) > saga.PivotDeadlineDefault+time.Minute
			}), event: fireEv,
			wantState: saga.Running, wantSteps: "succeeded succeeded succeeded retrying pending",
			wantWake: func(h *harness, prev saga.Instance) (time.Time, time.Time) {
				return backoffWake("r1", h.in.Steps[3].Attempts)(h, prev)
			}, wantFlag: true, wantEvent: saga.JournalTimeout},
		{name: "after pivot/late reply: retry answer to an earlier send", prep: then(toR1, doRetry("r1"), doFire),
			event:     func(h *harness) saga.Event { return h.answerEv("r1", message.Forward, 1, message.Retry) },
			wantState: saga.Running, wantSteps: "succeeded succeeded succeeded running pending",
			wantWake: unchangedWake, wantEvent: saga.JournalLate, wantIgnored: true, wantLate: true},
		{name: "after pivot/success answering an earlier send: ignored", prep: then(toR1, doRetry("r1"), doFire),
			event:     func(h *harness) saga.Event { return h.answerEv("r1", message.Forward, 1, message.Success) },
			wantState: saga.Running, wantSteps: "succeeded succeeded succeeded running pending",
			wantWake: unchangedWake, wantEvent: saga.JournalLate, wantIgnored: true, wantLate: true},
		{name: "after pivot/success answering the latest send is taken", prep: then(toR1, doRetry("r1"), doFire),
			event:     func(h *harness) saga.Event { return h.answerEv("r1", message.Forward, 2, message.Success) },
			wantState: saga.Running, wantSteps: "succeeded succeeded succeeded succeeded running",
			wantSend: []wantCmd{fwd("r2", 1)}, wantWake: wakeIn(15 * time.Second), wantEvent: saga.JournalStepSucceeded},

		// --- Compensation (3-step saga without pivot). ---
		{name: "compensation success continues in reverse order", def: noPivotDef, prep: toCompY,
			event:     answerEv("y", message.Compensate, message.Success),
			wantState: saga.Compensating, wantSteps: "compensating compensated failed",
			wantSend: []wantCmd{comp("x", 1)}, wantWake: wakeIn(5 * time.Second), wantEvent: saga.JournalCompensated},
		{name: "last compensation: compensated", def: noPivotDef,
			prep:      then(toCompY, func(h *harness) { h.answer("y", message.Compensate, message.Success) }),
			event:     answerEv("x", message.Compensate, message.Success),
			wantState: saga.Compensated, wantSteps: "compensated compensated failed", wantWake: noWake, wantEvent: saga.JournalCompensated},
		{name: "first step fails: compensated, nothing to undo", def: noPivotDef, prep: func(h *harness) { h.start() }, event: failEv("x"),
			wantState: saga.Compensated, wantSteps: "failed pending pending", wantWake: noWake, wantEvent: saga.JournalStepFailed},
		{name: "compensation failure: compensation_retrying with backoff", def: noPivotDef, prep: toCompY,
			event:     answerEv("y", message.Compensate, message.Failure),
			wantState: saga.Compensating, wantSteps: "succeeded compensation_retrying failed",
			wantWake: jitteredWake("y", 1), wantEvent: saga.JournalCompensationBusy},
		{name: "compensation retry reply: compensation_retrying with backoff", def: noPivotDef, prep: toCompY,
			event:     answerEv("y", message.Compensate, message.Retry),
			wantState: saga.Compensating, wantSteps: "succeeded compensation_retrying failed",
			wantWake: jitteredWake("y", 1), wantEvent: saga.JournalCompensationBusy},
		{name: "timer on compensating: timeout, retry later", def: noPivotDef, prep: toCompY, event: fireEv,
			wantState: saga.Compensating, wantSteps: "succeeded compensation_retrying failed",
			wantWake: jitteredWake("y", 1), wantEvent: saga.JournalTimeout},
		{name: "timer on compensation_retrying: re-sent", def: noPivotDef, prep: then(toCompY, doCompFail("y")), event: fireEv,
			wantState: saga.Compensating, wantSteps: "succeeded compensating failed",
			wantSend: []wantCmd{comp("y", 2)}, wantWake: compAwaitWake("y", 2), wantEvent: saga.JournalResent},
		{name: "compensation flagged after CompRetry.MaxAttempts", def: noPivotDef, prep: then(toCompY, doCompFail("y"), doFire),
			event:     answerEv("y", message.Compensate, message.Failure),
			wantState: saga.Compensating, wantSteps: "succeeded compensation_retrying failed",
			wantWake: jitteredWake("y", 2), wantFlag: true, wantEvent: saga.JournalCompensationBusy},
		{name: "flagged compensation keeps retrying", def: noPivotDef, prep: then(toCompY, doCompFail("y"), doFire, doCompFail("y")), event: fireEv,
			wantState: saga.Compensating, wantSteps: "succeeded compensating failed",
			wantSend: []wantCmd{comp("y", 3)}, wantWake: compAwaitWake("y", 3), wantFlag: true, wantEvent: saga.JournalResent},
		{name: "compensation answer to an earlier send: late", def: noPivotDef, prep: then(toCompY, doCompFail("y"), doFire),
			event:     func(h *harness) saga.Event { return h.answerEv("y", message.Compensate, 1, message.Failure) },
			wantState: saga.Compensating, wantSteps: "succeeded compensating failed",
			wantWake: unchangedWake, wantEvent: saga.JournalLate, wantIgnored: true, wantLate: true},
		{name: "compensation success answering an earlier send: ignored", def: noPivotDef, prep: then(toCompY, doCompFail("y"), doFire),
			event:     func(h *harness) saga.Event { return h.answerEv("y", message.Compensate, 1, message.Success) },
			wantState: saga.Compensating, wantSteps: "succeeded compensating failed",
			wantWake: unchangedWake, wantEvent: saga.JournalLate, wantIgnored: true, wantLate: true},
		{name: "compensation success answering the latest send is taken", def: noPivotDef, prep: then(toCompY, doCompFail("y"), doFire),
			event:     func(h *harness) saga.Event { return h.answerEv("y", message.Compensate, 2, message.Success) },
			wantState: saga.Compensating, wantSteps: "compensating compensated failed",
			wantSend: []wantCmd{comp("x", 1)}, wantWake: wakeIn(5 * time.Second), wantEvent: saga.JournalCompensated},

		// --- Saga deadline. ---
		{name: "pre-pivot saga deadline: compensate, running step included", def: withDeadline(5 * time.Second), prep: toB, event: fireEv,
			wantState: saga.Compensating, wantSteps: "succeeded compensating pending pending pending",
			wantSend: []wantCmd{comp("b", 1)}, wantWake: wakeIn(10 * time.Second), wantEvent: saga.JournalDeadline,
			check: func(t *testing.T, h *harness, d saga.Decision) {
				if !h.now.Equal(testT0.Add(5*time.Second)) || h.in.DeadlineAt != nil {
					t.Fatalf("deadline fired at %s (want T0+5s), DeadlineAt now %v", h.now, h.in.DeadlineAt)
				}
			}},
		{name: "saga deadline on a retrying step: compensate it", def: withDeadline(5 * time.Second), prep: then(toB, doRetry("b"), doFire, doRetry("b")),
			event: func(h *harness) saga.Event {
				h.now = testT0.Add(5 * time.Second)
				return saga.Event{Kind: saga.EventTimer, At: h.now}
			},
			wantState: saga.Compensating, wantSteps: "succeeded compensating pending pending pending",
			wantSend: []wantCmd{comp("b", 1)}, wantWake: wakeIn(10 * time.Second), wantEvent: saga.JournalDeadline},
		{name: "no-pivot saga deadline applies at the last step", def: func(t testing.TB) *saga.Def {
			d := noPivotDefinition()
			d.Deadline = 3 * time.Second
			return mustBuild(t, d)
		}, prep: func(h *harness) { h.start(); h.ok("x"); h.ok("y") }, event: fireEv,
			wantState: saga.Compensating, wantSteps: "succeeded succeeded compensating",
			wantSend: []wantCmd{comp("z", 1)}, wantWake: wakeIn(5 * time.Second), wantEvent: saga.JournalDeadline},
		{name: "timer before anything is due: nothing", prep: toB,
			event:     func(h *harness) saga.Event { h.tick(time.Second); return saga.Event{Kind: saga.EventTimer, At: h.now} },
			wantState: saga.Running, wantSteps: "succeeded running pending pending pending", wantWake: unchangedWake},

		// --- Illegal, unknown and terminal. ---
		{name: "reply naming an unknown step", prep: toB,
			event: func(h *harness) saga.Event {
				r := h.replyTo(h.cmd("b", message.Forward, 0), message.Success)
				r.Step = "zz"
				return h.replyEv(r)
			}, wantErr: saga.ErrUnknownStep},
		{name: "reply to a command never sent: stray, sent to the DLQ", prep: toB,
			event: func(h *harness) saga.Event {
				r := h.replyTo(h.cmd("b", message.Forward, 0), message.Success)
				r.InReplyTo = uuid.NewSHA1(uuid.NameSpaceOID, []byte("never sent"))
				return h.replyEv(r)
			},
			wantErr: saga.ErrStrayReply},
		{name: "reply to an attempt not sent yet: stray, sent to the DLQ", prep: toB,
			event: func(h *harness) saga.Event {
				r := h.replyTo(h.cmd("b", message.Forward, 0), message.Success)
				r.InReplyTo = h.in.CommandID("b", message.Forward, 2)
				return h.replyEv(r)
			},
			wantErr: saga.ErrStrayReply},
		{name: "compensate answer for a step never compensated: stray, sent to the DLQ", prep: toB,
			event: func(h *harness) saga.Event {
				r := h.replyTo(h.cmd("a", message.Forward, 0), message.Success)
				r.Action = message.Compensate
				return h.replyEv(r)
			},
			wantErr: saga.ErrStrayReply},
		{name: "second start: illegal", prep: toB, event: func(h *harness) saga.Event { return saga.Event{Kind: saga.EventStart, At: h.now} },
			wantState: saga.Running, wantSteps: "succeeded running pending pending pending",
			wantWake: unchangedWake, wantEvent: saga.JournalIllegal, wantIgnored: true, wantIllegal: true},
		{name: "terminal completed: duplicate last reply is late", prep: then(toR2, func(h *harness) { h.ok("r2") }), event: replayEv,
			wantState: saga.Completed, wantSteps: "succeeded succeeded succeeded succeeded succeeded",
			wantWake: noWake, wantEvent: saga.JournalLate, wantIgnored: true, wantLate: true},
		{name: "terminal completed: timer does nothing", prep: then(toR2, func(h *harness) { h.ok("r2") }),
			event:     func(h *harness) saga.Event { h.tick(time.Hour); return saga.Event{Kind: saga.EventTimer, At: h.now} },
			wantState: saga.Completed, wantSteps: "succeeded succeeded succeeded succeeded succeeded", wantWake: noWake},
		{name: "terminal failed: retry reply is late", prep: then(toR1, doFail("r1")), event: retryEv("r1"),
			wantState: saga.Failed, wantSteps: "succeeded succeeded succeeded failed pending",
			wantWake: noWake, wantEvent: saga.JournalLate, wantIgnored: true, wantLate: true},
		{name: "terminal failed: timer does nothing", prep: then(toP, fireUntil(untilTerminal)),
			event:     func(h *harness) saga.Event { h.tick(time.Hour); return saga.Event{Kind: saga.EventTimer, At: h.now} },
			wantState: saga.Failed, wantSteps: "succeeded succeeded unknown pending pending", wantWake: noWake},
		{name: "terminal compensated: old forward success is late", def: noPivotDef,
			prep: then(toCompY, func(h *harness) {
				h.answer("y", message.Compensate, message.Success)
				h.answer("x", message.Compensate, message.Success)
			}),
			event:     func(h *harness) saga.Event { return h.answerEv("z", message.Forward, 1, message.Success) },
			wantState: saga.Compensated, wantSteps: "compensated compensated failed",
			wantWake: noWake, wantEvent: saga.JournalLate, wantIgnored: true, wantLate: true},

		// --- Operator actions. ---
		{name: "operator retry from retrying: sent now", prep: then(toB, doRetry("b")), event: opEv(saga.ActionRetry, ""),
			wantState: saga.Running, wantSteps: "succeeded running pending pending pending",
			wantSend: []wantCmd{fwd("b", 2)}, wantWake: awaitWake("b", 2), wantEvent: saga.JournalOperator + "retry"},
		{name: "operator retry from post-pivot retrying: sent now", prep: then(toR1, doRetry("r1")), event: opEv(saga.ActionRetry, ""),
			wantState: saga.Running, wantSteps: "succeeded succeeded succeeded running pending",
			wantSend: []wantCmd{fwd("r1", 2)}, wantWake: awaitWake("r1", 2), wantEvent: saga.JournalOperator + "retry"},
		{name: "operator retry from compensation_retrying: sent now", def: noPivotDef, prep: then(toCompY, doCompFail("y")), event: opEv(saga.ActionRetry, ""),
			wantState: saga.Compensating, wantSteps: "succeeded compensating failed",
			wantSend: []wantCmd{comp("y", 2)}, wantWake: compAwaitWake("y", 2), wantEvent: saga.JournalOperator + "retry"},
		{name: "operator retry on a terminal saga: refused", prep: then(toR1, doFail("r1")), event: opEv(saga.ActionRetry, ""), wantErr: saga.ErrRefused},
		{name: "operator compensate before the pivot", prep: toB, event: opEv(saga.ActionCompensate, ""),
			wantState: saga.Compensating, wantSteps: "succeeded compensating pending pending pending",
			wantSend: []wantCmd{comp("b", 1)}, wantWake: wakeIn(10 * time.Second), wantEvent: saga.JournalOperator + "compensate"},
		{name: "operator compensate at the pivot: refused", prep: toP, event: opEv(saga.ActionCompensate, ""), wantErr: saga.ErrRefused},
		{name: "operator compensate after the pivot: refused", prep: toR1, event: opEv(saga.ActionCompensate, ""), wantErr: saga.ErrRefused},
		{name: "operator compensate while compensating: refused", prep: then(toB, doFail("b")), event: opEv(saga.ActionCompensate, ""), wantErr: saga.ErrRefused},
		{name: "operator compensate on a compensated saga: refused", def: noPivotDef, prep: func(h *harness) { h.start(); doFail("x")(h) },
			event: opEv(saga.ActionCompensate, ""), wantErr: saga.ErrRefused},
		{name: "operator without actor: refused", prep: then(toB, doRetry("b")),
			event: func(h *harness) saga.Event { ev := h.opEv(saga.ActionRetry, ""); ev.Operator.Actor = ""; return ev }, wantErr: saga.ErrRefused},
		{name: "operator without reason: refused", prep: toB,
			event: func(h *harness) saga.Event {
				ev := h.opEv(saga.ActionCompensate, "")
				ev.Operator.Reason = ""
				return ev
			}, wantErr: saga.ErrRefused},
		{name: "operator unknown action: refused", prep: toB, event: opEv("delete", ""), wantErr: saga.ErrRefused},
		{name: "operator resolve failed as completed", prep: then(toR1, doRetry("r1"), doFire, doRetry("r1"), doFire, doRetry("r1"), doFire, doFail("r1")),
			event:     opEv(saga.ActionResolve, saga.Completed),
			wantState: saga.Completed, wantSteps: "succeeded succeeded succeeded failed pending",
			wantWake: noWake, wantEvent: saga.JournalOperator + "resolve",
			check: func(t *testing.T, h *harness, d saga.Decision) {
				if h.in.Flag != "" {
					t.Fatalf("resolve kept the flag %q", h.in.Flag)
				}
			}},
		{name: "operator resolve failed as compensated", prep: then(toP, fireUntil(untilTerminal)), event: opEv(saga.ActionResolve, saga.Compensated),
			wantState: saga.Compensated, wantSteps: "succeeded succeeded unknown pending pending",
			wantWake: noWake, wantEvent: saga.JournalOperator + "resolve"},
		{name: "operator resolve with outcome failed: refused", prep: then(toR1, doFail("r1")), event: opEv(saga.ActionResolve, saga.Failed), wantErr: saga.ErrRefused},
		{name: "operator resolve a running saga: refused", prep: toB, event: opEv(saga.ActionResolve, saga.Completed), wantErr: saga.ErrRefused},
		{name: "operator resolve a completed saga: refused", prep: then(toR2, func(h *harness) { h.ok("r2") }), event: opEv(saga.ActionResolve, saga.Compensated), wantErr: saga.ErrRefused},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			mk := row.def
			if mk == nil {
				mk = pivotDef
			}
			h := newHarness(t, mk(t), uuid.NewSHA1(uuid.NameSpaceURL, []byte(t.Name())))
			row.prep(h)
			prev := h.in
			sentBefore := len(h.sent)
			ev := row.event(h)
			d, err := h.decide(ev)
			if row.wantErr != nil {
				if !errors.Is(err, row.wantErr) {
					t.Fatalf("err = %v, want %v", err, row.wantErr)
				}
				var re *saga.RefusedError
				if errors.Is(row.wantErr, saga.ErrRefused) && (!errors.As(err, &re) || re.Action != ev.Operator.Action || re.Why == "") {
					t.Fatalf("refusal %v is not a *RefusedError naming the action and why", err)
				}
				if d.Changed || len(d.Send) != 0 || !reflect.DeepEqual(h.in, prev) {
					t.Fatalf("an error decision changed something: %+v", d)
				}
				return
			}
			if err != nil {
				t.Fatalf("decide: %v", err)
			}
			if h.in.State != row.wantState {
				t.Fatalf("state %s, want %s", h.in.State, row.wantState)
			}
			if got := h.stepStates(); got != row.wantSteps {
				t.Fatalf("steps\n got  %s\n want %s", got, row.wantSteps)
			}
			got := h.sent[sentBefore:]
			if len(got) != len(row.wantSend) {
				t.Fatalf("sent %d commands %+v, want %+v", len(got), got, row.wantSend)
			}
			for i, w := range row.wantSend {
				c, o := got[i], d.Send[i]
				if o.Participant != w.participant || c.Step != w.step || c.Action != w.action || c.Attempt != w.attempt {
					t.Fatalf("command %d = %s %s/%s attempt %d, want %+v", i, o.Participant, c.Step, c.Action, c.Attempt, w)
				}
				if c.MessageID != h.in.CommandID(w.step, w.action, w.attempt) {
					t.Fatalf("command %d id %s is not CommandID", i, c.MessageID)
				}
			}
			lo, hi := row.wantWake(h, prev)
			w := h.in.NextWakeup()
			switch {
			case lo.IsZero() && w != nil:
				t.Fatalf("NextWakeup %s, want none", w)
			case !lo.IsZero() && w == nil:
				t.Fatalf("NextWakeup none, want %s", lo)
			case w != nil && (w.Before(lo) || w.After(hi)):
				t.Fatalf("NextWakeup %s, want within [%s, %s] (event at %s)", w, lo, hi, h.now)
			}
			if (h.in.Flag != "") != row.wantFlag {
				t.Fatalf("flag %q, want flagged=%v", h.in.Flag, row.wantFlag)
			}
			if newly := row.wantFlag && prev.Flag == ""; d.Flagged != newly {
				t.Fatalf("Decision.Flagged %v, want %v (flag before %q, after %q)", d.Flagged, newly, prev.Flag, h.in.Flag)
			}
			if d.Late != row.wantLate || d.Illegal != row.wantIllegal {
				t.Fatalf("late=%v illegal=%v, want %v %v", d.Late, d.Illegal, row.wantLate, row.wantIllegal)
			}
			if row.wantEvent == "" {
				if d.Changed || len(d.Journal) != 0 {
					t.Fatalf("want nothing, got changed=%v journal %+v", d.Changed, d.Journal)
				}
			} else {
				if d.Changed == row.wantIgnored {
					t.Fatalf("changed=%v, want %v", d.Changed, !row.wantIgnored)
				}
				if prev.Version != 0 && d.Changed && h.in.Version != prev.Version+1 {
					t.Fatalf("version %d, want %d", h.in.Version, prev.Version+1)
				}
				if len(d.Journal) == 0 {
					t.Fatalf("no journal entry, want %q", row.wantEvent)
				}
				j := d.Journal[0]
				if j.Event != row.wantEvent || j.Ignored != row.wantIgnored {
					t.Fatalf("journal %+v, want event %q ignored=%v", j, row.wantEvent, row.wantIgnored)
				}
				if ev.Kind == saga.EventReply && (j.MessageID == nil || *j.MessageID != ev.Reply.MessageID || j.Step != ev.Reply.Step) {
					t.Fatalf("journal %+v does not name the reply %s and its step", j, ev.Reply.MessageID)
				}
				if ev.Kind == saga.EventOperator && (j.Actor != "alice" || j.Reason != "ticket-7") {
					t.Fatalf("operator journal %+v lacks actor and reason", j)
				}
				if ev.Kind != saga.EventOperator && j.Actor != "" {
					t.Fatalf("journal %+v has an actor for a %s event", j, ev.Kind)
				}
			}
			if row.check != nil {
				row.check(t, h, d)
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	p := saga.RetryPolicy{InitialInterval: 100 * time.Millisecond, MaxInterval: 5 * time.Second, Multiplier: 2, MaxAttempts: 5}
	for s := 0; s < 50; s++ {
		id := uuid.NewSHA1(uuid.NameSpaceOID, []byte(fmt.Sprint(s)))
		prev := time.Duration(0)
		for attempt := 1; attempt <= 40; attempt++ {
			got := saga.Backoff(p, id, "step", attempt)
			d := capped(p, attempt)
			if got < d/2 || got > d {
				t.Fatalf("saga %d attempt %d: backoff %s outside [%s, %s]", s, attempt, got, d/2, d)
			}
			if again := saga.Backoff(p, id, "step", attempt); again != got {
				t.Fatalf("backoff not deterministic: %s then %s", got, again)
			}
			if d < p.MaxInterval && got <= prev {
				t.Fatalf("saga %d attempt %d: backoff %s did not grow from %s", s, attempt, got, prev)
			}
			prev = got
		}
	}
	// The cap holds for huge attempt counts and multipliers (no overflow).
	huge := saga.RetryPolicy{InitialInterval: time.Second, MaxInterval: time.Minute, Multiplier: 1000}
	for _, attempt := range []int{1 << 10, 1 << 20, 1<<31 - 1} {
		if got := saga.Backoff(huge, uuid.Nil, "s", attempt); got <= 0 || got > time.Minute {
			t.Fatalf("attempt %d: backoff %s not within (0, 1m]", attempt, got)
		}
	}
	// Attempts below 1 count as the first.
	if got, first := saga.Backoff(p, uuid.Nil, "s", 0), saga.Backoff(p, uuid.Nil, "s", 1); got != first {
		t.Fatalf("attempt 0 backoff %s, want attempt 1's %s", got, first)
	}
	// Jitter differs between sagas (it spreads a thundering herd).
	seen := map[time.Duration]bool{}
	for s := 0; s < 20; s++ {
		seen[saga.Backoff(p, uuid.NewSHA1(uuid.NameSpaceDNS, []byte(fmt.Sprint(s))), "step", 3)] = true
	}
	if len(seen) < 5 {
		t.Fatalf("20 sagas got only %d distinct backoffs: jitter missing", len(seen))
	}
}

func TestDecideCommandIDs(t *testing.T) {
	t.Parallel()
	id := uuid.NewSHA1(uuid.NameSpaceOID, []byte("ids"))
	in := saga.Instance{ID: id, Secret: saga.NewSecret()}
	seen := map[uuid.UUID]string{}
	for _, step := range []string{"a", "b"} {
		for _, action := range []message.Action{message.Forward, message.Compensate} {
			for attempt := 1; attempt <= 3; attempt++ {
				key := fmt.Sprint(step, action, attempt)
				c := in.CommandID(step, action, attempt)
				if c != in.CommandID(step, action, attempt) {
					t.Fatalf("CommandID not deterministic for %s", key)
				}
				if other, dup := seen[c]; dup {
					t.Fatalf("CommandID collision: %s and %s", key, other)
				}
				seen[c] = key
			}
		}
	}
	other := in
	other.ID = uuid.NewSHA1(uuid.NameSpaceOID, []byte("other"))
	if in.CommandID("a", message.Forward, 1) == other.CommandID("a", message.Forward, 1) {
		t.Fatalf("CommandID ignores the saga id")
	}
}

func TestDecideRejectsMismatchedInputs(t *testing.T) {
	t.Parallel()
	def := pivotDef(t)
	h := newHarness(t, def, uuid.NewSHA1(uuid.NameSpaceOID, []byte("mismatch")))
	toB(h)
	other := noPivotDef(t)
	if _, err := saga.Decide(other, h.in, saga.Event{Kind: saga.EventTimer, At: h.now}); err == nil {
		t.Fatalf("Decide accepted an instance of another saga type")
	}
	if _, err := saga.Decide(nil, h.in, saga.Event{Kind: saga.EventTimer, At: h.now}); err == nil {
		t.Fatalf("Decide accepted a nil definition")
	}
	if _, err := saga.Decide(def, h.in, saga.Event{Kind: saga.EventReply, At: h.now}); err == nil {
		t.Fatalf("Decide accepted a reply event without reply")
	}
	if _, err := saga.Decide(def, h.in, saga.Event{Kind: saga.EventOperator, At: h.now}); err == nil {
		t.Fatalf("Decide accepted an operator event without operator")
	}
	if _, err := saga.Decide(def, h.in, saga.Event{Kind: "magic", At: h.now}); err == nil {
		t.Fatalf("Decide accepted an unknown event kind")
	}
	r := h.replyTo(h.cmd("b", message.Forward, 0), message.Success)
	r.SagaID = uuid.NewSHA1(uuid.NameSpaceOID, []byte("someone else"))
	if _, err := saga.Decide(def, h.in, h.replyEv(r)); err == nil || !strings.Contains(err.Error(), r.SagaID.String()) {
		t.Fatalf("Decide accepted a reply for another saga: %v", err)
	}
	r = h.replyTo(h.cmd("b", message.Forward, 0), "maybe")
	if _, err := saga.Decide(def, h.in, h.replyEv(r)); err == nil {
		t.Fatalf("Decide accepted an unknown outcome")
	}
	broken := h.in
	broken.Cursor = 17
	if _, err := saga.Decide(def, broken, saga.Event{Kind: saga.EventTimer, At: h.now}); err == nil {
		t.Fatalf("Decide accepted a cursor out of range")
	}
}

// TestDecideTimerAtNextWakeupMakesProgress: a timer fired at the wake-up
// time the instance itself asks for must do something; otherwise the
// engine, which writes nothing for an unchanged decision, keeps claiming
// the saga (next_wakeup_at stays in the past) in a hot loop.
//
// Regression test: the pre-pivot saga deadline used to stay set while the
// pivot was in flight, so NextWakeup returned the passed deadline, which
// timer() no longer acts on once the cursor is at the pivot. Fixed in
// a333fb7 (sendForward clears DeadlineAt when it sends the pivot).
func TestDecideTimerAtNextWakeupMakesProgress(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withDeadline(30*time.Second)(t), uuid.NewSHA1(uuid.NameSpaceOID, []byte("wakeup")))
	toP(h) // the pivot is sent at T0+2s, due at T0+22s; the deadline is T0+30s
	h.fire()
	if got := h.stepStates(); got != "succeeded succeeded retrying pending pending" {
		t.Fatalf("after the pivot's timeout: %s", got)
	}
	h.fire() // re-sent at ~T0+23s, due at ~T0+43s: past the saga deadline
	if h.in.Steps[2].State != saga.StepRunning || h.in.Steps[2].Attempts != 2 {
		t.Fatalf("pivot not re-sent: %+v", h.in.Steps[2])
	}
	w := h.in.NextWakeup()
	if w == nil {
		t.Fatalf("no wake-up for a running saga")
	}
	d := h.fire()
	if !d.Changed {
		t.Errorf("timer at NextWakeup %s (saga deadline %v, pivot due %v) changed nothing: "+
			"the pre-pivot deadline must not be a wake-up once the pivot was sent", w, h.in.DeadlineAt, h.in.Steps[2].DueAt)
	}
}

// TestDecideOperatorBeforeStart: operator actions on an instance that was
// created but not started (NewInstance, Cursor -1) must be refused, not
// panic.
//
// Regression test: ActionRetry and ActionCompensate used to index
// Steps[Cursor] with Cursor -1 and panic. Fixed in a333fb7.
func TestDecideOperatorBeforeStart(t *testing.T) {
	t.Parallel()
	def := pivotDef(t)
	for _, action := range []saga.OperatorAction{saga.ActionRetry, saga.ActionCompensate, saga.ActionResolve} {
		in := saga.NewInstance(def, uuid.NewSHA1(uuid.NameSpaceOID, []byte("unstarted")), "agg", "key", json.RawMessage(`{"id":"x"}`), testT0)
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("operator %s on an unstarted saga panicked: %v", action, p)
				}
			}()
			_, err := saga.Decide(def, in, saga.Event{Kind: saga.EventOperator, At: testT0, Operator: &saga.Operator{Action: action, Actor: "alice", Reason: "test"}})
			if !errors.Is(err, saga.ErrRefused) {
				t.Errorf("operator %s on an unstarted saga: err %v, want a refusal", action, err)
			}
		}()
	}
}

func TestDecideStart(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withDeadline(time.Minute)(t), uuid.NewSHA1(uuid.NameSpaceOID, []byte("start")))
	if h.in.State != saga.Running || h.in.Cursor != -1 || h.in.NextWakeup() != nil || h.in.CurrentStep() != "" {
		t.Fatalf("fresh instance: %+v", h.in)
	}
	d := h.start()
	if len(d.Send) != 1 || d.Send[0].Command.Step != "a" || d.Send[0].Command.Action != message.Forward || d.Send[0].Command.Attempt != 1 {
		t.Fatalf("start sent %+v, want a forward attempt 1", d.Send)
	}
	if string(d.Send[0].Command.Payload) != `{"id":"it-1"}` {
		t.Fatalf("payload %s, want built from the data", d.Send[0].Command.Payload)
	}
	if h.in.Version != 1 || h.in.CurrentStep() != "a" || h.in.DeadlineAt == nil || !h.in.DeadlineAt.Equal(testT0.Add(time.Minute)) {
		t.Fatalf("started instance: version %d step %q deadline %v", h.in.Version, h.in.CurrentStep(), h.in.DeadlineAt)
	}
	if len(d.Journal) != 1 || d.Journal[0].Event != saga.JournalStarted || d.Journal[0].From != saga.Running || d.Journal[0].To != saga.Running {
		t.Fatalf("start journal %+v", d.Journal)
	}
	if w := h.in.NextWakeup(); w == nil || !w.Equal(testT0.Add(10*time.Second)) {
		t.Fatalf("NextWakeup %v, want the first step's timeout T0+10s", w)
	}
}

func TestDecideOutputMergedIntoData(t *testing.T) {
	t.Parallel()
	def := pivotDefinition()
	def.Steps[0].OnSuccess = func(it *item, out json.RawMessage) error {
		var o struct {
			Note string `json:"note"`
		}
		if err := json.Unmarshal(out, &o); err != nil {
			return err
		}
		if o.Note == "bad" {
			return errors.New("note rejected")
		}
		it.Note = o.Note
		return nil
	}
	def.Steps[1].Command = func(it item) (any, error) { return map[string]string{"note": it.Note}, nil }
	built := mustBuild(t, def)

	h := newHarness(t, built, uuid.NewSHA1(uuid.NameSpaceOID, []byte("merge")))
	h.start()
	h.tick(time.Second)
	r := h.replyTo(h.cmd("a", message.Forward, 0), message.Success)
	r.Payload = json.RawMessage(`{"note":"reserved-7"}`)
	h.must(h.replyEv(r))
	if got := string(h.cmd("b", message.Forward, 1).Payload); got != `{"note":"reserved-7"}` {
		t.Fatalf("b's payload %s does not carry a's output", got)
	}
	if string(h.in.Steps[0].Output) != `{"note":"reserved-7"}` {
		t.Fatalf("a's output not kept: %s", h.in.Steps[0].Output)
	}

	// An output the definition rejects before the pivot compensates the step.
	h2 := newHarness(t, built, uuid.NewSHA1(uuid.NameSpaceOID, []byte("merge-bad")))
	h2.start()
	h2.tick(time.Second)
	r = h2.replyTo(h2.cmd("a", message.Forward, 0), message.Success)
	r.Payload = json.RawMessage(`{"note":"bad"}`)
	d := h2.must(h2.replyEv(r))
	if h2.in.State != saga.Compensating || len(d.Send) != 1 || d.Send[0].Command.Step != "a" || d.Send[0].Command.Action != message.Compensate {
		t.Fatalf("rejected output: state %s sent %+v, want a's compensation", h2.in.State, d.Send)
	}
	if len(d.Journal) != 2 || d.Journal[1].Event != saga.JournalOutputRejected {
		t.Fatalf("journal %+v, want step succeeded then output rejected", d.Journal)
	}
}

// A participant that never answers: every timeout leads to one pause and
// then one re-send of the same action (never a burst), the gaps between
// sends are the growing wait plus the growing backoff, and the step is
// given up exactly at its deadline, compensated too.
func TestDecideTimeoutsResendOnceWithGrowingGaps(t *testing.T) {
	t.Parallel()
	h := newHarness(t, pivotDef(t), uuid.NewSHA1(uuid.NameSpaceOID, []byte("lagging")))
	toB(h)
	sd := h.def.Steps[1]
	var sentAt []time.Time
	sentAt = append(sentAt, h.now)
	timeouts := 0
	for h.in.Steps[1].State == saga.StepRunning || h.in.Steps[1].State == saga.StepRetrying {
		before := h.in.Steps[1]
		d := h.fire()
		switch before.State {
		case saga.StepRunning:
			if len(d.Send) != 0 && h.in.Steps[1].State != saga.StepCompensating {
				t.Fatalf("the timeout of attempt %d sent %+v at once", before.Attempts, d.Send)
			}
			if d.Journal[0].Event != saga.JournalTimeout {
				t.Fatalf("journal %+v at a running step's due time, want a timeout", d.Journal)
			}
			timeouts++
		case saga.StepRetrying:
			if h.in.Steps[1].State == saga.StepRunning {
				if len(d.Send) != 1 || d.Send[0].Command.Step != "b" || d.Send[0].Command.Attempt != before.Attempts+1 {
					t.Fatalf("after a backoff sent %+v, want b's forward attempt %d alone", d.Send, before.Attempts+1)
				}
				sentAt = append(sentAt, h.now)
			}
		}
		if len(sentAt) > 50 {
			t.Fatalf("more than 50 sends and not given up")
		}
	}
	if got := h.stepStates(); got != "succeeded compensating pending pending pending" {
		t.Fatalf("after the deadline: %s, want b compensated too", got)
	}
	if dl := h.in.Steps[1].StartedAt.Add(sd.GiveUpAfter()); !h.now.Equal(dl) {
		t.Fatalf("given up at %s, want the deadline %s", h.now, dl)
	}
	if n := len(sentAt); n < 4 || timeouts < n-1 || timeouts > n {
		t.Fatalf("%d sends and %d timeouts in %s: want several sends, one per timeout", n, timeouts, sd.GiveUpAfter())
	}
	var gaps []time.Duration
	for k := 1; k < len(sentAt); k++ {
		gap := sentAt[k].Sub(sentAt[k-1])
		want := sd.Timeout + saga.Backoff(sd.Retry, h.in.ID, "b", k)
		if k > 1 {
			want += saga.Backoff(sd.Retry, h.in.ID, "b", k-1)
		}
		if gap != want {
			t.Fatalf("send %d came %s after send %d, want the wait %s plus the backoff", k+1, gap, k, want)
		}
		gaps = append(gaps, gap)
	}
	// Growing while the backoff is below its cap (1s, 2s, 4s, then 8s).
	for k := 1; k < min(len(gaps), 3); k++ {
		if gaps[k] <= gaps[k-1] {
			t.Fatalf("gaps between sends %v do not grow", gaps)
		}
	}
	if last, first := gaps[len(gaps)-1], gaps[0]; last < first+sd.Retry.MaxInterval/2 {
		t.Fatalf("gaps %v: the last is not at least half the backoff cap longer than the first", gaps)
	}
}
