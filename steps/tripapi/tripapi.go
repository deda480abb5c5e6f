// Package tripapi is the wire contract of the reference book-trip saga: its
// saga type, step, participant and event names, and the JSON payload of
// every command, reply and event. The saga definition (steps/) and the
// reference participants both speak it; neither imports the other. The
// payment step reuses place-order's contract (orderapi.ChargePayment, with
// the trip id as order id).
package tripapi

// Saga type, step and event names. They are stable external names:
// changing one is a breaking change of the wire contract.
const (
	SagaType = "book-trip"

	GroupReserve = "reserve"
	GroupConfirm = "confirm"

	StepReserveFlight = "reserve-flight"
	StepReserveHotel  = "reserve-hotel"
	StepReserveCar    = "reserve-car"
	StepAwaitApproval = "await-approval"
	StepChargePayment = "charge-payment"
	StepConfirmFlight = "confirm-flight"
	StepConfirmHotel  = "confirm-hotel"
	StepConfirmCar    = "confirm-car"

	// EventApproval is the event await-approval waits for (Approval).
	EventApproval = "approval"
)

// Participant names; each consumes "<name>.commands". The charge goes to
// place-order's payment participant.
const (
	Flights = "flights"
	Hotels  = "hotels"
	Cars    = "cars"
	Payment = "payment"
)

// Business failure reasons the reference participants answer with.
const (
	ReasonSoldOut        = "sold_out"
	ReasonUnknownItem    = "unknown_item"
	ReasonNotReserved    = "not_reserved"
	ReasonApprovalDenied = "approval_refused"
)

// Reserve is the payload of reserve-flight, reserve-hotel and reserve-car
// (forward and compensate carry the same payload): Item is the flight,
// hotel or car asked for.
type Reserve struct {
	TripID   string `json:"trip_id"`
	Customer string `json:"customer"`
	Item     string `json:"item"`
}

// ReserveResult is a reservation's success payload.
type ReserveResult struct {
	ReservationID string `json:"reservation_id"`
}

// Confirm is the payload of confirm-flight, confirm-hotel and confirm-car.
type Confirm struct {
	TripID        string `json:"trip_id"`
	ReservationID string `json:"reservation_id"`
}

// Approval is the data of the approval event.
type Approval struct {
	Approved bool `json:"approved"`
	// Reason (optional) says why, kept with the trip.
	Reason string `json:"reason,omitempty"`
}
