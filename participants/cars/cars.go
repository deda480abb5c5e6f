// Package cars is the reference participant of the book-trip saga's
// car steps (steps/tripapi): tripapi.StepReserveCar reserves a car
// (compensable, before the payment; the compensation releases it) and
// tripapi.StepConfirmCar confirms it (retryable, after the payment).
//
// Business rule: an item (a car) has a capacity; a reservation takes
// one place (items.reserved < capacity), so a full item answers
// Fail(tripapi.ReasonSoldOut) and an unknown one
// Fail(tripapi.ReasonUnknownItem). The release gives the place back only
// if this saga holds a reservation; a confirm of a reservation the saga
// does not hold answers Fail(tripapi.ReasonNotReserved).
//
// Tables (in the participant's schema, see Migrations): items(item,
// capacity, reserved) and reservations(saga_id, reservation_id, trip_id,
// customer, item, state reserved|confirmed|released). Seed and States are
// the helpers demos and invariant checks use.
package cars

import (
	"context"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/migrations"
	"github.com/sagaflow/sagaflow/participants"
	"github.com/sagaflow/sagaflow/participants/internal/booking"
	"github.com/sagaflow/sagaflow/steps/tripapi"
)

var kind = booking.Kind{Participant: tripapi.Cars, Reserve: tripapi.StepReserveCar, Confirm: tripapi.StepConfirmCar, Prefix: "CR"}

// Migrations returns the business-table migration set for schema. The
// SDK's own sets come from migrations.Participant(schema).
func Migrations(schema string) ([]migrations.Set, error) { return booking.Migrations(kind, schema) }

// Options configures the handlers. The zero value is ready to use; there
// is nothing to tune today.
type Options struct{}

// Register adds the car steps' handlers to p. Its tables live in
// p.Schema().
func Register(p *participants.Participant, _ Options) error { return booking.Register(p, kind) }

// Seed sets the capacity of items in schema (inserted, or updated).
func Seed(ctx context.Context, db participants.DB, schema string, capacity map[string]int) error {
	return booking.Seed(ctx, db, schema, capacity)
}

// Item is a car's counters: capacity, the reserved counter and the
// reservations that hold a place (reserved or confirmed).
type Item = booking.Item

// Items returns every car's counters.
func Items(ctx context.Context, db participants.DB, schema string) (map[string]Item, error) {
	return booking.Items(ctx, db, schema)
}

// States returns every reservation's state (reserved, confirmed,
// released) by saga.
func States(ctx context.Context, db participants.DB, schema string) (map[uuid.UUID]string, error) {
	return booking.States(ctx, db, schema)
}
