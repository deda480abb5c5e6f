package flights_test

import (
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/participants"
	"github.com/sagaflow/sagaflow/participants/cars"
	"github.com/sagaflow/sagaflow/participants/flights"
	"github.com/sagaflow/sagaflow/participants/hotels"
	"github.com/sagaflow/sagaflow/participants/participanttest"
	"github.com/sagaflow/sagaflow/steps/tripapi"
)

// The flights participant behind its real barrier: a reservation and its
// copy answered alike, a full flight refused, an unknown one too, the
// release giving the place back (and a release of a saga that reserved
// nothing closing its barrier), a confirm after the payment.
func TestFlightsReserveReleaseConfirm(t *testing.T) {
	t.Parallel()
	k := participanttest.New(t, "flights_kit", flights.Migrations, func(p *participants.Participant) error {
		return flights.Register(p, flights.Options{})
	})
	if err := flights.Seed(t.Context(), k.Pool, k.Schema(), map[string]int{"LH1": 1}); err != nil {
		t.Fatal(err)
	}
	reserve := func(saga uuid.UUID, item string, action message.Action) message.Command {
		return participanttest.Command(t, saga, tripapi.StepReserveFlight, action, 1, tripapi.Reserve{TripID: "t-" + saga.String()[:4], Customer: "c", Item: item})
	}
	a, b, c := uuid.New(), uuid.New(), uuid.New()
	first := reserve(a, "LH1", message.Forward)
	dup := first
	dup.MessageID = uuid.New()
	ans := k.Send(first, dup, reserve(b, "LH1", message.Forward), reserve(c, "XX9", message.Forward))
	participanttest.WantReply(t, ans[0], message.Success, "")
	participanttest.WantReply(t, ans[1], message.Success, "")
	if string(ans[0].Reply.Payload) != string(ans[1].Reply.Payload) || string(ans[0].Reply.Payload) != `{"reservation_id":"FL-`+a.String()+`"}` {
		t.Fatalf("reservation %s, copy %s", ans[0].Reply.Payload, ans[1].Reply.Payload)
	}
	participanttest.WantReply(t, ans[2], message.Failure, tripapi.ReasonSoldOut)
	participanttest.WantReply(t, ans[3], message.Failure, tripapi.ReasonUnknownItem)

	ans = k.Send(reserve(a, "LH1", message.Compensate), reserve(uuid.New(), "LH1", message.Compensate))
	participanttest.WantReply(t, ans[0], message.Success, "")
	participanttest.WantReply(t, ans[1], message.Success, participants.ReasonEmpty)
	if st := participanttest.Read(t, k.Pool, k.Schema(), flights.States); st[a] != "released" {
		t.Fatalf("states %v, want %s released", st, a)
	}
	// The place is free again: b reserves (a new saga, the barrier of b's
	// first forward answered already) and confirms.
	d := uuid.New()
	ans = k.Send(reserve(d, "LH1", message.Forward))
	participanttest.WantReply(t, ans[0], message.Success, "")
	confirm := participanttest.Command(t, d, tripapi.StepConfirmFlight, message.Forward, 1, tripapi.Confirm{TripID: "t", ReservationID: "FL-" + d.String()})
	wrong := participanttest.Command(t, a, tripapi.StepConfirmFlight, message.Forward, 1, tripapi.Confirm{TripID: "t", ReservationID: "FL-" + a.String()})
	ans = k.Send(confirm, wrong)
	participanttest.WantReply(t, ans[0], message.Success, "")
	participanttest.WantReply(t, ans[1], message.Failure, tripapi.ReasonNotReserved)
	if st := participanttest.Read(t, k.Pool, k.Schema(), flights.States); st[d] != "confirmed" {
		t.Fatalf("states %v, want %s confirmed", st, d)
	}
	bad := participanttest.Command(t, uuid.New(), tripapi.StepReserveFlight, message.Forward, 1, tripapi.Reserve{TripID: "t"})
	if ans := k.Send(bad); ans[0].Reply.Outcome != message.Failure || !strings.Contains(ans[0].Reply.Reason, `field "item" is empty`) {
		t.Fatalf("a reservation without item: %+v, want a failure naming the field", ans[0])
	}
}

// Hotels and cars are the same participant under their own names and
// steps, in their own schemas.
func TestHotelsAndCarsRegisterTheirSteps(t *testing.T) {
	t.Parallel()
	h := participanttest.New(t, "hotels_kit", hotels.Migrations, func(p *participants.Participant) error { return hotels.Register(p, hotels.Options{}) })
	c := participanttest.New(t, "cars_kit", cars.Migrations, func(p *participants.Participant) error { return cars.Register(p, cars.Options{}) })
	if err := hotels.Seed(t.Context(), h.Pool, h.Schema(), map[string]int{"ritz": 2}); err != nil {
		t.Fatal(err)
	}
	if err := cars.Seed(t.Context(), c.Pool, c.Schema(), map[string]int{"mini": 0}); err != nil {
		t.Fatal(err)
	}
	s := uuid.New()
	ans := h.Send(participanttest.Command(t, s, tripapi.StepReserveHotel, message.Forward, 1, tripapi.Reserve{TripID: "t", Item: "ritz"}))
	participanttest.WantReply(t, ans[0], message.Success, "")
	ans = c.Send(participanttest.Command(t, s, tripapi.StepReserveCar, message.Forward, 1, tripapi.Reserve{TripID: "t", Item: "mini"}))
	participanttest.WantReply(t, ans[0], message.Failure, tripapi.ReasonSoldOut)
	if st := participanttest.Read(t, h.Pool, h.Schema(), hotels.States); st[s] != "reserved" {
		t.Fatalf("hotel states %v", st)
	}
}
