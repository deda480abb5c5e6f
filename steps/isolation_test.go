package steps_test

import (
	"slices"
	"testing"

	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/saga/sagatest"
	"github.com/sagaflow/sagaflow/steps"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

// Pessimistic ordering of steps (docs/isolation.md): place-order runs the
// steps whose effects others can use (points a customer can spend, a
// shipment, a sale) after its pivot, where they are never undone. A
// declined payment then leaves nothing anyone saw to take back; with
// award-points before the pivot, the customer holds points for a while
// that the compensation later removes (a dirty read by whoever used them).
func TestPessimisticOrderingNeverShowsPointsThatAreTakenBack(t *testing.T) {
	t.Parallel()
	order := steps.Order{OrderID: "o-1", Customer: "alice", SKU: "sku-apple", Qty: 1, AmountCents: 5000}
	visible := []string{orderapi.StepAwardPoints, orderapi.StepCreateShipment, orderapi.StepConfirmStock}

	def := steps.PlaceOrderDefinition()
	pivot := slices.IndexFunc(def.Steps, func(s saga.Step[steps.Order]) bool { return s.Kind == saga.Pivot })
	for _, name := range visible {
		if i := slices.IndexFunc(def.Steps, func(s saga.Step[steps.Order]) bool { return s.Name == name }); i <= pivot {
			t.Fatalf("place-order runs %s at %d, not after its pivot at %d", name, i, pivot)
		}
	}

	// Without: award-points moved before the pivot (compensable).
	early := steps.PlaceOrderDefinition()
	i := slices.IndexFunc(early.Steps, func(s saga.Step[steps.Order]) bool { return s.Name == orderapi.StepAwardPoints })
	award := early.Steps[i]
	award.Kind, award.Compensation = saga.Compensable, award.Command
	rest := slices.Delete(slices.Clone(early.Steps), i, i+1)
	early.Steps = slices.Insert(rest, pivot, award)
	earlyDef, err := early.Build()
	if err != nil {
		t.Fatal(err)
	}
	h := sagatest.New(t, earlyDef, sagatest.Data(order))
	h.Start()
	for _, s := range []string{orderapi.StepReserveInventory, orderapi.StepLockCoupon, orderapi.StepAwardPoints} {
		h.Expect(s, sagatest.Forward)
		h.Succeed(nil)
	}
	h.Expect(orderapi.StepChargePayment, sagatest.Forward)
	h.Fail(orderapi.ReasonPaymentDeclined)
	h.Expect(orderapi.StepAwardPoints, sagatest.Compensate) // the points the customer saw are taken back
	h.Succeed(nil)

	// With: place-order as defined. The decline compensates the two steps
	// before the pivot, and no visible step ever ran.
	h = sagatest.New(t, mustPlaceOrder(t), sagatest.Data(order))
	h.Start()
	for _, s := range []string{orderapi.StepReserveInventory, orderapi.StepLockCoupon} {
		h.Expect(s, sagatest.Forward)
		h.Succeed(nil)
	}
	h.Expect(orderapi.StepChargePayment, sagatest.Forward)
	h.Fail(orderapi.ReasonPaymentDeclined)
	for _, s := range []string{orderapi.StepLockCoupon, orderapi.StepReserveInventory} {
		h.Expect(s, sagatest.Compensate)
		h.Succeed(nil)
	}
	h.ExpectState(saga.Compensated)
	for _, c := range h.Sent() {
		if slices.Contains(visible, c.Step) {
			t.Fatalf("a declined order sent %s/%s", c.Step, c.Action)
		}
	}
}

func mustPlaceOrder(t *testing.T) *saga.Def {
	t.Helper()
	d, err := steps.PlaceOrder()
	if err != nil {
		t.Fatal(err)
	}
	return d
}
