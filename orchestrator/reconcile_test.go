package orchestrator_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/saga"
)

func TestInstanceDiscrepancies(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	step := func(name string, kind saga.Kind, st saga.StepStatus, sent bool) saga.StepState {
		s := saga.StepState{Name: name, Kind: kind, State: st}
		if sent {
			s.StartedAt = &at
		}
		return s
	}
	c, p, r := saga.Compensable, saga.Pivot, saga.Retryable
	cases := []struct {
		name   string
		state  saga.State
		cursor int
		steps  []saga.StepState
		want   []string // kind/step
	}{
		{"completed, all succeeded", saga.Completed, 2, []saga.StepState{step("a", c, saga.StepSucceeded, true), step("p", p, saga.StepSucceeded, true), step("r", r, saga.StepSucceeded, true)}, nil},
		{"compensated before the pivot", saga.Compensated, 0, []saga.StepState{step("a", c, saga.StepCompensated, true), step("p", p, saga.StepFailed, true), step("r", r, saga.StepPending, false)}, nil},
		{"failed pivot given up", saga.Failed, 1, []saga.StepState{step("a", c, saga.StepSucceeded, true), step("p", p, saga.StepUnknown, true), step("r", r, saga.StepPending, false)},
			[]string{string(orchestrator.KindFailedUnknown) + "/p"}},
		{"failed after the pivot", saga.Failed, 2, []saga.StepState{step("a", c, saga.StepSucceeded, true), step("p", p, saga.StepSucceeded, true), step("r", r, saga.StepFailed, true)},
			[]string{string(orchestrator.KindFailed) + "/r"}},
		{"completed with a step still running", saga.Completed, 2, []saga.StepState{step("a", c, saga.StepSucceeded, true), step("p", p, saga.StepSucceeded, true), step("r", r, saga.StepRunning, true)},
			[]string{string(orchestrator.KindActiveAfterTerminal) + "/r"}},
		{"completed with a pending step", saga.Completed, 1, []saga.StepState{step("a", c, saga.StepSucceeded, true), step("p", p, saga.StepSucceeded, true), step("r", r, saga.StepPending, false)},
			[]string{string(orchestrator.KindCompletedUnfinished) + "/r"}},
		{"compensated past the pivot", saga.Compensated, 0, []saga.StepState{step("a", c, saga.StepCompensated, true), step("p", p, saga.StepSucceeded, true), step("r", r, saga.StepPending, false)},
			[]string{string(orchestrator.KindCompensatedPastPivot) + "/a"}},
		{"compensated without a forward", saga.Compensated, 0, []saga.StepState{step("a", c, saga.StepCompensated, false), step("p", p, saga.StepFailed, true), step("r", r, saga.StepPending, false)},
			[]string{string(orchestrator.KindCompensatedUnsent) + "/a"}},
		{"running: not judged", saga.Running, 0, []saga.StepState{step("a", c, saga.StepRunning, true), step("p", p, saga.StepPending, false), step("r", r, saga.StepPending, false)}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := saga.Instance{ID: uuid.New(), Type: "t", State: tc.state, Cursor: tc.cursor, Steps: tc.steps}
			var got []string
			for _, d := range orchestrator.InstanceDiscrepancies(in) {
				if d.SagaID != in.ID || d.Detail == "" {
					t.Fatalf("discrepancy %+v lacks the saga or a detail", d)
				}
				got = append(got, string(d.Kind)+"/"+d.Step)
			}
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestReconcileOptionsDefaultsAndValidation(t *testing.T) {
	t.Parallel()
	o := orchestrator.ReconcileOptions{}.WithDefaults()
	if o.Since != orchestrator.ReconcileSinceDefault || o.SampleRate != orchestrator.ReconcileSampleDefault || o.Actor != saga.ActorReconciler ||
		o.MaxChecks != orchestrator.ReconcileMaxChecksDefault || o.StuckAfter != orchestrator.ReconcileStuckAfterDefault || o.QueryRounds != orchestrator.ReconcileQueryRoundsDefault {
		t.Fatalf("defaults: %+v", o)
	}
	if o := (orchestrator.ReconcileOptions{SampleRate: -1}).WithDefaults(); o.SampleRate != -1 {
		t.Fatalf("a negative sample rate (none) was replaced: %g", o.SampleRate)
	}
}
