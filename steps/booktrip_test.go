package steps_test

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/saga/sagatest"
	"github.com/sagaflow/sagaflow/steps"
	"github.com/sagaflow/sagaflow/steps/orderapi"
	"github.com/sagaflow/sagaflow/steps/tripapi"
)

const (
	rFlight = tripapi.StepReserveFlight
	rHotel  = tripapi.StepReserveHotel
	rCar    = tripapi.StepReserveCar
	wait    = tripapi.StepAwaitApproval
	charge  = tripapi.StepChargePayment
	cFlight = tripapi.StepConfirmFlight
	cHotel  = tripapi.StepConfirmHotel
	cCar    = tripapi.StepConfirmCar
)

func trip(car string, approval bool) steps.Trip {
	return steps.Trip{TripID: "t-1", Customer: "alice", Flight: "LH123", Hotel: "ritz", Car: car, AmountCents: 120000, NeedsApproval: approval}
}

func newTrip(t *testing.T, tr steps.Trip) *sagatest.Harness {
	t.Helper()
	def, err := steps.BookTrip()
	if err != nil {
		t.Fatal(err)
	}
	h := sagatest.New(t, def, sagatest.Data(tr))
	h.Start()
	return h
}

func reservation(id string) sagatest.Answer {
	return sagatest.Succeeded(tripapi.ReserveResult{ReservationID: id})
}

func noCharge(t *testing.T, h *sagatest.Harness) {
	t.Helper()
	for _, c := range h.Sent() {
		if c.Step == charge {
			t.Fatalf("a %s command for %s was sent: nothing may be charged", c.Action, charge)
		}
	}
}

// The three reservations are sent by the start's one decision, before any
// reply; the saga completes with the confirmations sent together too.
func TestBookTripReservesAtOnce(t *testing.T) {
	h := newTrip(t, trip("mini", false))
	cmds := h.ExpectTogether(sagatest.Forward, rFlight, rHotel, rCar)
	for _, c := range cmds[1:] {
		if !c.SentAt.Equal(cmds[0].SentAt) {
			t.Fatalf("%s sent at %s, %s at %s: want one instant", cmds[0].Step, cmds[0].SentAt, c.Step, c.SentAt)
		}
	}
	h.ExpectJournal("started", "group started")
	if j := h.Journal(); j[1].Reason != `group "reserve": reserve-flight, reserve-hotel, reserve-car sent at once` {
		t.Fatalf("journal %q: want the three reservations sent at once", j[1].Reason)
	}
	h.Answer(rHotel, reservation("H1"))
	h.Answer(rCar, reservation("C1"))
	h.ExpectNoCommand()
	h.Answer(rFlight, reservation("F1"))
	h.ExpectStepState(saga.StepSkipped, wait)
	c := h.Expect(charge, sagatest.Forward)
	if string(c.Payload) != `{"order_id":"t-1","customer":"alice","amount_cents":120000}` {
		t.Fatalf("charge payload %s", c.Payload)
	}
	h.Succeed(orderapi.ChargePaymentResult{PaymentID: "P1"})
	confirms := h.ExpectTogether(sagatest.Forward, cFlight, cHotel, cCar)
	if string(confirms[2].Payload) != `{"trip_id":"t-1","reservation_id":"C1"}` {
		t.Fatalf("confirm-car payload %s", confirms[2].Payload)
	}
	h.Answer(cCar, sagatest.Succeeded(nil))
	h.Answer(cHotel, sagatest.RetryLater("busy"))
	h.Answer(cFlight, sagatest.Succeeded(nil))
	h.FireNextTimer()
	h.Expect(cHotel, sagatest.Forward)
	h.Answer(cHotel, sagatest.Succeeded(nil))
	h.ExpectState(saga.Completed)
	var got steps.Trip
	h.DecodeData(&got)
	if got.FlightReservation != "F1" || got.HotelReservation != "H1" || got.CarReservation != "C1" || got.PaymentID != "P1" {
		t.Fatalf("data %+v", got)
	}
}

func TestBookTripWithoutCarSkipsIt(t *testing.T) {
	h := newTrip(t, trip("", false))
	h.ExpectTogether(sagatest.Forward, rFlight, rHotel)
	h.ExpectStepState(saga.StepSkipped, rCar)
	h.Answer(rFlight, reservation("F1"))
	h.Answer(rHotel, reservation("H1"))
	h.Expect(charge, sagatest.Forward)
	h.Succeed(nil)
	h.ExpectTogether(sagatest.Forward, cFlight, cHotel)
	h.ExpectStepState(saga.StepSkipped, cCar)
	h.Answer(cHotel, sagatest.Succeeded(nil))
	h.Answer(cFlight, sagatest.Succeeded(nil))
	h.ExpectState(saga.Completed)
	h.ExpectNoCommand()
}

// The hotel fails after the flight and the car succeeded: they are
// compensated in reverse order of completion, the hotel is not, nothing is
// charged.
func TestBookTripHotelFailsCompensatesOthersInReverseCompletion(t *testing.T) {
	h := newTrip(t, trip("mini", false))
	h.ExpectTogether(sagatest.Forward, rFlight, rHotel, rCar)
	h.Answer(rFlight, reservation("F1"))
	h.Answer(rCar, reservation("C1"))
	h.Answer(rHotel, sagatest.Failed(tripapi.ReasonSoldOut))
	h.ExpectState(saga.Compensating)
	h.Expect(rCar, sagatest.Compensate)
	h.Succeed(nil)
	h.Expect(rFlight, sagatest.Compensate)
	h.Succeed(nil)
	h.ExpectState(saga.Compensated)
	h.ExpectStepState(saga.StepFailed, rHotel)
	h.ExpectNoCommand()
	noCharge(t, h)
}

// The hotel fails while the flight and the car are still in flight: they
// settle first; both succeed afterwards, and both are compensated, the
// latest first.
func TestBookTripMemberSucceedingAfterFailureIsCompensated(t *testing.T) {
	h := newTrip(t, trip("mini", false))
	h.ExpectTogether(sagatest.Forward, rFlight, rHotel, rCar)
	h.Answer(rHotel, sagatest.Failed(tripapi.ReasonSoldOut))
	h.ExpectState(saga.Compensating)
	h.ExpectNoCommand()
	h.Answer(rCar, reservation("C1"))
	h.ExpectNoCommand() // the flight is still in flight
	// The flight times out and is re-sent while the saga settles it.
	h.FireNextTimer()
	h.FireNextTimer()
	h.Expect(rFlight, sagatest.Forward)
	h.Answer(rFlight, reservation("F1"))
	if got := h.CompletionOrder(); !reflect.DeepEqual(got, []string{rCar, rFlight}) {
		t.Fatalf("completion order %v", got)
	}
	h.Expect(rFlight, sagatest.Compensate)
	h.Succeed(nil)
	h.Expect(rCar, sagatest.Compensate)
	h.Succeed(nil)
	h.ExpectState(saga.Compensated)
	noCharge(t, h)
}

// An approval sent before the saga reaches its wait is kept and taken when
// it does; the same event again changes nothing.
func TestBookTripEarlyApprovalIsTaken(t *testing.T) {
	h := newTrip(t, trip("", true))
	h.ExpectTogether(sagatest.Forward, rFlight, rHotel)
	if _, err := h.SendEvent(tripapi.EventApproval, "ap-1", tripapi.Approval{Approved: true}); err != nil {
		t.Fatal(err)
	}
	if ev := h.Step(wait).Events; len(ev) != 1 || ev[0].Taken {
		t.Fatalf("kept events %+v", ev)
	}
	d, err := h.SendEvent(tripapi.EventApproval, "ap-1", tripapi.Approval{Approved: false})
	if err != nil || !d.Duplicate || d.Changed {
		t.Fatalf("the same event id again: decision changed=%v duplicate=%v, err %v; want a no-op", d.Changed, d.Duplicate, err)
	}
	h.Answer(rFlight, reservation("F1"))
	h.Answer(rHotel, reservation("H1"))
	h.ExpectStepState(saga.StepSucceeded, wait)
	h.Expect(charge, sagatest.Forward)
	var got steps.Trip
	h.DecodeData(&got)
	if !got.Approved {
		t.Fatalf("approval not merged: %+v", got)
	}
	d, err = h.SendEvent(tripapi.EventApproval, "ap-1", nil)
	if err != nil || !d.Duplicate {
		t.Fatalf("the same event after it was taken: duplicate=%v err %v", d.Duplicate, err)
	}
	_, err = h.SendEvent(tripapi.EventApproval, "ap-2", tripapi.Approval{Approved: true})
	if !errors.Is(err, saga.ErrEventNotAwaited) {
		t.Fatalf("a second approval after the wait: %v, want ErrEventNotAwaited", err)
	}
}

// A refusal compensates the reservations.
func TestBookTripRefusalCompensates(t *testing.T) {
	h := newTrip(t, trip("mini", true))
	h.ExpectTogether(sagatest.Forward, rFlight, rHotel, rCar)
	h.Answer(rCar, reservation("C1"))
	h.Answer(rFlight, reservation("F1"))
	h.Answer(rHotel, reservation("H1"))
	h.ExpectStepState(saga.StepWaiting, wait)
	h.ExpectNoCommand()
	if _, err := h.SendEvent(tripapi.EventApproval, "ap-1", tripapi.Approval{Approved: false, Reason: "too dear"}); err != nil {
		t.Fatal(err)
	}
	h.ExpectStepState(saga.StepFailed, wait)
	h.Expect(rHotel, sagatest.Compensate)
	h.Succeed(nil)
	h.Expect(rFlight, sagatest.Compensate)
	h.Succeed(nil)
	h.Expect(rCar, sagatest.Compensate)
	h.Succeed(nil)
	h.ExpectState(saga.Compensated)
	noCharge(t, h)
	_, err := h.SendEvent(tripapi.EventApproval, "ap-9", nil)
	if !errors.Is(err, saga.ErrEventFinished) {
		t.Fatalf("an event for a finished saga: %v, want ErrEventFinished", err)
	}
}

// A wait past its deadline compensates (the definition's OnDeadline).
func TestBookTripApprovalDeadlineCompensates(t *testing.T) {
	h := newTrip(t, trip("", true))
	h.ExpectTogether(sagatest.Forward, rFlight, rHotel)
	h.Answer(rFlight, reservation("F1"))
	h.Answer(rHotel, reservation("H1"))
	reached := h.Now()
	d := h.FireNextTimer()
	if d.WaitsTimedOut != 1 || h.Now().Sub(reached) != time.Hour {
		t.Fatalf("waits timed out %d after %s, want 1 after 1h", d.WaitsTimedOut, h.Now().Sub(reached))
	}
	h.Expect(rHotel, sagatest.Compensate)
	h.Succeed(nil)
	h.Expect(rFlight, sagatest.Compensate)
	h.Succeed(nil)
	h.ExpectState(saga.Compensated)
	noCharge(t, h)
}

// A cancel before the pivot settles the reservations in flight, then
// compensates; a cancel once the charge was sent is refused and changes
// nothing.
func TestBookTripCancel(t *testing.T) {
	h := newTrip(t, trip("mini", false))
	h.ExpectTogether(sagatest.Forward, rFlight, rHotel, rCar)
	h.Answer(rFlight, reservation("F1"))
	if _, err := h.Cancel("alice", "changed plans"); err != nil {
		t.Fatal(err)
	}
	h.ExpectState(saga.Compensating)
	h.ExpectNoCommand()
	h.Answer(rHotel, sagatest.Failed(tripapi.ReasonSoldOut))
	h.Answer(rCar, reservation("C1"))
	h.Expect(rCar, sagatest.Compensate)
	h.Succeed(nil)
	h.Expect(rFlight, sagatest.Compensate)
	h.Succeed(nil)
	h.ExpectState(saga.Compensated)
	noCharge(t, h)
	found := false
	for _, j := range h.Journal() {
		if j.Event == saga.JournalCancelled && j.Actor == "alice" && j.Reason == "changed plans" {
			found = true
		}
	}
	if !found {
		t.Fatalf("no cancel journaled with its actor: %v", h.Events())
	}

	h = newTrip(t, trip("", false))
	h.ExpectTogether(sagatest.Forward, rFlight, rHotel)
	h.Answer(rFlight, reservation("F1"))
	h.Answer(rHotel, reservation("H1"))
	h.Expect(charge, sagatest.Forward)
	before := h.Instance()
	_, err := h.Cancel("alice", "too late")
	if !errors.Is(err, saga.ErrRefused) {
		t.Fatalf("cancel after the pivot was sent: %v, want refused", err)
	}
	if !reflect.DeepEqual(before, h.Instance()) {
		t.Fatal("a refused cancel changed the saga")
	}
}

func TestBookTripRefusesEventsItNeverWaitsFor(t *testing.T) {
	h := newTrip(t, trip("", false))
	_, err := h.SendEvent("payment-received", "e-1", nil)
	var ee *saga.EventError
	if !errors.As(err, &ee) || !errors.Is(err, saga.ErrEventUnknown) {
		t.Fatalf("unknown event name: %v", err)
	}
	for _, bad := range []struct{ name, id, data string }{{"approval", "", "{}"}, {"Approval!", "e", "{}"}, {"approval", "e", "[1]"}, {"approval", "e", `"x"`}} {
		if _, err := h.SendEvent(bad.name, bad.id, []byte(bad.data)); !errors.Is(err, saga.ErrEventInvalid) {
			t.Fatalf("event %+v: %v, want ErrEventInvalid", bad, err)
		}
	}
}

// Whatever the order of the reservations' replies, the saga ends with the
// same data.
func TestBookTripAnyReplyOrderSameData(t *testing.T) {
	perms := [][]string{{rFlight, rHotel, rCar}, {rFlight, rCar, rHotel}, {rHotel, rFlight, rCar}, {rHotel, rCar, rFlight}, {rCar, rFlight, rHotel}, {rCar, rHotel, rFlight}}
	ids := map[string]string{rFlight: "F1", rHotel: "H1", rCar: "C1"}
	var want []byte
	for _, p := range perms {
		h := newTrip(t, trip("mini", false))
		h.ExpectTogether(sagatest.Forward, rFlight, rHotel, rCar)
		for _, s := range p {
			h.Answer(s, reservation(ids[s]))
		}
		h.Expect(charge, sagatest.Forward)
		got := h.Instance().Data
		if want == nil {
			want = got
		} else if string(got) != string(want) {
			t.Fatalf("order %v: data %s, want %s", p, got, want)
		}
	}
}
