package sagatest_test

import (
	"testing"

	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/saga/sagatest"
	"github.com/sagaflow/sagaflow/steps"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

// TestReadmeTour runs the sagatest tour of docs/tour.md as written.
func TestReadmeTour(t *testing.T) {
	def, err := steps.PlaceOrderDefinition().Build()
	if err != nil {
		t.Fatal(err)
	}
	order := steps.Order{OrderID: "o1", Customer: "c", SKU: "sku", Qty: 1, AmountCents: 100}
	h := sagatest.New(t, def, sagatest.Data(order))
	h.Start()
	h.Expect("reserve-inventory", sagatest.Forward)
	h.Succeed(orderapi.ReserveInventoryResult{ReservationID: "r-1"})
	h.Expect("lock-coupon", sagatest.Forward)
	h.TimeoutUntilGivenUp("lock-coupon")
	h.Expect("lock-coupon", sagatest.Compensate)
	h.Succeed(nil)
	h.Expect("reserve-inventory", sagatest.Compensate)
	h.Succeed(nil)
	h.ExpectState(saga.Compensated)
}
