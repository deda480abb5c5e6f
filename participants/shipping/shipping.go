package shipping

import (
	"context"
	"embed"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"math"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/migrations"
	"github.com/sagaflow/sagaflow/orderapi"
	"github.com/sagaflow/sagaflow/participants"
)

//go:embed sql/*.up.sql
var sqlFiles embed.FS

// Migrations returns the business-table migration set (shipments) for
// schema. The SDK's own sets come from migrations.Participant(schema).
func Migrations(schema string) ([]migrations.Set, error) {
	sub, err := fs.Sub(sqlFiles, "sql")
	if err != nil {
		return nil, fmt.Errorf("shipping migrations: %w", err)
	}
	s, err := migrations.FromFS(orderapi.Shipping, schema, sub)
	if err != nil {
		return nil, err
	}
	return []migrations.Set{s}, nil
}

// Options configures the shipping handler. The zero value never injects a
// failure.
type Options struct {
	// FailRate is the probability, in [0, 1], that an attempt answers
	// RetryLater(orderapi.ReasonTransient) without doing anything.
	FailRate float64
	// Seed makes the injected failures reproducible: the same seed, saga and
	// attempt always draw the same way.
	Seed int64
}

func (o Options) validate() error {
	if math.IsNaN(o.FailRate) || o.FailRate < 0 || o.FailRate > 1 {
		return fmt.Errorf("shipping: Options.FailRate is %v, want a probability in [0, 1]", o.FailRate)
	}
	return nil
}

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
	if err := p.Handle(orderapi.StepCreateShipment, h.create, nil); err != nil {
		return fmt.Errorf("shipping: Register: %w", err)
	}
	return nil
}

// DB is what the helpers need: a pool, a connection or a transaction.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

type handlers struct {
	shipments string // qualified table name
	opts      Options
}

func newHandlers(schema string, opts Options) (*handlers, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	return &handlers{shipments: pgx.Identifier{schema, "shipments"}.Sanitize(), opts: opts}, nil
}

func invalid(cmd message.Command, field, why string) error {
	return fmt.Errorf("%w: step %q %s saga %s: payload field %q %s",
		message.ErrInvalid, cmd.Step, cmd.Action, cmd.SagaID, field, why)
}

// injectFailure reports whether this attempt of cmd fails transiently.
func (h *handlers) injectFailure(cmd message.Command) bool {
	return h.opts.FailRate > 0 && draw(h.opts.Seed, cmd.Step, cmd.SagaID, cmd.Attempt) < h.opts.FailRate
}

// draw maps (seed, step, saga, attempt) to a number in [0, 1): an FNV-1a
// hash of the inputs, mixed by the splitmix64 finaliser so every output bit
// depends on every input bit.
func draw(seed int64, step string, saga uuid.UUID, attempt int) float64 {
	h := fnv.New64a()
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(seed))
	h.Write(b[:])
	h.Write([]byte(step))
	h.Write(saga[:])
	binary.BigEndian.PutUint64(b[:], uint64(attempt))
	h.Write(b[:])
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return float64(x>>11) / (1 << 53)
}

// create is the forward action: at most one shipment per order.
func (h *handlers) create(ctx context.Context, tx pgx.Tx, cmd message.Command) (participants.Result, error) {
	in, err := participants.Decode[orderapi.CreateShipment](cmd)
	if err != nil {
		return participants.Result{}, err
	}
	switch {
	case in.OrderID == "":
		return participants.Result{}, invalid(cmd, "order_id", "is empty")
	case in.Customer == "":
		return participants.Result{}, invalid(cmd, "customer", "is empty")
	case in.SKU == "":
		return participants.Result{}, invalid(cmd, "sku", "is empty")
	case in.Qty <= 0:
		return participants.Result{}, invalid(cmd, "qty", fmt.Sprintf("is %d, want > 0", in.Qty))
	}
	if h.injectFailure(cmd) {
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

// Shipments returns, per saga, how many shipments it created (0 or 1).
func Shipments(ctx context.Context, db DB, schema string) (map[uuid.UUID]int, error) {
	rows, err := db.Query(ctx, `SELECT saga_id, count(*) FROM `+pgx.Identifier{schema, "shipments"}.Sanitize()+` GROUP BY saga_id`)
	if err != nil {
		return nil, fmt.Errorf("shipping shipments: %w", err)
	}
	out := map[uuid.UUID]int{}
	var (
		saga uuid.UUID
		n    int
	)
	if _, err := pgx.ForEachRow(rows, []any{&saga, &n}, func() error {
		out[saga] = n
		return nil
	}); err != nil {
		return nil, fmt.Errorf("shipping shipments: %w", err)
	}
	return out, nil
}
