package shipping

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
	"github.com/sagaflow/sagaflow/participants/flaky"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

//go:embed sql/*.up.sql
var sqlFiles embed.FS

// Migrations returns the business-table migration set (shipments) for
// schema. The SDK's own sets come from migrations.Participant(schema).
func Migrations(schema string) ([]migrations.Set, error) {
	return migrations.FromEmbedded(orderapi.Shipping, schema, sqlFiles, "sql")
}

// Options configures the shipping handler: transient-failure injection (see
// package flaky). The zero value never injects a failure.
type Options = flaky.Options

// Register adds the create-shipment forward handler to p (no compensation:
// the step is retryable, after the pivot). Its tables live in p.Schema().
func Register(p *participants.Participant, opts Options) error {
	if p == nil {
		return errors.New("shipping: Register: participant is nil")
	}
	h, err := newHandlers(p.Schema(), opts)
	if err != nil {
		return err
	}
	if err := p.Handle(orderapi.StepCreateShipment, participants.WithBatch(h.create, h.createBatch), nil); err != nil {
		return fmt.Errorf("shipping: Register: %w", err)
	}
	return nil
}

// DB is what the helpers need: a pool, a connection or a transaction.
type DB = participants.DB

type handlers struct {
	shipments string // qualified table name
	opts      Options
}

func newHandlers(schema string, opts Options) (*handlers, error) {
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("shipping: %w", err)
	}
	return &handlers{shipments: pgx.Identifier{schema, "shipments"}.Sanitize(), opts: opts}, nil
}

// create is the forward action: at most one shipment per order.
func decodeShipment(cmd message.Command) (orderapi.CreateShipment, error) {
	in, err := participants.Decode[orderapi.CreateShipment](cmd)
	if err != nil {
		return in, err
	}
	switch {
	case in.OrderID == "":
		return in, participants.InvalidField(cmd, "order_id", "is empty")
	case in.Customer == "":
		return in, participants.InvalidField(cmd, "customer", "is empty")
	case in.SKU == "":
		return in, participants.InvalidField(cmd, "sku", "is empty")
	case in.Qty <= 0:
		return in, participants.InvalidField(cmd, "qty", fmt.Sprintf("is %d, want > 0", in.Qty))
	}
	return in, nil
}

func (h *handlers) create(ctx context.Context, tx pgx.Tx, cmd message.Command) (participants.Result, error) {
	in, err := decodeShipment(cmd)
	if err != nil {
		return participants.Result{}, err
	}
	if h.opts.Fails(cmd) {
		return participants.RetryLater(orderapi.ReasonTransient), nil
	}
	var id uuid.UUID
	err = tx.QueryRow(ctx, `INSERT INTO `+h.shipments+` (order_id, saga_id, customer, sku, qty)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT DO NOTHING
RETURNING shipment_id`, in.OrderID, cmd.SagaID, in.Customer, in.SKU, in.Qty).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		// The order (or this saga) already has its shipment: answer it.
		err = tx.QueryRow(ctx, `SELECT shipment_id FROM `+h.shipments+`
WHERE order_id = $1 OR saga_id = $2
ORDER BY order_id = $1 DESC LIMIT 1`, in.OrderID, cmd.SagaID).Scan(&id)
	}
	if err != nil {
		return participants.Result{}, fmt.Errorf("shipping create saga %s order %q: %w", cmd.SagaID, in.OrderID, err)
	}
	return participants.Success(orderapi.CreateShipmentResult{ShipmentID: id.String()}), nil
}

// createBatch is the batch form of create (participants.BatchFunc): the
// shipments of a batch in one statement. An order or saga that already has
// a shipment, and a command the fault option fails, are left to create (a
// non-Success result sends the batch one by one).
func (h *handlers) createBatch(ctx context.Context, tx pgx.Tx, cmds []message.Command) ([]participants.Result, error) {
	out := make([]participants.Result, len(cmds))
	var (
		sagas                   []uuid.UUID
		orders, customers, skus []string
		qtys                    []int32
	)
	for i, cmd := range cmds {
		in, err := decodeShipment(cmd)
		if err != nil {
			return nil, err
		}
		if h.opts.Fails(cmd) {
			out[i] = participants.RetryLater(orderapi.ReasonTransient)
			return out, nil
		}
		sagas, orders, customers, skus, qtys = append(sagas, cmd.SagaID), append(orders, in.OrderID), append(customers, in.Customer), append(skus, in.SKU), append(qtys, int32(in.Qty))
	}
	ids, err := participants.QueryMap[uuid.UUID, uuid.UUID](ctx, tx, `INSERT INTO `+h.shipments+` (order_id, saga_id, customer, sku, qty)
SELECT * FROM unnest($1::text[], $2::uuid[], $3::text[], $4::text[], $5::int[])
ON CONFLICT DO NOTHING
RETURNING saga_id, shipment_id`, orders, sagas, customers, skus, qtys)
	if err != nil {
		return nil, fmt.Errorf("shipping create %d shipments: %w", len(cmds), err)
	}
	return participants.AnswerBatch(cmds, ids, func(id uuid.UUID) any {
		return orderapi.CreateShipmentResult{ShipmentID: id.String()}
	}), nil
}

// Shipments returns, per saga, how many shipments it created (0 or 1).
func Shipments(ctx context.Context, db DB, schema string) (map[uuid.UUID]int, error) {
	out, err := participants.QueryMap[uuid.UUID, int](ctx, db, `SELECT saga_id, count(*) FROM `+pgx.Identifier{schema, "shipments"}.Sanitize()+` GROUP BY saga_id`)
	if err != nil {
		return nil, fmt.Errorf("shipping shipments: %w", err)
	}
	return out, nil
}
