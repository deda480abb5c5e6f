// Package booking is the code the book-trip saga's reference participants
// (flights, hotels, cars) share: each reserves an item (compensable, before
// the payment), releases it (the compensation) and confirms it (retryable,
// after the payment), in tables of its own schema, behind its own barrier.
// The packages participants/flights, hotels and cars name the steps.
package booking

import (
	"context"
	"embed"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/migrations"
	"github.com/sagaflow/sagaflow/participants"
	"github.com/sagaflow/sagaflow/participants/internal/refstep"
	"github.com/sagaflow/sagaflow/steps/tripapi"
)

//go:embed sql/*.up.sql
var sqlFiles embed.FS

// Kind names one booking participant and its steps.
type Kind struct {
	Participant      string
	Reserve, Confirm string
	// Prefix starts the reservation ids it gives ("FL-<saga id>").
	Prefix string
}

// Migrations returns the business-table migration set (items,
// reservations) of k for schema.
func Migrations(k Kind, schema string) ([]migrations.Set, error) {
	return migrations.FromEmbedded(k.Participant, schema, sqlFiles, "sql")
}

// Register adds k's reserve (forward and compensate) and confirm handlers
// to p; its tables live in p.Schema().
func Register(p *participants.Participant, k Kind) error {
	if err := refstep.Register(p, k.Participant, func(schema string) refstep.Step[tripapi.Reserve] { return ReserveStep(k, schema) }); err != nil {
		return err
	}
	return refstep.Register(p, k.Participant, func(schema string) refstep.Step[tripapi.Confirm] { return ConfirmStep(k, schema) })
}

type handlers struct {
	k                   Kind
	items, reservations string
}

func newHandlers(k Kind, schema string) *handlers {
	return &handlers{k: k, items: refstep.Table(schema, "items"), reservations: refstep.Table(schema, "reservations")}
}

// ReserveStep is k's reserve step in schema.
func ReserveStep(k Kind, schema string) refstep.Step[tripapi.Reserve] {
	h := newHandlers(k, schema)
	return refstep.Step[tripapi.Reserve]{Name: k.Reserve, Check: checkReserve, Forward: h.reserve, Compensate: h.release}
}

// ConfirmStep is k's confirm step in schema.
func ConfirmStep(k Kind, schema string) refstep.Step[tripapi.Confirm] {
	h := newHandlers(k, schema)
	return refstep.Step[tripapi.Confirm]{Name: k.Confirm, Check: checkConfirm, Forward: h.confirm}
}

func checkReserve(in tripapi.Reserve) (field, why string) {
	switch {
	case in.TripID == "":
		return "trip_id", "is empty"
	case in.Item == "":
		return "item", "is empty"
	}
	return "", ""
}

func checkConfirm(in tripapi.Confirm) (field, why string) {
	if in.ReservationID == "" {
		return "reservation_id", "is empty"
	}
	return "", ""
}

// reserve takes one of the item's places for this saga: sold out or an
// unknown item is a business failure.
func (h *handlers) reserve(ctx context.Context, tx pgx.Tx, cmd message.Command, in tripapi.Reserve) (participants.Result, error) {
	var id, state string
	err := tx.QueryRow(ctx, `SELECT reservation_id, state FROM `+h.reservations+` WHERE saga_id = $1`, cmd.SagaID).Scan(&id, &state)
	switch {
	case err == nil && state != "released":
		return participants.Success(tripapi.ReserveResult{ReservationID: id}), nil
	case err == nil:
		return participants.Fail(tripapi.ReasonNotReserved), nil
	case !errors.Is(err, pgx.ErrNoRows):
		return participants.Result{}, fmt.Errorf("%s: reserve saga %s: %w", h.k.Participant, cmd.SagaID, err)
	}
	tag, err := tx.Exec(ctx, `UPDATE `+h.items+` SET reserved = reserved + 1 WHERE item = $1 AND reserved < capacity`, in.Item)
	if err != nil {
		return participants.Result{}, fmt.Errorf("%s: reserve saga %s item %q: %w", h.k.Participant, cmd.SagaID, in.Item, err)
	}
	if tag.RowsAffected() == 0 {
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+h.items+` WHERE item = $1)`, in.Item).Scan(&exists); err != nil {
			return participants.Result{}, fmt.Errorf("%s: reserve saga %s: look up item %q: %w", h.k.Participant, cmd.SagaID, in.Item, err)
		}
		if !exists {
			return participants.Fail(tripapi.ReasonUnknownItem), nil
		}
		return participants.Fail(tripapi.ReasonSoldOut), nil
	}
	id = h.k.Prefix + "-" + cmd.SagaID.String()
	if _, err := tx.Exec(ctx, `INSERT INTO `+h.reservations+` (saga_id, reservation_id, trip_id, customer, item, state)
VALUES ($1, $2, $3, $4, $5, 'reserved')`, cmd.SagaID, id, in.TripID, in.Customer, in.Item); err != nil {
		return participants.Result{}, fmt.Errorf("%s: reserve saga %s: %w", h.k.Participant, cmd.SagaID, err)
	}
	return participants.Success(tripapi.ReserveResult{ReservationID: id}), nil
}

// release is the compensation: the saga's reservation, if it holds one,
// gives its place back.
func (h *handlers) release(ctx context.Context, tx pgx.Tx, cmd message.Command, _ tripapi.Reserve) (participants.Result, error) {
	if _, err := tx.Exec(ctx, `WITH r AS (
  UPDATE `+h.reservations+` SET state = 'released', updated_at = now() WHERE saga_id = $1 AND state = 'reserved' RETURNING item)
UPDATE `+h.items+` AS i SET reserved = i.reserved - 1 FROM r WHERE i.item = r.item`, cmd.SagaID); err != nil {
		return participants.Result{}, fmt.Errorf("%s: release saga %s: %w", h.k.Participant, cmd.SagaID, err)
	}
	return participants.Success(nil), nil
}

// confirm makes the saga's reservation final (after the payment).
func (h *handlers) confirm(ctx context.Context, tx pgx.Tx, cmd message.Command, in tripapi.Confirm) (participants.Result, error) {
	tag, err := tx.Exec(ctx, `UPDATE `+h.reservations+` SET state = 'confirmed', updated_at = now()
WHERE saga_id = $1 AND reservation_id = $2 AND state IN ('reserved', 'confirmed')`, cmd.SagaID, in.ReservationID)
	if err != nil {
		return participants.Result{}, fmt.Errorf("%s: confirm saga %s: %w", h.k.Participant, cmd.SagaID, err)
	}
	if tag.RowsAffected() == 0 {
		return participants.Fail(tripapi.ReasonNotReserved), nil
	}
	return participants.Success(nil), nil
}

// Seed sets the capacity of items (inserted, or updated when present).
func Seed(ctx context.Context, db participants.DB, schema string, capacity map[string]int) error {
	items := refstep.Table(schema, "items")
	for item, n := range capacity {
		if item == "" || n < 0 {
			return fmt.Errorf("booking seed: item %q capacity %d: want a name and a capacity >= 0", item, n)
		}
		if _, err := db.Exec(ctx, `INSERT INTO `+items+` (item, capacity) VALUES ($1, $2)
ON CONFLICT (item) DO UPDATE SET capacity = EXCLUDED.capacity`, item, n); err != nil {
			return fmt.Errorf("booking seed item %q: %w", item, err)
		}
	}
	return nil
}

// States returns every reservation's state by saga: reserved, confirmed or
// released (the invariant checks read them against the payments).
func States(ctx context.Context, db participants.DB, schema string) (map[uuid.UUID]string, error) {
	return refstep.Read[uuid.UUID, string](ctx, db, "reservations", `SELECT saga_id, state FROM `+refstep.Table(schema, "reservations"))
}

// Item is one bookable item's counters: its capacity, its reserved counter
// (what the reserve and release handlers keep) and the reservations that
// hold a place (reserved or confirmed). Reserved equals Held while nothing
// is lost or counted twice.
type Item struct {
	Capacity, Reserved, Held int
}

// Items returns every item's counters (the invariant checks compare
// Reserved with Held).
func Items(ctx context.Context, db participants.DB, schema string) (map[string]Item, error) {
	rows, err := db.Query(ctx, `SELECT i.item, i.capacity, i.reserved,
  count(r.saga_id) FILTER (WHERE r.state IN ('reserved', 'confirmed'))
FROM `+refstep.Table(schema, "items")+` i LEFT JOIN `+refstep.Table(schema, "reservations")+` r ON r.item = i.item
GROUP BY i.item, i.capacity, i.reserved`)
	if err != nil {
		return nil, fmt.Errorf("items: %w", err)
	}
	defer rows.Close()
	out := map[string]Item{}
	for rows.Next() {
		var name string
		var it Item
		if err := rows.Scan(&name, &it.Capacity, &it.Reserved, &it.Held); err != nil {
			return nil, fmt.Errorf("items: %w", err)
		}
		out[name] = it
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("items: %w", err)
	}
	return out, nil
}
