package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/api"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps/tripapi"
)

// `status` prints a group's members in flight side by side (the active
// line, each member marked and labelled with its group) and what a saga
// waits for (the event, its step and deadline).
func TestPrintStatusShowsGroupMembersAndWaits(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	deadline := now.Add(time.Hour)
	step := func(name string, st saga.StepStatus, kind saga.Kind, group string) api.StepView {
		return api.StepView{StepState: saga.StepState{Name: name, State: st, Kind: kind, StartedAt: &now}, Group: group}
	}
	cases := []struct {
		name      string
		view      api.SagaView
		want, not []string
	}{
		{
			name: "reservations in flight",
			view: api.SagaView{ActiveSteps: []string{tripapi.StepReserveFlight, tripapi.StepReserveHotel, tripapi.StepReserveCar}, Steps: []api.StepView{
				step(tripapi.StepReserveFlight, saga.StepRunning, saga.Compensable, tripapi.GroupReserve),
				step(tripapi.StepReserveHotel, saga.StepRunning, saga.Compensable, tripapi.GroupReserve),
				step(tripapi.StepReserveCar, saga.StepRunning, saga.Compensable, tripapi.GroupReserve),
			}},
			want: []string{"active   reserve-flight | reserve-hotel | reserve-car\n", "> reserve-flight", "> reserve-hotel", "> reserve-car", "compensable | group reserve"},
			not:  []string{"waiting  "},
		},
		{
			name: "waiting for the approval",
			view: api.SagaView{ActiveSteps: []string{tripapi.StepAwaitApproval},
				WaitingFor: []api.WaitView{{Step: tripapi.StepAwaitApproval, Event: tripapi.EventApproval, DeadlineAt: &deadline}},
				Steps: []api.StepView{
					step(tripapi.StepReserveFlight, saga.StepSucceeded, saga.Compensable, tripapi.GroupReserve),
					step(tripapi.StepAwaitApproval, saga.StepWaiting, saga.Wait, ""),
				}},
			want: []string{"waiting  event approval at step await-approval (until 2026-12-04T11:00:00Z)\n", "> await-approval"},
			not:  []string{"active   ", "> reserve-flight"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.view.ID, c.view.Type, c.view.State, c.view.CreatedAt = uuid.New(), tripapi.SagaType, saga.Running, now
			var b bytes.Buffer
			if err := printStatus(&b, c.view, 0, now); err != nil {
				t.Fatal(err)
			}
			for _, w := range c.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("lacks %q:\n%s", w, b.String())
				}
			}
			for _, n := range c.not {
				if strings.Contains(b.String(), n) {
					t.Errorf("has %q:\n%s", n, b.String())
				}
			}
		})
	}
}
