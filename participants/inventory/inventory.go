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
	"github.com/sagaflow/sagaflow/participants/holds"
	"github.com/sagaflow/sagaflow/participants/internal/refstep"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

//go:embed sql/*.up.sql
var sqlFiles embed.FS

// Reservation states.
const (
	StateReserved = "reserved"
	StateReleased = "released"
	StateSold     = "sold"
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

// Register adds the reserve-inventory forward and compensate handlers and
// the confirm-stock forward handler to p. Its tables live in p.Schema().
func Register(p *participants.Participant, opts Options) error {
	if err := refstep.Register(p, orderapi.Inventory, step); err != nil {
		return err
	}
	return refstep.Register(p, orderapi.Inventory, confirmStep)
}

// DB is what the helpers need: a pool, a connection or a transaction.
type DB = participants.DB

// step is the reserve-inventory step in schema.
func step(schema string) refstep.Step[orderapi.ReserveInventory] {
	h := newHandlers(schema)
	return refstep.Step[orderapi.ReserveInventory]{Name: orderapi.StepReserveInventory, Check: check, Forward: h.reserve, ForwardMany: h.reserveBatch, Compensate: h.release}
}

// confirmStep is the confirm-stock step in schema (retryable, after the
// pivot: no compensation).
func confirmStep(schema string) refstep.Step[orderapi.ConfirmStock] {
	h := newHandlers(schema)
	return refstep.Step[orderapi.ConfirmStock]{Name: orderapi.StepConfirmStock, Check: checkConfirm, Forward: h.confirm}
}

func newHandlers(schema string) *handlers {
	return &handlers{items: refstep.Table(schema, "items"), reservations: refstep.Table(schema, "reservations"), holds: holds.For(schema)}
}

type handlers struct {
	items, reservations string // qualified table names
	// holds is the semantic lock: the units a saga's reserve-inventory
	// holds, by SKU, until confirm-stock sells them or release gives them
	// back.
	holds holds.Table
}

func checkConfirm(in orderapi.ConfirmStock) (field, why string) {
	if in.OrderID == "" {
		return "order_id", "is empty"
	}
	return "", ""
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
		if _, _, err := h.holds.Take(ctx, tx, cmd.SagaID, orderapi.StepReserveInventory, in.SKU, int64(in.Qty)); err != nil {
			return participants.Result{}, fmt.Errorf("inventory reserve saga %s: %w", cmd.SagaID, err)
		}
		return ok, nil
	case prior != nil && (*prior == StateReserved || *prior == StateSold):
		return ok, nil // a copy of a forward that already took effect (and maybe was confirmed)
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
	case state != nil && (*state == StateReserved || *state == StateSold):
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
	var took []holds.Request
	b := &pgx.Batch{}
	h.queueLockStock(b)
	b.Queue(h.reserveBatchSQL(), ids, orders, skus, qtys).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var (
				id  uuid.UUID
				sku string
				qty int64
			)
			if err := rows.Scan(&id, &sku, &qty); err != nil {
				return err
			}
			reserved[id] = id
			took = append(took, holds.Request{SagaID: id, Step: orderapi.StepReserveInventory, Resource: sku, Quantity: qty})
		}
		return rows.Err()
	})
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("inventory reserve %d orders: %w", n, err)
	}
	if len(took) > 0 {
		if _, err := h.holds.TakeMany(ctx, tx, took); err != nil {
			return nil, fmt.Errorf("inventory reserve %d orders: %w", n, err)
		}
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
RETURNING saga_id, sku, qty`
}

// release is the compensation: give back what the saga's reservation holds,
// once, and release its hold. A saga without a held reservation has
// nothing to undo.
func (h *handlers) release(ctx context.Context, tx pgx.Tx, cmd message.Command, _ orderapi.ReserveInventory) (participants.Result, error) {
	sku, qty, found, err := h.settle(ctx, tx, cmd, StateReleased)
	if err != nil || !found {
		return participants.Success(nil), err
	}
	if err := h.moveStock(ctx, tx, cmd, sku, qty, `available = available + $2, reserved = reserved - $2`); err != nil {
		return participants.Result{}, err
	}
	if _, err := h.holds.Release(ctx, tx, cmd.SagaID, orderapi.StepReserveInventory); err != nil {
		return participants.Result{}, fmt.Errorf("inventory release saga %s: %w", cmd.SagaID, err)
	}
	return participants.Success(nil), nil
}

// confirm is the confirm-stock forward (after the pivot): the saga's
// reservation becomes a sale (reserved units move to sold) and its hold
// is confirmed, once. A copy finds it sold and answers the same; a saga
// without a held reservation (never reserved, or released) answers
// Fail(orderapi.ReasonNoReservation), which an operator must look at.
func (h *handlers) confirm(ctx context.Context, tx pgx.Tx, cmd message.Command, _ orderapi.ConfirmStock) (participants.Result, error) {
	sku, qty, found, err := h.settle(ctx, tx, cmd, StateSold)
	if err != nil {
		return participants.Result{}, err
	}
	if !found {
		var (
			state string
			sold  int
		)
		err := tx.QueryRow(ctx, `SELECT state, qty FROM `+h.reservations+` WHERE saga_id = $1`, cmd.SagaID).Scan(&state, &sold)
		switch {
		case err == nil && state == StateSold:
			return participants.Success(orderapi.ConfirmStockResult{Sold: sold}), nil // a copy
		case err == nil || errors.Is(err, pgx.ErrNoRows):
			return participants.Fail(orderapi.ReasonNoReservation), nil
		}
		return participants.Result{}, fmt.Errorf("inventory confirm saga %s: read reservation: %w", cmd.SagaID, err)
	}
	if err := h.moveStock(ctx, tx, cmd, sku, qty, `reserved = reserved - $2, sold = sold + $2`); err != nil {
		return participants.Result{}, err
	}
	if _, err := h.holds.Confirm(ctx, tx, cmd.SagaID, orderapi.StepReserveInventory); err != nil {
		return participants.Result{}, fmt.Errorf("inventory confirm saga %s: %w", cmd.SagaID, err)
	}
	return participants.Success(orderapi.ConfirmStockResult{Sold: qty}), nil
}

// settle moves the saga's reservation from reserved to state and returns
// its SKU and quantity; found is false when it holds no reservation.
func (h *handlers) settle(ctx context.Context, tx pgx.Tx, cmd message.Command, state string) (sku string, qty int, found bool, err error) {
	err = tx.QueryRow(ctx, `UPDATE `+h.reservations+`
SET state = $2, updated_at = now()
WHERE saga_id = $1 AND state = 'reserved'
RETURNING sku, qty`, cmd.SagaID, state).Scan(&sku, &qty)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return "", 0, false, nil
	case err != nil:
		return "", 0, false, fmt.Errorf("inventory %s saga %s: update reservation to %s: %w", cmd.Step, cmd.SagaID, state, err)
	}
	return sku, qty, true, nil
}

// moveStock applies set (with $2 the quantity) to sku's stock row under
// the stock lock.
func (h *handlers) moveStock(ctx context.Context, tx pgx.Tx, cmd message.Command, sku string, qty int, set string) error {
	if err := h.lockStock(ctx, tx); err != nil {
		return err
	}
	tag, err := tx.Exec(ctx, `UPDATE `+h.items+` SET `+set+` WHERE sku = $1`, sku, qty)
	if err != nil {
		return fmt.Errorf("inventory %s saga %s sku %q qty %d: update stock: %w", cmd.Step, cmd.SagaID, sku, qty, err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("inventory %s saga %s: sku %q of the reservation is missing from items", cmd.Step, cmd.SagaID, sku)
	}
	return nil
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
	State   string // StateReserved, StateReleased or StateSold
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
