package orchestrator_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps"
	"github.com/sagaflow/sagaflow/steps/orderapi"
	"github.com/sagaflow/sagaflow/steps/tripapi"
)

func startTrip(t *testing.T, env *engineEnv, key string, car string, approval bool) saga.Instance {
	t.Helper()
	in, created, err := env.eng.Start(context.Background(), orchestrator.StartRequest{Type: tripapi.SagaType, IdempotencyKey: key, AggregateID: key,
		Data: steps.Trip{TripID: key, Customer: "alice", Flight: "LH1", Hotel: "ritz", Car: car, AmountCents: 5000, NeedsApproval: approval}})
	if err != nil || !created {
		t.Fatalf("start book-trip: created=%v err=%v", created, err)
	}
	return in
}

// commandsOf are the outbox commands of saga id, in order.
func commandsOf(t *testing.T, env *engineEnv, id uuid.UUID) []message.Command {
	t.Helper()
	var out []message.Command
	for _, c := range pendingCommands(t, env) {
		if c.SagaID == id {
			out = append(out, c)
		}
	}
	return out
}

func find(t *testing.T, cs []message.Command, step string, action message.Action) message.Command {
	t.Helper()
	for k := len(cs) - 1; k >= 0; k-- {
		if cs[k].Step == step && cs[k].Action == action {
			return cs[k]
		}
	}
	t.Fatalf("no %s command for %s among %d", action, step, len(cs))
	return message.Command{}
}

// The reservations are written to the outbox by the start's transaction,
// before any reply; an early approval is kept in the database and taken
// when the saga reaches its wait; the same event again changes nothing.
func TestEngineBookTripGroupAndEarlyEvent(t *testing.T) {
	t.Parallel()
	env := setupEngine(t)
	ctx := context.Background()
	in := startTrip(t, env, "trip-1", "mini", true)
	cs := commandsOf(t, env, in.ID)
	if len(cs) != 3 {
		t.Fatalf("start wrote %d commands, want the 3 reservations", len(cs))
	}
	for _, c := range cs {
		if !c.SentAt.Equal(cs[0].SentAt) || c.Action != message.Forward {
			t.Fatalf("reservation %s sent at %s, want all at %s", c.Step, c.SentAt, cs[0].SentAt)
		}
	}
	res, err := env.eng.SendEvent(ctx, in.ID, tripapi.EventApproval, "ap-1", json.RawMessage(`{"approved":true}`))
	if err != nil || res.Duplicate || res.Taken {
		t.Fatalf("early approval: %+v, %v; want kept", res, err)
	}
	res, err = env.eng.SendEvent(ctx, in.ID, tripapi.EventApproval, "ap-1", json.RawMessage(`{"approved":false}`))
	if err != nil || !res.Duplicate {
		t.Fatalf("the same event again: %+v, %v; want a duplicate", res, err)
	}
	env.clock.advance(time.Millisecond)
	mustReply(t, env, find(t, cs, tripapi.StepReserveCar, message.Forward), message.Success, tripapi.ReserveResult{ReservationID: "C"})
	mustReply(t, env, find(t, cs, tripapi.StepReserveHotel, message.Forward), message.Success, tripapi.ReserveResult{ReservationID: "H"})
	mustReply(t, env, find(t, cs, tripapi.StepReserveFlight, message.Forward), message.Success, tripapi.ReserveResult{ReservationID: "F"})
	got, journal := get(t, env, in.ID)
	if got.Steps[3].State != saga.StepSucceeded || got.Steps[3].Events[0].ID != "ap-1" || !got.Steps[3].Events[0].Taken {
		t.Fatalf("await-approval %+v: want succeeded with the kept event taken", got.Steps[3])
	}
	var events []string
	for _, j := range journal {
		events = append(events, j.Event)
	}
	charge := find(t, commandsOf(t, env, in.ID), tripapi.StepChargePayment, message.Forward)
	if _, err := env.eng.Cancel(ctx, in.ID, "alice", "too late"); !errors.Is(err, saga.ErrRefused) {
		t.Fatalf("cancel with the charge sent: %v, want refused", err)
	}
	mustReply(t, env, charge, message.Success, orderapi.ChargePaymentResult{PaymentID: "P"})
	cs = commandsOf(t, env, in.ID)
	for _, step := range []string{tripapi.StepConfirmFlight, tripapi.StepConfirmHotel, tripapi.StepConfirmCar} {
		mustReply(t, env, find(t, cs, step, message.Forward), message.Success, nil)
	}
	got, _ = get(t, env, in.ID)
	if got.State != saga.Completed {
		t.Fatalf("state %s, want completed (journal %v)", got.State, events)
	}
	var trip steps.Trip
	if err := json.Unmarshal(got.Data, &trip); err != nil || !trip.Approved || trip.PaymentID != "P" || trip.CarReservation != "C" {
		t.Fatalf("data %s (%v)", got.Data, err)
	}
	if _, err := env.eng.SendEvent(ctx, in.ID, tripapi.EventApproval, "ap-2", nil); !errors.Is(err, saga.ErrEventFinished) {
		t.Fatalf("event for a finished saga: %v", err)
	}
	if _, err := env.eng.SendEvent(ctx, uuid.New(), tripapi.EventApproval, "ap-2", nil); !errors.Is(err, saga.ErrNotFound) {
		t.Fatalf("event for an unknown saga: %v", err)
	}
	if v := env.labeled("sagaflow_events_received_total", map[string]string{"type": tripapi.SagaType, "result": "duplicate"}).GetCounter().GetValue(); v != 1 {
		t.Fatalf("events_received_total{duplicate} = %v, want 1", v)
	}
}

// The hotel fails; a car success that comes after is compensated too,
// in reverse order of completion; nothing is charged. A cancel of another
// trip before the pivot compensates once its reservations settle.
func TestEngineBookTripFailureAndCancel(t *testing.T) {
	t.Parallel()
	env := setupEngine(t)
	ctx := context.Background()
	in := startTrip(t, env, "trip-2", "mini", false)
	cs := commandsOf(t, env, in.ID)
	mustReply(t, env, find(t, cs, tripapi.StepReserveFlight, message.Forward), message.Success, tripapi.ReserveResult{ReservationID: "F"})
	mustReply(t, env, find(t, cs, tripapi.StepReserveHotel, message.Forward), message.Failure, nil)
	mustReply(t, env, find(t, cs, tripapi.StepReserveCar, message.Forward), message.Success, tripapi.ReserveResult{ReservationID: "C"})
	cs = commandsOf(t, env, in.ID)
	first := cs[len(cs)-1]
	if first.Step != tripapi.StepReserveCar || first.Action != message.Compensate {
		t.Fatalf("first compensation %s/%s, want reserve-car (completed last)", first.Step, first.Action)
	}
	mustReply(t, env, first, message.Success, nil)
	second := lastCommand(t, env)
	if second.Step != tripapi.StepReserveFlight || second.Action != message.Compensate {
		t.Fatalf("second compensation %s/%s, want reserve-flight", second.Step, second.Action)
	}
	mustReply(t, env, second, message.Success, nil)
	got, _ := get(t, env, in.ID)
	if got.State != saga.Compensated || got.Steps[1].State != saga.StepFailed || got.Steps[1].CompAttempts != 0 {
		t.Fatalf("state %s, hotel %+v", got.State, got.Steps[1])
	}
	for _, c := range commandsOf(t, env, in.ID) {
		if c.Step == tripapi.StepChargePayment {
			t.Fatal("a charge was sent")
		}
	}

	other := startTrip(t, env, "trip-3", "", false)
	oc := commandsOf(t, env, other.ID)
	after, err := env.eng.Cancel(ctx, other.ID, "alice", "changed plans")
	if err != nil || after.State != saga.Compensating {
		t.Fatalf("cancel before the pivot: %s, %v", after.State, err)
	}
	if n := len(commandsOf(t, env, other.ID)); n != len(oc) {
		t.Fatalf("the cancel sent %d commands with reservations in flight, want none until they settle", n-len(oc))
	}
	mustReply(t, env, find(t, oc, tripapi.StepReserveFlight, message.Forward), message.Success, tripapi.ReserveResult{ReservationID: "F"})
	mustReply(t, env, find(t, oc, tripapi.StepReserveHotel, message.Forward), message.Success, tripapi.ReserveResult{ReservationID: "H"})
	c := lastCommand(t, env)
	if c.SagaID != other.ID || c.Step != tripapi.StepReserveHotel || c.Action != message.Compensate {
		t.Fatalf("after the cancel want reserve-hotel compensated first, got %s/%s", c.Step, c.Action)
	}
	_, journal := get(t, env, other.ID)
	found := false
	for _, j := range journal {
		found = found || (j.Event == saga.JournalCancelled && j.Actor == "alice" && j.Reason == "changed plans")
	}
	if !found {
		t.Fatalf("no cancel journaled with its actor: %+v", journal)
	}
}

// A wait's deadline is fired by the timer loop; an event racing it
// through two transactions at once is taken or refused, never both.
func TestEngineBookTripWaitDeadlineAndRace(t *testing.T) {
	t.Parallel()
	env := setupEngine(t)
	ctx := context.Background()
	reach := func(key string) saga.Instance {
		in := startTrip(t, env, key, "", true)
		cs := commandsOf(t, env, in.ID)
		mustReply(t, env, find(t, cs, tripapi.StepReserveFlight, message.Forward), message.Success, tripapi.ReserveResult{ReservationID: "F"})
		mustReply(t, env, find(t, cs, tripapi.StepReserveHotel, message.Forward), message.Success, tripapi.ReserveResult{ReservationID: "H"})
		return in
	}
	a := reach("trip-4")
	env.clock.advance(time.Hour)
	if n, err := env.eng.FireDue(ctx, 10); err != nil || n != 1 {
		t.Fatalf("FireDue at the wait's deadline = %d, %v", n, err)
	}
	got, _ := get(t, env, a.ID)
	if got.State != saga.Compensating || got.Steps[3].State != saga.StepFailed {
		t.Fatalf("after the wait's deadline: %s, wait %s", got.State, got.Steps[3].State)
	}
	if v := env.labeled("sagaflow_waits_timed_out_total", map[string]string{"type": tripapi.SagaType}).GetCounter().GetValue(); v != 1 {
		t.Fatalf("waits_timed_out_total = %v", v)
	}

	b := reach("trip-5")
	env.clock.advance(time.Hour)
	var wg sync.WaitGroup
	var evErr, timerErr error
	wg.Add(2)
	go func() {
		defer wg.Done()
		_, evErr = env.eng.SendEvent(ctx, b.ID, tripapi.EventApproval, "late", json.RawMessage(`{"approved":true}`))
	}()
	go func() { defer wg.Done(); _, timerErr = env.eng.FireDue(ctx, 10) }()
	wg.Wait()
	if timerErr != nil {
		t.Fatal(timerErr)
	}
	got, _ = get(t, env, b.ID)
	switch {
	case evErr == nil && got.Steps[3].State == saga.StepSucceeded && got.State == saga.Running:
	case errors.Is(evErr, saga.ErrEventNotAwaited) && got.Steps[3].State == saga.StepFailed && got.State == saga.Compensating:
	default:
		t.Fatalf("event %v, saga %s, wait %s: want the event taken, or refused after the deadline compensated", evErr, got.State, got.Steps[3].State)
	}
}
