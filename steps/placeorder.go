// Package steps holds the reference saga definitions built from package
// saga: PlaceOrder (below) and BookTrip (parallel reservations, an
// approval event, see BookTripDefinition). PlaceOrder is the seeds' order
// scenario:
//
//	reserve-inventory (inventory, compensable)
//	lock-coupon       (coupon,    compensable)
//	charge-payment    (payment,   pivot)
//	create-shipment   (shipping,  retryable)
//	award-points      (points,    retryable)
//	confirm-stock     (inventory, retryable)
//
// (Version 2; version 1, without confirm-stock, stays registered for the
// sagas started before it: PlaceOrderV1Definition.)
//
// A failure before or at the pivot releases the coupon and the stock, in
// that order; once the payment is charged, shipping, points and the stock
// confirmation are retried until they succeed. reserve-inventory holds the
// units (a semantic lock, package participants/holds) and confirm-stock,
// the last step, turns the reservation into a sale, so no reservation
// outlives its saga: a completed order's stock is sold, a compensated
// one's released. A timeout only re-sends (the outcome is unknown): the
// steps keep the default deadlines, so a step before the pivot gives up
// after 2 minutes without a definite answer (as the saga's own Deadline
// does for that whole phase) and the payment after 10 minutes (failed, for
// an operator); its MaxAttempts of 20 counts `retry` answers.
package steps

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

// Order is the place-order saga's data: the request, then what the steps
// returned.
type Order struct {
	OrderID     string `json:"order_id"`
	Customer    string `json:"customer"`
	SKU         string `json:"sku"`
	Qty         int    `json:"qty"`
	Coupon      string `json:"coupon,omitempty"`
	AmountCents int64  `json:"amount_cents"`

	ReservationID string `json:"reservation_id,omitempty"`
	DiscountCents int64  `json:"discount_cents,omitempty"`
	PaymentID     string `json:"payment_id,omitempty"`
	ShipmentID    string `json:"shipment_id,omitempty"`
	PointsBalance int64  `json:"points_balance,omitempty"`
}

// Validate checks an order before a saga is started for it.
func (o Order) Validate() error {
	switch {
	case o.OrderID == "":
		return errors.New("order_id is required")
	case o.Customer == "":
		return errors.New("customer is required")
	case o.SKU == "":
		return errors.New("sku is required")
	case o.Qty <= 0:
		return fmt.Errorf("qty must be positive, got %d", o.Qty)
	case o.AmountCents <= 0:
		return fmt.Errorf("amount_cents must be positive (the order's amount in cents), got %d", o.AmountCents)
	}
	return nil
}

// Charged is what the payment participant charges: amount less discount.
func (o Order) Charged() int64 {
	if c := o.AmountCents - o.DiscountCents; c > 0 {
		return c
	}
	return 0
}

// PointsFor is the loyalty points an order earns: one per whole currency unit charged.
func (o Order) PointsFor() int64 { return o.Charged() / 100 }

func merge[R any](apply func(*Order, R)) func(*Order, json.RawMessage) error {
	return func(o *Order, out json.RawMessage) error {
		if len(out) == 0 || string(out) == "null" {
			return nil // nothing to merge (e.g. an order without coupon)
		}
		var r R
		if err := json.Unmarshal(out, &r); err != nil {
			return fmt.Errorf("decode output: %w", err)
		}
		apply(o, r)
		return nil
	}
}

// PlaceOrderDefinition is the typed definition; Timeout and retry values are
// defaults that configuration may override per step.
func PlaceOrderDefinition() saga.Definition[Order] {
	// The first command checks the order: a bad one (a non-positive
	// amount or quantity, a missing field) answers 400 at the start and
	// starts nothing. The compensation does not check again: a saga
	// started before a check was added must still be able to undo.
	reserve := func(o Order) (any, error) {
		if err := o.Validate(); err != nil {
			return nil, err
		}
		return orderapi.ReserveInventory{OrderID: o.OrderID, SKU: o.SKU, Qty: o.Qty}, nil
	}
	unreserve := func(o Order) (any, error) {
		return orderapi.ReserveInventory{OrderID: o.OrderID, SKU: o.SKU, Qty: o.Qty}, nil
	}
	lock := func(o Order) (any, error) { return orderapi.LockCoupon{OrderID: o.OrderID, Code: o.Coupon}, nil }
	fast := saga.RetryPolicy{InitialInterval: 100 * time.Millisecond, MaxInterval: 5 * time.Second, Multiplier: 2}
	return saga.Definition[Order]{
		Name:     orderapi.SagaType,
		Version:  2,
		Deadline: 2 * time.Minute,
		Steps: []saga.Step[Order]{
			{
				Name: orderapi.StepReserveInventory, Participant: orderapi.Inventory, Kind: saga.Compensable,
				Command: reserve, Compensation: unreserve,
				OnSuccess: merge(func(o *Order, r orderapi.ReserveInventoryResult) { o.ReservationID = r.ReservationID }),
				Timeout:   10 * time.Second, Retry: fast,
			},
			{
				Name: orderapi.StepLockCoupon, Participant: orderapi.Coupon, Kind: saga.Compensable,
				Command: lock, Compensation: lock,
				OnSuccess: merge(func(o *Order, r orderapi.LockCouponResult) { o.DiscountCents = r.DiscountCents }),
				Timeout:   10 * time.Second, Retry: fast,
			},
			{
				Name: orderapi.StepChargePayment, Participant: orderapi.Payment, Kind: saga.Pivot,
				Command: func(o Order) (any, error) {
					return orderapi.ChargePayment{OrderID: o.OrderID, Customer: o.Customer, AmountCents: o.Charged()}, nil
				},
				OnSuccess: merge(func(o *Order, r orderapi.ChargePaymentResult) { o.PaymentID = r.PaymentID }),
				Timeout:   10 * time.Second, Retry: saga.RetryPolicy{InitialInterval: 200 * time.Millisecond, MaxInterval: 10 * time.Second, Multiplier: 2, MaxAttempts: 20},
			},
			{
				Name: orderapi.StepCreateShipment, Participant: orderapi.Shipping, Kind: saga.Retryable,
				Command: func(o Order) (any, error) {
					return orderapi.CreateShipment{OrderID: o.OrderID, Customer: o.Customer, SKU: o.SKU, Qty: o.Qty}, nil
				},
				OnSuccess: merge(func(o *Order, r orderapi.CreateShipmentResult) { o.ShipmentID = r.ShipmentID }),
				Timeout:   10 * time.Second, Retry: fast,
			},
			{
				Name: orderapi.StepAwardPoints, Participant: orderapi.Points, Kind: saga.Retryable,
				Command: func(o Order) (any, error) {
					return orderapi.AwardPoints{OrderID: o.OrderID, Customer: o.Customer, Points: o.PointsFor()}, nil
				},
				OnSuccess: merge(func(o *Order, r orderapi.AwardPointsResult) { o.PointsBalance = r.Balance }),
				Timeout:   10 * time.Second, Retry: fast,
			},
			{
				Name: orderapi.StepConfirmStock, Participant: orderapi.Inventory, Kind: saga.Retryable,
				Command: func(o Order) (any, error) { return orderapi.ConfirmStock{OrderID: o.OrderID}, nil },
				Timeout: 10 * time.Second, Retry: fast,
			},
		},
	}
}

// PlaceOrder returns the validated place-order definition.
func PlaceOrder() (*saga.Def, error) { return PlaceOrderDefinition().Build() }

// PlaceOrderV1Definition is place-order version 1: the same steps without
// confirm-stock. It stays registered so that sagas started before version
// 2 finish on the steps they were started with; new sagas use version 2.
func PlaceOrderV1Definition() saga.Definition[Order] {
	d := PlaceOrderDefinition()
	d.Version = 1
	d.Steps = d.Steps[:len(d.Steps)-1]
	return d
}

// PlaceOrderV1 returns the validated place-order version 1.
func PlaceOrderV1() (*saga.Def, error) { return PlaceOrderV1Definition().Build() }

// Register registers every reference saga in r: place-order (versions 1
// and 2) and book-trip.
func Register(r *saga.Registry) error {
	for _, build := range []func() (*saga.Def, error){PlaceOrderV1, PlaceOrder, BookTrip} {
		d, err := build()
		if err != nil {
			return err
		}
		if err := r.Register(d); err != nil {
			return err
		}
	}
	return nil
}
