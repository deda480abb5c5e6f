package inventory

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
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

//go:embed sql/*.up.sql
var sqlFiles embed.FS

// Reservation states.
const (
	StateReserved = "reserved"
	StateReleased = "released"
)

// reasonCompensated answers a forward for a saga whose reservation was
// already released (the SDK barrier normally refuses it first).
const reasonCompensated = "compensated"

// Migrations returns the business-table migration set (items,
// reservations) for schema. The SDK's own sets come from
// migrations.Participant(schema).
func Migrations(schema string) ([]migrations.Set, error) {
	return migrations.FromEmbedded(orderapi.Inventory, schema, sqlFiles, "sql")
}

// Options configures the inventory handlers. The zero value is ready to use;
// there is nothing to tune today.
type Options struct{}

// Register adds the reserve-inventory forward and compensate handlers to p.
// Its tables live in p.Schema().
func Register(p *participants.Participant, opts Options) error {
	return refstep.Register(p, orderapi.Inventory, step)
}

// DB is what the helpers need: a pool, a connection or a transaction.
type DB = participants.DB

// step is the reserve-inventory step in schema.
func step(schema string) refstep.Step[orderapi.ReserveInventory] {
	h := &handlers{items: refstep.Table(schema, "items"), reservations: refstep.Table(schema, "reservations")}
	return refstep.Step[orderapi.ReserveInventory]{Name: orderapi.StepReserveInventory, Check: check, Forward: h.reserve, ForwardMany: h.reserveBatch, Compensate: h.release}
}

type handlers struct {
	items, reservations string // qualified table names
}

func check(in orderapi.ReserveInventory) (field, why string) {
	switch {
	case in.OrderID == "":
		return "order_id", "is empty"
	case in.SKU == "":
		return "sku", "is empty"
	case in.Qty <= 0:
		return "qty", fmt.Sprintf("is %d, want > 0", in.Qty)
	}
	return "", ""
}

// reserve is the forward action: move qty units from available to reserved
// and record the reservation.
// lockStock takes a transaction-scoped advisory lock on this schema's
// stock before a stock row is updated. A participant transaction may hold a
// whole batch of reservations and releases; two processes updating the same
// items in different orders would deadlock (and retry whole batches, which
// under load snowballed into minutes of backlog in the fault harness).
// Stock updates of one inventory serialize on the hot rows anyway; the lock
// makes that order explicit. Taking it again in the same transaction is
// free.
func (h *handlers) lockStock(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, lockStockSQL, h.items); err != nil {
		return fmt.Errorf("inventory: lock stock %s: %w", h.items, err)
	}
	return nil
}

// queueLockStock adds lockStock's statement to b.
func (h *handlers) queueLockStock(b *pgx.Batch) {
	b.Queue(lockStockSQL, h.items)
}

const lockStockSQL = `SELECT pg_advisory_xact_lock(hashtext($1))`

func (h *handlers) reserve(ctx context.Context, tx pgx.Tx, cmd message.Command, in orderapi.ReserveInventory) (participants.Result, error) {
	ok := participants.Success(orderapi.ReserveInventoryResult{ReservationID: cmd.SagaID.String()})

	// One round trip for the common case: read an earlier reservation of
	// the saga, take the stock lock, then move the stock and record the
	// reservation in one statement that does nothing if the saga already
	// has one or the stock is short. Statements of a batch run in order.
	var (
		prior    *string
		reserved bool
	)
	b := &pgx.Batch{}
	b.Queue(`SELECT state FROM `+h.reservations+` WHERE saga_id = $1`, cmd.SagaID).QueryRow(func(row pgx.Row) error {
		var state string
		switch err := row.Scan(&state); {
		case err == nil:
			prior = &state
		case !errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("read reservation: %w", err)
		}
		return nil
	})
	h.queueLockStock(b)
	// A concurrent copy for the same saga blocks on the stock row or the
	// reservation's primary key and then fails with a unique violation,
	// rolling its stock update back.
	b.Queue(`WITH upd AS (
  UPDATE `+h.items+` SET available = available - $2, reserved = reserved + $2
  WHERE sku = $1 AND available >= $2 AND NOT EXISTS (SELECT 1 FROM `+h.reservations+` WHERE saga_id = $3)
  RETURNING sku)
INSERT INTO `+h.reservations+` (saga_id, order_id, sku, qty, state)
SELECT $3, $4, sku, $2, 'reserved' FROM upd
RETURNING true`, in.SKU, in.Qty, cmd.SagaID, in.OrderID).QueryRow(func(row pgx.Row) error {
		if err := row.Scan(&reserved); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("update stock and insert reservation: %w", err)
		}
		return nil
	})
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return participants.Result{}, fmt.Errorf("inventory reserve saga %s order %q sku %q qty %d: %w", cmd.SagaID, in.OrderID, in.SKU, in.Qty, err)
	}
	switch {
	case reserved:
		return ok, nil
	case prior != nil && *prior == StateReserved:
		return ok, nil // a copy of a forward that already took effect
	case prior != nil:
		return participants.Fail(reasonCompensated), nil
	}
	// Nothing reserved: why? (Also covers a reservation that appeared
	// between the first and the last statement.)
	var (
		state  *string
		exists bool
	)
	if err := tx.QueryRow(ctx, `SELECT (SELECT state FROM `+h.reservations+` WHERE saga_id = $1), EXISTS (SELECT 1 FROM `+h.items+` WHERE sku = $2)`,
		cmd.SagaID, in.SKU).Scan(&state, &exists); err != nil {
		return participants.Result{}, fmt.Errorf("inventory reserve saga %s sku %q: look up reservation and sku: %w", cmd.SagaID, in.SKU, err)
	}
	switch {
	case state != nil && *state == StateReserved:
		return ok, nil
	case state != nil:
		return participants.Fail(reasonCompensated), nil
	case !exists:
		return participants.Fail(orderapi.ReasonUnknownSKU), nil
	}
	return participants.Fail(orderapi.ReasonInsufficientStock), nil
}

// reserveBatch is the set-based form of reserve: one
// round trip for a whole batch of reservations. Under the stock lock, one
// statement takes the units of every saga without a reservation yet, one
// stock update per SKU for the batch's total, and records the
// reservations. A saga that already has a reservation, or a SKU without
// enough units for all of the batch's orders (or unknown), leaves those
// commands unreserved: they answer non-Success, the SDK rolls the batch back
// and runs reserve for each command, which says why.
func (h *handlers) reserveBatch(ctx context.Context, tx pgx.Tx, cmds []message.Command, ins []orderapi.ReserveInventory) ([]participants.Result, error) {
	n := len(cmds)
	ids, orders, skus, qtys := make([]uuid.UUID, n), make([]string, n), make([]string, n), make([]int32, n)
	for i, in := range ins {
		ids[i], orders[i], skus[i], qtys[i] = cmds[i].SagaID, in.OrderID, in.SKU, int32(in.Qty)
	}
	reserved := make(map[uuid.UUID]uuid.UUID, n) // saga id -> reservation id (the saga id)
	b := &pgx.Batch{}
	h.queueLockStock(b)
	b.Queue(h.reserveBatchSQL(), ids, orders, skus, qtys).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var id uuid.UUID
			if err := rows.Scan(&id); err != nil {
				return err
			}
			reserved[id] = id
		}
		return rows.Err()
	})
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("inventory reserve %d orders: %w", n, err)
	}
	return participants.AnswerBatch(cmds, reserved, func(id uuid.UUID) any {
		return orderapi.ReserveInventoryResult{ReservationID: id.String()}
	}), nil
}

func (h *handlers) reserveBatchSQL() string {
	return `WITH req AS (
  SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::int[]) AS r(saga_id, order_id, sku, qty)
  WHERE NOT EXISTS (SELECT 1 FROM ` + h.reservations + ` AS x WHERE x.saga_id = r.saga_id)),
need AS (SELECT sku, sum(qty)::int AS qty FROM req GROUP BY sku),
upd AS (
  UPDATE ` + h.items + ` AS i SET available = i.available - need.qty, reserved = i.reserved + need.qty
  FROM need WHERE i.sku = need.sku AND i.available >= need.qty
  RETURNING i.sku)
INSERT INTO ` + h.reservations + ` (saga_id, order_id, sku, qty, state)
SELECT req.saga_id, req.order_id, req.sku, req.qty, 'reserved' FROM req JOIN upd ON upd.sku = req.sku
RETURNING saga_id`
}

// release is the compensation: give back what the saga's reservation holds,
// once. A saga without a held reservation has nothing to undo.
func (h *handlers) release(ctx context.Context, tx pgx.Tx, cmd message.Command, _ orderapi.ReserveInventory) (participants.Result, error) {
	var (
		sku string
		qty int
	)
	err := tx.QueryRow(ctx, `UPDATE `+h.reservations+`
SET state = 'released', updated_at = now()
WHERE saga_id = $1 AND state = 'reserved'
RETURNING sku, qty`, cmd.SagaID).Scan(&sku, &qty)
	if errors.Is(err, pgx.ErrNoRows) {
		return participants.Success(nil), nil
	}
	if err != nil {
		return participants.Result{}, fmt.Errorf("inventory release saga %s: update reservation: %w", cmd.SagaID, err)
	}
	if err := h.lockStock(ctx, tx); err != nil {
		return participants.Result{}, err
	}
	tag, err := tx.Exec(ctx, `UPDATE `+h.items+`
SET available = available + $2, reserved = reserved - $2
WHERE sku = $1`, sku, qty)
	if err != nil {
		return participants.Result{}, fmt.Errorf("inventory release saga %s sku %q qty %d: update stock: %w", cmd.SagaID, sku, qty, err)
	}
	if tag.RowsAffected() != 1 {
		return participants.Result{}, fmt.Errorf("inventory release saga %s: sku %q of the reservation is missing from items", cmd.SagaID, sku)
	}
	return participants.Success(nil), nil
}

// Item is the stock of one SKU.
type Item struct {
	Available, Reserved, Sold int
}

// Reservation is one saga's reservation.
type Reservation struct {
	OrderID string
	SKU     string
	Qty     int
	State   string // StateReserved or StateReleased
}

// Seed inserts every SKU of stock with that many units available, or resets
// an existing SKU to it (nothing reserved or sold).
func Seed(ctx context.Context, db DB, schema string, stock map[string]int) error {
	items := pgx.Identifier{schema, "items"}.Sanitize()
	for sku, n := range stock {
		if sku == "" || n < 0 {
			return fmt.Errorf("inventory seed: sku %q with %d units: want a non-empty sku and units >= 0", sku, n)
		}
		if _, err := db.Exec(ctx, `INSERT INTO `+items+` (sku, available, reserved, sold) VALUES ($1, $2, 0, 0)
ON CONFLICT (sku) DO UPDATE SET available = excluded.available, reserved = 0, sold = 0`, sku, n); err != nil {
			return fmt.Errorf("inventory seed sku %q: %w", sku, err)
		}
	}
	return nil
}

// Stock returns every SKU's stock.
func Stock(ctx context.Context, db DB, schema string) (map[string]Item, error) {
	rows, err := db.Query(ctx, `SELECT sku, available, reserved, sold FROM `+pgx.Identifier{schema, "items"}.Sanitize())
	if err != nil {
		return nil, fmt.Errorf("inventory stock: %w", err)
	}
	out := map[string]Item{}
	var (
		sku string
		it  Item
	)
	_, err = pgx.ForEachRow(rows, []any{&sku, &it.Available, &it.Reserved, &it.Sold}, func() error {
		out[sku] = it
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("inventory stock: %w", err)
	}
	return out, nil
}

// Reservations returns every saga's reservation.
func Reservations(ctx context.Context, db DB, schema string) (map[uuid.UUID]Reservation, error) {
	rows, err := db.Query(ctx, `SELECT saga_id, order_id, sku, qty, state FROM `+pgx.Identifier{schema, "reservations"}.Sanitize())
	if err != nil {
		return nil, fmt.Errorf("inventory reservations: %w", err)
	}
	out := map[uuid.UUID]Reservation{}
	var (
		id uuid.UUID
		r  Reservation
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &r.OrderID, &r.SKU, &r.Qty, &r.State}, func() error {
		out[id] = r
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("inventory reservations: %w", err)
	}
	return out, nil
}
