package sagatest_test

import (
	"fmt"
	"strings"
	"time"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/saga/sagatest"
	"github.com/sagaflow/sagaflow/steps"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

func placeOrder() *saga.Def {
	def, err := steps.PlaceOrder()
	if err != nil {
		panic(err)
	}
	return def
}

var order = steps.Order{OrderID: "order-1", Customer: "alice", SKU: "sku-apple", Qty: 2, Coupon: "SPRING", AmountCents: 2500}

// The happy path of the reference place-order saga: every participant
// succeeds, each step's output is merged into the saga's data and feeds the
// next command.
func Example() {
	t := sagatest.PanicT{} // in a test: the *testing.T
	h := sagatest.New(t, placeOrder(), sagatest.Data(order))
	h.Start()

	h.Expect(orderapi.StepReserveInventory, sagatest.Forward)
	h.Succeed(orderapi.ReserveInventoryResult{ReservationID: "res-1"})
	h.Expect(orderapi.StepLockCoupon, sagatest.Forward)
	h.Succeed(orderapi.LockCouponResult{DiscountCents: 500})
	pay := h.Expect(orderapi.StepChargePayment, sagatest.Forward)
	fmt.Printf("charge: %s\n", pay.Payload)
	h.Succeed(orderapi.ChargePaymentResult{PaymentID: "pay-1"})
	h.Expect(orderapi.StepCreateShipment, sagatest.Forward)
	h.Succeed(orderapi.CreateShipmentResult{ShipmentID: "ship-1"})
	points := h.Expect(orderapi.StepAwardPoints, sagatest.Forward)
	fmt.Printf("points: %s\n", points.Payload)
	h.Succeed(orderapi.AwardPointsResult{Balance: 20})
	h.Expect(orderapi.StepConfirmStock, sagatest.Forward)
	h.Succeed(orderapi.ConfirmStockResult{Sold: 1})
	h.ExpectNoCommand()

	var o steps.Order
	h.DecodeData(&o)
	fmt.Println(h.State(), o.ReservationID, o.PaymentID, o.ShipmentID, o.PointsBalance)
	fmt.Println(strings.Join(h.Events(), "\n"))
	// Output:
	// charge: {"order_id":"order-1","customer":"alice","amount_cents":2000}
	// points: {"order_id":"order-1","customer":"alice","points":20}
	// completed res-1 pay-1 ship-1 20
	// started reserve-inventory
	// step succeeded reserve-inventory
	// step succeeded lock-coupon
	// step succeeded charge-payment
	// step succeeded create-shipment
	// step succeeded award-points
	// step succeeded confirm-stock
}

// trip is a small custom definition: three bookings before the pivot (the
// payment), a notification after it.
type trip struct {
	Traveller string `json:"traveller"`
}

func tripDefinition() *saga.Def {
	book := func(t trip) (any, error) { return map[string]string{"traveller": t.Traveller}, nil }
	cancel := func(t trip) (any, error) { return map[string]string{"traveller": t.Traveller, "cancel": "yes"}, nil }
	def, err := saga.Definition[trip]{
		Name: "book-trip",
		Steps: []saga.Step[trip]{
			{Name: "book-flight", Participant: "airline", Kind: saga.Compensable, Command: book, Compensation: cancel},
			{Name: "book-hotel", Participant: "hotel", Kind: saga.Compensable, Command: book, Compensation: cancel},
			{Name: "book-car", Participant: "cars", Kind: saga.Compensable, Command: book, Compensation: cancel},
			{Name: "charge", Participant: "payment", Kind: saga.Pivot, Command: book, Timeout: 30 * time.Second},
			{Name: "send-itinerary", Participant: "mailer", Kind: saga.Retryable, Command: book},
		},
	}.Build()
	if err != nil {
		panic(err)
	}
	return def
}

// A failure before the pivot: the car cannot be booked, so what was booked
// is undone in reverse order (the hotel, then the flight) and the saga ends
// compensated. The failed step itself left nothing to undo.
func Example_compensation() {
	h := sagatest.New(sagatest.PanicT{}, tripDefinition(), sagatest.Data(trip{Traveller: "bob"}))
	h.Start()
	h.Expect("book-flight", sagatest.Forward)
	h.Succeed(nil)
	h.Expect("book-hotel", sagatest.Forward)
	h.Advance(2 * time.Second)
	h.Succeed(nil)
	h.Expect("book-car", sagatest.Forward)
	h.Advance(time.Second)
	h.Fail("no cars left")

	h.Expect("book-hotel", sagatest.Compensate)
	h.Succeed(nil)
	h.Expect("book-flight", sagatest.Compensate)
	h.Succeed(nil)
	h.ExpectNoCommand()
	h.ExpectJournal(
		"started book-flight",
		"step succeeded book-flight",
		"step succeeded book-hotel",
		"step failed book-car",
		"step compensated book-hotel",
		"step compensated book-flight",
	)
	fmt.Println(h.State(), "after", h.Elapsed())
	for _, s := range []string{"book-flight", "book-hotel", "book-car", "charge"} {
		fmt.Printf("%-11s %s\n", s, h.Step(s).State)
	}
	fmt.Println(h.Step("book-car").LastError)
	// Output:
	// compensated after 3s
	// book-flight compensated
	// book-hotel  compensated
	// book-car    failed
	// charge      pending
	// no cars left
}

// A timeout is not a failure: the outcome of the send is unknown, so after
// the backoff the same action is re-sent (attempt 2). The participant was
// only slow: its answer to the first send arrives after the re-send and is
// journaled as a late reply and ignored (only the latest send is awaited);
// the participant's barrier runs the action once whatever the attempt and
// answers the second send with the same outcome, which is taken. Faults
// delay a saga, they do not cancel it.
func Example_timeout() {
	h := sagatest.New(sagatest.PanicT{}, placeOrder(), sagatest.Data(order))
	h.Start()
	first := h.Expect(orderapi.StepReserveInventory, sagatest.Forward)

	h.FireNextTimer() // the step's 10s timeout passes without an answer
	fmt.Printf("+%s %s: %s\n", h.Elapsed(), h.Last().Journal[0].Event, h.Last().Journal[0].Reason)
	h.FireNextTimer() // the backoff ends
	again := h.Expect(orderapi.StepReserveInventory, sagatest.Forward)
	fmt.Printf("+%s re-sent as attempt %d, same payload: %t\n", h.Elapsed().Round(time.Millisecond), again.Attempt, string(again.Payload) == string(first.Payload))

	h.Advance(time.Second)
	late := h.AnswerEarlier(1, sagatest.Succeeded(orderapi.ReserveInventoryResult{ReservationID: "res-1"}))
	fmt.Println("answer to attempt 1 ignored:", late.Late, h.Step(orderapi.StepReserveInventory).State)
	h.Reply(again, sagatest.Succeeded(orderapi.ReserveInventoryResult{ReservationID: "res-1"}))
	h.Expect(orderapi.StepLockCoupon, sagatest.Forward)
	fmt.Println(strings.Join(h.Events(), "\n"))
	// Output:
	// +10s timeout: no reply to attempt 1 within 10s
	// +10.094s re-sent as attempt 2, same payload: true
	// answer to attempt 1 ignored: true running
	// started reserve-inventory
	// timeout reserve-inventory
	// command re-sent reserve-inventory
	// late reply reserve-inventory
	// step succeeded reserve-inventory
}

// A pivot that never gets a definite answer: the payment is re-sent after
// each timeout until its deadline (10 minutes by default). Then the
// orchestrator asks the payment participant what its barrier recorded (a
// query); here nobody answers that either, so the saga is failed for an
// operator. Nothing is compensated blindly: the charge may have happened.
func Example_pivotDeadline() {
	h := sagatest.New(sagatest.PanicT{}, placeOrder(), sagatest.Data(order))
	h.Start()
	h.Expect(orderapi.StepReserveInventory, sagatest.Forward)
	h.Succeed(orderapi.ReserveInventoryResult{ReservationID: "res-1"})
	h.Expect(orderapi.StepLockCoupon, sagatest.Forward)
	h.Succeed(nil)
	h.Expect(orderapi.StepChargePayment, sagatest.Forward)

	h.TimeoutUntilGivenUp(orderapi.StepChargePayment)
	fmt.Println(h.State(), "at the deadline:", h.Now().Equal(h.DeadlineOf(orderapi.StepChargePayment)), "payment", h.Step(orderapi.StepChargePayment).State)
	h.Expect(orderapi.StepChargePayment, sagatest.Query)
	h.QueriesUnanswered(orderapi.StepChargePayment)
	pay := h.Step(orderapi.StepChargePayment)
	fmt.Println(h.State(), "after", h.Elapsed().Round(time.Second), "payment", pay.State, "after", pay.Attempts, "sends and", pay.QueryAttempts, "queries")
	h.ExpectNoCommand() // no compensation

	// An operator who checked with the payment provider settles it.
	if _, err := h.Operate(saga.Operator{Action: saga.ActionResolve, Actor: "carol", Reason: "refunded by hand", Outcome: saga.Compensated}); err != nil {
		fmt.Println(err)
	}
	fmt.Println(h.State())
	// Output:
	// running at the deadline: true payment querying
	// failed after 10m52s payment unknown after 28 sends and 5 queries
	// compensated
}

// The same pivot, but its participant recorded the charge: the query's
// answer settles the step and the saga goes on forward, with nobody acting.
func Example_pivotSettledByQuery() {
	h := sagatest.New(sagatest.PanicT{}, placeOrder(), sagatest.Data(order))
	h.Start()
	h.Expect(orderapi.StepReserveInventory, sagatest.Forward)
	h.Succeed(orderapi.ReserveInventoryResult{ReservationID: "res-1"})
	h.Expect(orderapi.StepLockCoupon, sagatest.Forward)
	h.Succeed(nil)
	h.Expect(orderapi.StepChargePayment, sagatest.Forward)
	h.TimeoutUntilGivenUp(orderapi.StepChargePayment)

	q := h.Expect(orderapi.StepChargePayment, sagatest.Query)
	h.Reply(q, sagatest.Recorded(message.QueryDone, orderapi.ChargePaymentResult{PaymentID: "pay-7"}))
	h.Expect(orderapi.StepCreateShipment, sagatest.Forward)
	fmt.Println(h.State(), "payment", h.Step(orderapi.StepChargePayment).State, string(h.Step(orderapi.StepChargePayment).Output))
	for _, e := range h.Journal()[len(h.Journal())-2:] {
		fmt.Println(e.Event, e.Actor, e.Reason)
	}
	// Output:
	// running payment succeeded {"payment_id":"pay-7"}
	// querying participant reconciler got no definite answer within its deadline 10m0s (28 sends)
	// query answered reconciler participant recorded done
}
