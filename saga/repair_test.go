package saga_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/saga"
)

func repairEv(h *harness, op saga.Operator) saga.Event {
	h.tick(time.Second)
	if op.Actor == "" {
		op.Actor = "alice"
	}
	if op.Reason == "" {
		op.Reason = "carrier closed the account"
	}
	return saga.Event{Kind: saga.EventOperator, At: h.now, Operator: &op}
}

// toFlaggedR1: r1 (after the pivot) answered retry until flagged.
func toFlaggedR1(h *harness) {
	toR1(h)
	for h.in.Flag == "" {
		h.answer("r1", message.Forward, message.Retry)
		h.fire()
	}
}

// toStuckCompA: the 3-step saga compensating x, whose compensation keeps failing (flagged).
func toStuckCompX(h *harness) {
	h.start()
	h.ok("x")
	h.answer("y", message.Forward, message.Failure)
	for h.in.Flag == "" {
		h.answer("x", message.Compensate, message.Failure)
		h.fire()
	}
}

func TestRepairActions(t *testing.T) {
	t.Parallel()
	rows := []struct {
		name      string
		def       func(testing.TB) *saga.Def
		prep      func(h *harness)
		op        saga.Operator
		wantErr   string // a refusal containing this
		wantState saga.State
		wantSteps string
		wantSend  []wantCmd
		check     func(t *testing.T, h *harness, d saga.Decision)
	}{
		{name: "mark-done a flagged step after the pivot: moves on", def: pivotDef, prep: toFlaggedR1,
			op:        saga.Operator{Action: saga.ActionMarkDone, Step: "r1", Ticket: "INC-1", Output: json.RawMessage(`{"note":"shipped by hand"}`)},
			wantState: saga.Running, wantSteps: "succeeded succeeded succeeded succeeded running", wantSend: []wantCmd{fwd("r2", 1)},
			check: func(t *testing.T, h *harness, d saga.Decision) {
				if h.in.Flag != "" || !strings.Contains(string(h.in.Steps[3].Output), "shipped by hand") {
					t.Fatalf("flag %q, output %s: want unflagged with the operator's output", h.in.Flag, h.in.Steps[3].Output)
				}
				j := d.Journal[0]
				if j.Event != "operator mark-done" || j.Actor != "alice" || j.Ticket != "INC-1" || j.Step != "r1" {
					t.Fatalf("journal %+v", j)
				}
			}},
		{name: "mark-done the last step: completed", def: pivotDef,
			prep: func(h *harness) {
				toR2(h)
				for h.in.Flag == "" {
					h.answer("r2", message.Forward, message.Retry)
					h.fire()
				}
			},
			op: saga.Operator{Action: saga.ActionMarkDone}, wantState: saga.Completed, wantSteps: "succeeded succeeded succeeded succeeded succeeded"},
		{name: "mark-done a running step before the pivot: refused", def: pivotDef, prep: toB,
			op: saga.Operator{Action: saga.ActionMarkDone, Step: "b"}, wantErr: `the saga is running (not flagged) and step "b" (before the pivot) is running`},
		{name: "mark-done an unflagged step after the pivot: refused", def: pivotDef, prep: toR1,
			op: saga.Operator{Action: saga.ActionMarkDone}, wantErr: "not flagged"},
		{name: "mark-done another step than the active one: refused", def: pivotDef, prep: toFlaggedR1,
			op: saga.Operator{Action: saga.ActionMarkDone, Step: "r2"}, wantErr: `only the active step`},
		{name: "mark-done an unknown step: refused", def: pivotDef, prep: toFlaggedR1,
			op: saga.Operator{Action: saga.ActionMarkDone, Step: "zz"}, wantErr: `no step "zz"`},
		{name: "mark-done with an output that is not JSON: refused", def: pivotDef, prep: toFlaggedR1,
			op: saga.Operator{Action: saga.ActionMarkDone, Output: json.RawMessage(`{nope`)}, wantErr: "not valid JSON"},
		{name: "mark-done a step being queried", def: repairQueryDef,
			prep: func(h *harness) {
				h.start()
				fireUntil(func(h *harness) bool { return h.in.Steps[0].State == saga.StepQuerying })(h)
			},
			op: saga.Operator{Action: saga.ActionMarkDone}, wantState: saga.Running, wantSteps: "succeeded running pending pending pending", wantSend: []wantCmd{fwd("b", 1)}},
		{name: "mark-done a failed saga: refused", def: pivotDef, prep: then(toR1, doFail("r1")),
			op: saga.Operator{Action: saga.ActionMarkDone}, wantErr: "the saga is failed"},
		{name: "mark-compensated a stuck compensation: compensated", def: noPivotDef, prep: toStuckCompX,
			op:        saga.Operator{Action: saga.ActionMarkCompensated, Note: "coupon re-issued by hand", Ticket: "T-9"},
			wantState: saga.Compensated, wantSteps: "compensated failed pending",
			check: func(t *testing.T, h *harness, d saga.Decision) {
				if n := h.in.Steps[0].CompensationNote; !strings.Contains(n, "coupon re-issued by hand") || !strings.Contains(n, "alice") {
					t.Fatalf("compensation note %q", n)
				}
				if h.in.Flag != "" || h.in.FinishedAt == nil {
					t.Fatalf("flag %q finished %v", h.in.Flag, h.in.FinishedAt)
				}
			}},
		{name: "mark-compensated continues with the steps before", def: noPivotDef, prep: toCompY,
			op: saga.Operator{Action: saga.ActionMarkCompensated}, wantState: saga.Compensating, wantSteps: "compensating compensated failed", wantSend: []wantCmd{comp("x", 1)}},
		{name: "mark-compensated a running saga: refused", def: pivotDef, prep: toB,
			op: saga.Operator{Action: saga.ActionMarkCompensated}, wantErr: `the saga is running and step "b" is running`},
		{name: "force-fail a running saga: failed, no wake-up", def: pivotDef, prep: toB,
			op: saga.Operator{Action: saga.ActionForceFail}, wantState: saga.Failed, wantSteps: "succeeded unknown pending pending pending"},
		{name: "force-fail a compensating saga", def: noPivotDef, prep: toCompY,
			op: saga.Operator{Action: saga.ActionForceFail}, wantState: saga.Failed, wantSteps: "succeeded compensation_retrying failed"},
		{name: "force-fail a finished saga: refused", def: noPivotDef, prep: then(toCompY, func(h *harness) {
			h.answer("y", message.Compensate, message.Success)
			h.answer("x", message.Compensate, message.Success)
		}), op: saga.Operator{Action: saga.ActionForceFail}, wantErr: "already compensated"},
		{name: "resume a failed saga at its failed step", def: pivotDef, prep: then(toR1, doFail("r1")),
			op: saga.Operator{Action: saga.ActionResume, Step: "r1"}, wantState: saga.Running, wantSteps: "succeeded succeeded succeeded running pending", wantSend: []wantCmd{fwd("r1", 2)}},
		{name: "resume a force-failed saga at its step", def: pivotDef, prep: func(h *harness) {
			toB(h)
			h.must(repairEv(h, saga.Operator{Action: saga.ActionForceFail}))
		}, op: saga.Operator{Action: saga.ActionResume, Step: "b"}, wantState: saga.Running, wantSteps: "succeeded running pending pending pending", wantSend: []wantCmd{fwd("b", 2)}},
		{name: "resume past a step that did not succeed: refused", def: pivotDef, prep: then(toR1, doFail("r1")),
			op: saga.Operator{Action: saga.ActionResume, Step: "r2"}, wantErr: `step "r1" before "r2" is failed`},
		{name: "resume without a step: refused", def: pivotDef, prep: then(toR1, doFail("r1")),
			op: saga.Operator{Action: saga.ActionResume}, wantErr: "a step to resume at is required"},
		{name: "resume a running saga: refused", def: pivotDef, prep: toB,
			op: saga.Operator{Action: saga.ActionResume, Step: "b"}, wantErr: "only a failed saga"},
		{name: "resume a saga that compensated: refused", def: noPivotDef, prep: func(h *harness) {
			toCompY(h)
			h.must(repairEv(h, saga.Operator{Action: saga.ActionForceFail}))
		}, op: saga.Operator{Action: saga.ActionResume, Step: "y"}, wantErr: "compensation_retrying"},
		{name: "a ticket with NUL: refused", def: pivotDef, prep: toFlaggedR1,
			op: saga.Operator{Action: saga.ActionMarkDone, Ticket: "a\x00b"}, wantErr: "ticket"},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, row.def(t), uuid.NewSHA1(uuid.NameSpaceOID, []byte(row.name)))
			row.prep(h)
			prev := h.in
			sentBefore := len(h.sent)
			d, err := h.decide(repairEv(h, row.op))
			if row.wantErr != "" {
				var re *saga.RefusedError
				if !errors.As(err, &re) || !errors.Is(err, saga.ErrRefused) || !strings.Contains(err.Error(), row.wantErr) {
					t.Fatalf("err = %v, want a refusal with %q", err, row.wantErr)
				}
				if h.in.Version != prev.Version {
					t.Fatal("a refused repair changed the saga")
				}
				return
			}
			if err != nil {
				t.Fatalf("decide: %v", err)
			}
			if h.in.State != row.wantState || h.stepStates() != row.wantSteps {
				t.Fatalf("saga %s, steps %q; want %s, %q", h.in.State, h.stepStates(), row.wantState, row.wantSteps)
			}
			got := h.sent[sentBefore:]
			if len(got) != len(row.wantSend) {
				t.Fatalf("sent %+v, want %+v", got, row.wantSend)
			}
			for i, w := range row.wantSend {
				if got[i].Step != w.step || got[i].Action != w.action || got[i].Attempt != w.attempt {
					t.Fatalf("command %d = %s/%s attempt %d, want %+v", i, got[i].Step, got[i].Action, got[i].Attempt, w)
				}
			}
			if len(d.Journal) == 0 || d.Journal[0].Event != "operator "+string(row.op.Action) || d.Journal[0].Actor != "alice" || d.Journal[0].Reason != "carrier closed the account" || d.Journal[0].Ticket != row.op.Ticket {
				t.Fatalf("journal %+v lacks the repair, actor, reason or ticket", d.Journal)
			}
			if row.op.Action == saga.ActionForceFail && (h.in.NextWakeup() != nil || len(got) != 0) {
				t.Fatalf("force-fail left wake-up %v and sent %d", h.in.NextWakeup(), len(got))
			}
			if row.check != nil {
				row.check(t, h, d)
			}
		})
	}
}

// repairQueryDef: the 5-step saga with queries on (a given-up step is queried).
func repairQueryDef(t testing.TB) *saga.Def {
	d := pivotDefinition()
	for i := range d.Steps {
		if d.Steps[i].Kind != saga.Retryable {
			d.Steps[i].QueryAttempts = 2
		}
	}
	return mustBuild(t, d)
}

// repairAllowed is the DESIGN table of repair actions, written apart from
// Decide: whether op may act on in.
func repairAllowed(def *saga.Def, in saga.Instance, op saga.Operator) bool {
	if in.Cursor < 0 {
		return false
	}
	i := in.Cursor
	s := in.Steps[i]
	named := op.Step == "" || op.Step == s.Name
	switch op.Action {
	case saga.ActionMarkDone:
		after := def.Pivot >= 0 && i > def.Pivot
		return named && in.State == saga.Running && (s.State == saga.StepQuerying ||
			(after && in.Flag != "" && (s.State == saga.StepRunning || s.State == saga.StepRetrying)))
	case saga.ActionMarkCompensated:
		return named && in.State == saga.Compensating && (s.State == saga.StepCompensating || s.State == saga.StepCompRetrying)
	case saga.ActionForceFail:
		return !in.State.Terminal()
	case saga.ActionResume:
		j, ok := def.StepIndex(op.Step)
		if in.State != saga.Failed || !ok {
			return false
		}
		for k, st := range in.Steps {
			if k < j && st.State != saga.StepSucceeded {
				return false
			}
			if st.State == saga.StepCompensating || st.State == saga.StepCompRetrying || st.State == saga.StepCompensated {
				return false
			}
		}
		return true
	}
	return false
}

// FuzzRepair drives sagas through random replies, timers and repairs: a
// repair is accepted exactly when the DESIGN table allows it, a refused one
// changes nothing, and an accepted one does what its row says (on top of
// the invariants sagatest.CheckDecision checks on every decision).
func FuzzRepair(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 3, 0, 2, 1, 0})
	f.Add([]byte{0, 1, 0, 0, 2, 2, 2, 3, 3, 1, 4, 1, 1})
	f.Add([]byte("repairs everywhere \x03\x02\x01\x00"))
	actions := []saga.OperatorAction{saga.ActionMarkDone, saga.ActionMarkCompensated, saga.ActionForceFail, saga.ActionResume}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 2048 {
			data = data[:2048]
		}
		for _, def := range []*saga.Def{fuzzPivotDef, fuzzNoPivotDef} {
			h := newHarness(t, def, uuid.NewSHA1(uuid.NameSpaceOID, data))
			h.start()
			c := &choices{b: data}
			for n := 0; c.more() && n < 500; n++ {
				h.tick(time.Duration(c.next()%3) * time.Second)
				switch c.next() % 5 {
				case 0, 1: // answer the awaited command
					if h.in.State.Terminal() || len(h.sent) == 0 {
						continue
					}
					s := h.in.Steps[h.in.Cursor]
					for k := len(h.sent) - 1; k >= 0; k-- {
						if h.sent[k].MessageID == s.AwaitID {
							r := h.replyTo(h.sent[k], outcomes[c.next()%3])
							if r.Action == message.Query {
								r.Outcome = message.Retry
							}
							h.must(h.replyEv(r))
							break
						}
					}
				case 2: // a timer
					if w := h.in.NextWakeup(); w != nil && w.After(h.now) {
						h.now = *w
					}
					h.must(saga.Event{Kind: saga.EventTimer, At: h.now})
				default: // a repair
					op := saga.Operator{Action: actions[c.next()%len(actions)], Actor: "ops", Reason: "fuzz", Ticket: fmt.Sprint("T-", n)}
					if k := c.next() % (len(def.Steps) + 1); k < len(def.Steps) {
						op.Step = def.Steps[k].Name
					}
					prev := h.in
					sent := len(h.sent)
					allowed := repairAllowed(def, prev, op)
					d, err := h.decide(saga.Event{Kind: saga.EventOperator, At: h.now, Operator: &op})
					if (err == nil) != allowed {
						t.Fatalf("%s step %q on a %s saga (steps %s, flag %q): err %v, table allows %v", op.Action, op.Step, prev.State, stepsOf(prev), prev.Flag, err, allowed)
					}
					if err != nil {
						if !errors.Is(err, saga.ErrRefused) {
							t.Fatalf("refusal %v is not ErrRefused", err)
						}
						continue
					}
					if d.Journal[0].Ticket != op.Ticket || d.Journal[0].Actor != "ops" {
						t.Fatalf("journal %+v lacks actor or ticket", d.Journal[0])
					}
					switch op.Action {
					case saga.ActionForceFail:
						if h.in.State != saga.Failed || h.in.NextWakeup() != nil || len(h.sent) != sent {
							t.Fatalf("force-fail: %s, wake-up %v, %d sent", h.in.State, h.in.NextWakeup(), len(h.sent)-sent)
						}
					case saga.ActionMarkDone:
						if h.in.Steps[prev.Cursor].State != saga.StepSucceeded {
							t.Fatalf("mark-done left the step %s", h.in.Steps[prev.Cursor].State)
						}
					case saga.ActionMarkCompensated:
						if h.in.Steps[prev.Cursor].State != saga.StepCompensated || (h.in.State != saga.Compensating && h.in.State != saga.Compensated) {
							t.Fatalf("mark-compensated: saga %s, step %s", h.in.State, h.in.Steps[prev.Cursor].State)
						}
					case saga.ActionResume:
						if h.in.State != saga.Running || len(h.sent) != sent+1 || h.sent[sent].Step != op.Step || h.sent[sent].Action != message.Forward {
							t.Fatalf("resume at %s: saga %s, sent %+v", op.Step, h.in.State, h.sent[sent:])
						}
					}
				}
			}
		}
	})
}

func stepsOf(in saga.Instance) string {
	s := make([]string, len(in.Steps))
	for i, st := range in.Steps {
		s[i] = string(st.State)
	}
	return strings.Join(s, " ")
}
