package steps

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps/orderapi"
	"github.com/sagaflow/sagaflow/steps/tripapi"
)

// Trip is the book-trip saga's data: the request, then what the steps
// returned.
type Trip struct {
	TripID   string `json:"trip_id"`
	Customer string `json:"customer"`
	Flight   string `json:"flight"`
	Hotel    string `json:"hotel"`
	// Car is optional: without it reserve-car and confirm-car are skipped.
	Car           string `json:"car,omitempty"`
	AmountCents   int64  `json:"amount_cents"`
	NeedsApproval bool   `json:"needs_approval"`

	FlightReservation string `json:"flight_reservation_id,omitempty"`
	HotelReservation  string `json:"hotel_reservation_id,omitempty"`
	CarReservation    string `json:"car_reservation_id,omitempty"`
	Approved          bool   `json:"approved,omitempty"`
	ApprovalReason    string `json:"approval_reason,omitempty"`
	PaymentID         string `json:"payment_id,omitempty"`
}

// Validate checks a trip before a saga is started for it.
func (t Trip) Validate() error {
	switch {
	case t.TripID == "":
		return errors.New("trip_id is required")
	case t.Customer == "":
		return errors.New("customer is required")
	case t.Flight == "":
		return errors.New("flight is required")
	case t.Hotel == "":
		return errors.New("hotel is required")
	case t.AmountCents <= 0:
		return fmt.Errorf("amount_cents must be positive (the trip's price in cents), got %d", t.AmountCents)
	}
	return nil
}

func mergeTrip[R any](apply func(*Trip, R)) func(*Trip, json.RawMessage) error {
	return func(t *Trip, out json.RawMessage) error {
		if len(out) == 0 || string(out) == "null" {
			return nil
		}
		var r R
		if err := json.Unmarshal(out, &r); err != nil {
			return fmt.Errorf("decode output: %w", err)
		}
		apply(t, r)
		return nil
	}
}

// BookTripDefinition is the typed book-trip definition:
//
//	reserve group (compensable, at once):
//	  reserve-flight (flights), reserve-hotel (hotels), reserve-car (cars, when car is set)
//	await-approval   (event "approval", when needs_approval; a refusal compensates)
//	charge-payment   (payment, pivot)
//	confirm group (retryable, at once):
//	  confirm-flight (flights), confirm-hotel (hotels), confirm-car (cars, when car is set)
//
// A reservation failing compensates the others that took effect, in
// reverse order of completion; an approval not received within an hour
// compensates them too. Timeouts and retry values are defaults that
// configuration may override per step.
func BookTripDefinition() saga.Definition[Trip] {
	fast := saga.RetryPolicy{InitialInterval: 100 * time.Millisecond, MaxInterval: 5 * time.Second, Multiplier: 2}
	reserve := func(name, participant string, item func(Trip) string, set func(*Trip, string), check bool) saga.Step[Trip] {
		payload := func(t Trip) (any, error) {
			return tripapi.Reserve{TripID: t.TripID, Customer: t.Customer, Item: item(t)}, nil
		}
		cmd := payload
		if check {
			// The first command checks the trip: a bad one answers 400 at
			// the start and starts nothing.
			cmd = func(t Trip) (any, error) {
				if err := t.Validate(); err != nil {
					return nil, err
				}
				return payload(t)
			}
		}
		return saga.Step[Trip]{
			Name: name, Participant: participant, Kind: saga.Compensable,
			Command: cmd, Compensation: payload,
			OnSuccess: mergeTrip(func(t *Trip, r tripapi.ReserveResult) { set(t, r.ReservationID) }),
			Timeout:   10 * time.Second, Retry: fast,
		}
	}
	confirm := func(name, participant string, id func(Trip) string) saga.Step[Trip] {
		return saga.Step[Trip]{
			Name: name, Participant: participant, Kind: saga.Retryable,
			Command: func(t Trip) (any, error) { return tripapi.Confirm{TripID: t.TripID, ReservationID: id(t)}, nil },
			Timeout: 10 * time.Second, Retry: fast,
		}
	}
	hasCar := func(t Trip) bool { return t.Car != "" }

	reserveCar := reserve(tripapi.StepReserveCar, tripapi.Cars, func(t Trip) string { return t.Car }, func(t *Trip, id string) { t.CarReservation = id }, false)
	reserveCar.When = hasCar
	confirmCar := confirm(tripapi.StepConfirmCar, tripapi.Cars, func(t Trip) string { return t.CarReservation })
	confirmCar.When = hasCar

	return saga.Definition[Trip]{
		Name:    tripapi.SagaType,
		Version: 1,
		Steps: slices.Concat(
			saga.Parallel(tripapi.GroupReserve, nil,
				reserve(tripapi.StepReserveFlight, tripapi.Flights, func(t Trip) string { return t.Flight }, func(t *Trip, id string) { t.FlightReservation = id }, true),
				reserve(tripapi.StepReserveHotel, tripapi.Hotels, func(t Trip) string { return t.Hotel }, func(t *Trip, id string) { t.HotelReservation = id }, true),
				reserveCar,
			),
			[]saga.Step[Trip]{
				{
					Name: tripapi.StepAwaitApproval, Kind: saga.Wait, Event: tripapi.EventApproval,
					When:     func(t Trip) bool { return t.NeedsApproval },
					Deadline: time.Hour, OnDeadline: saga.WaitCompensate,
					OnEvent: func(t *Trip, ev json.RawMessage) error {
						var a tripapi.Approval
						if err := json.Unmarshal(ev, &a); err != nil {
							return fmt.Errorf("approval data: %w", err)
						}
						t.ApprovalReason = a.Reason
						if !a.Approved {
							if a.Reason != "" {
								return fmt.Errorf("%s: %s", tripapi.ReasonApprovalDenied, a.Reason)
							}
							return errors.New(tripapi.ReasonApprovalDenied)
						}
						t.Approved = true
						return nil
					},
				},
				{
					Name: tripapi.StepChargePayment, Participant: tripapi.Payment, Kind: saga.Pivot,
					Command: func(t Trip) (any, error) {
						return orderapi.ChargePayment{OrderID: t.TripID, Customer: t.Customer, AmountCents: t.AmountCents}, nil
					},
					OnSuccess: mergeTrip(func(t *Trip, r orderapi.ChargePaymentResult) { t.PaymentID = r.PaymentID }),
					Timeout:   10 * time.Second, Retry: saga.RetryPolicy{InitialInterval: 200 * time.Millisecond, MaxInterval: 10 * time.Second, Multiplier: 2, MaxAttempts: 20},
				},
			},
			saga.Parallel(tripapi.GroupConfirm, nil,
				confirm(tripapi.StepConfirmFlight, tripapi.Flights, func(t Trip) string { return t.FlightReservation }),
				confirm(tripapi.StepConfirmHotel, tripapi.Hotels, func(t Trip) string { return t.HotelReservation }),
				confirmCar,
			),
		),
	}
}

// BookTrip returns the validated book-trip definition.
func BookTrip() (*saga.Def, error) { return BookTripDefinition().Build() }
