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
	"github.com/sagaflow/sagaflow/participants/internal/refstep"
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
	return refstep.Register(p, orderapi.Shipping, func(schema string) refstep.Step[orderapi.CreateShipment] { return step(schema, opts) })
}

// DB is what the helpers need: a pool, a connection or a transaction.
type DB = participants.DB

// step is the create-shipment step in schema: at most one shipment per
// order.
func step(schema string, opts Options) refstep.Step[orderapi.CreateShipment] {
	h := &handlers{shipments: refstep.Table(schema, "shipments")}
	return refstep.Step[orderapi.CreateShipment]{Name: orderapi.StepCreateShipment, Check: check, Forward: h.create, ForwardMany: h.createBatch, Flaky: opts}
}

type handlers struct {
	shipments string // qualified table name
}

func check(in orderapi.CreateShipment) (field, why string) {
	switch {
	case in.OrderID == "", in.Customer == "", in.SKU == "":
		return emptyField(in), "is empty"
	case in.Qty <= 0:
		return "qty", fmt.Sprintf("is %d, want > 0", in.Qty)
	}
	return "", ""
}

// emptyField names the first empty text field of in.
func emptyField(in orderapi.CreateShipment) string {
	for _, f := range []struct{ name, v string }{{"order_id", in.OrderID}, {"customer", in.Customer}, {"sku", in.SKU}} {
		if f.v == "" {
			return f.name
		}
	}
	return ""
}

func (h *handlers) create(ctx context.Context, tx pgx.Tx, cmd message.Command, in orderapi.CreateShipment) (participants.Result, error) {
	var id uuid.UUID
	err := tx.QueryRow(ctx, `INSERT INTO `+h.shipments+` (order_id, saga_id, customer, sku, qty)
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

// createBatch is the set-based form of create: the shipments of a batch in
// one statement. An order or saga that already has a shipment is left to
// create alone.
func (h *handlers) createBatch(ctx context.Context, tx pgx.Tx, cmds []message.Command, ins []orderapi.CreateShipment) ([]participants.Result, error) {
	n := len(cmds)
	sagas, orders, customers, skus, qtys := make([]uuid.UUID, n), make([]string, n), make([]string, n), make([]string, n), make([]int32, n)
	for i, in := range ins {
		sagas[i], orders[i], customers[i], skus[i], qtys[i] = cmds[i].SagaID, in.OrderID, in.Customer, in.SKU, int32(in.Qty)
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
	return refstep.Read[uuid.UUID, int](ctx, db, "shipping shipments", `SELECT saga_id, count(*) FROM `+refstep.Table(schema, "shipments")+` GROUP BY saga_id`)
}
