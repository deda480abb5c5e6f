// Package orderapi is the wire contract of the reference place-order saga:
// its saga type, step and participant names, and the JSON payload of every
// command and reply. The saga definition (steps/) and the reference
// participants (participants/...) both speak it; neither imports the other.
package orderapi

// Saga type and step names. They are stable external names: changing one is
// a breaking change of the wire contract.
const (
	SagaType = "place-order"

	StepReserveInventory = "reserve-inventory"
	StepLockCoupon       = "lock-coupon"
	StepChargePayment    = "charge-payment"
	StepCreateShipment   = "create-shipment"
	StepAwardPoints      = "award-points"
	StepConfirmStock     = "confirm-stock"
)

// Participant names; each consumes "<name>.commands".
const (
	Inventory = "inventory"
	Coupon    = "coupon"
	Payment   = "payment"
	Shipping  = "shipping"
	Points    = "points"
)

// Business failure reasons the reference participants answer with.
const (
	ReasonInsufficientStock = "insufficient_stock"
	ReasonUnknownSKU        = "unknown_sku"
	ReasonCouponTaken       = "coupon_taken"
	ReasonUnknownCoupon     = "unknown_coupon"
	ReasonPaymentDeclined   = "payment_declined"
	ReasonTransient         = "transient_failure"
	// ReasonNoReservation: confirm-stock found no reservation to confirm
	// (never reserved, or released): the saga is failed for an operator.
	ReasonNoReservation = "no_reservation"
)

// ReserveInventory is the reserve-inventory command payload (forward and
// compensate carry the same payload).
type ReserveInventory struct {
	OrderID string `json:"order_id"`
	SKU     string `json:"sku"`
	Qty     int    `json:"qty"`
}

// ReserveInventoryResult is the reserve-inventory success payload.
type ReserveInventoryResult struct {
	ReservationID string `json:"reservation_id"`
}

// LockCoupon is the lock-coupon command payload. An empty Code means the
// order has no coupon: the step succeeds with nothing locked.
type LockCoupon struct {
	OrderID string `json:"order_id"`
	Code    string `json:"code,omitempty"`
}

// LockCouponResult is the lock-coupon success payload.
type LockCouponResult struct {
	DiscountCents int64 `json:"discount_cents"`
}

// ChargePayment is the charge-payment (pivot) command payload.
type ChargePayment struct {
	OrderID     string `json:"order_id"`
	Customer    string `json:"customer"`
	AmountCents int64  `json:"amount_cents"`
}

// ChargePaymentResult is the charge-payment success payload.
type ChargePaymentResult struct {
	PaymentID string `json:"payment_id"`
}

// CreateShipment is the create-shipment command payload.
type CreateShipment struct {
	OrderID  string `json:"order_id"`
	Customer string `json:"customer"`
	SKU      string `json:"sku"`
	Qty      int    `json:"qty"`
}

// CreateShipmentResult is the create-shipment success payload.
type CreateShipmentResult struct {
	ShipmentID string `json:"shipment_id"`
}

// AwardPoints is the award-points command payload.
type AwardPoints struct {
	OrderID  string `json:"order_id"`
	Customer string `json:"customer"`
	Points   int64  `json:"points"`
}

// AwardPointsResult is the award-points success payload.
type AwardPointsResult struct {
	Balance int64 `json:"balance"`
}

// ConfirmStock is the confirm-stock command payload: the order whose
// reservation (held by the saga's reserve-inventory step) becomes a sale.
type ConfirmStock struct {
	OrderID string `json:"order_id"`
}

// ConfirmStockResult is the confirm-stock success payload.
type ConfirmStockResult struct {
	Sold int `json:"sold"`
}
