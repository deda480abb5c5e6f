package payment

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"strconv"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/migrations"
	"github.com/sagaflow/sagaflow/participants"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

//go:embed sql/*.up.sql
var sqlFiles embed.FS

// LimitCentsDefault is the largest charge accepted when Options.LimitCents
// is zero.
const LimitCentsDefault int64 = 100_000

// Migrations returns the business-table migration set (ledger) for schema.
// The SDK's own sets come from migrations.Participant(schema).
func Migrations(schema string) ([]migrations.Set, error) {
	return migrations.FromEmbedded(orderapi.Payment, schema, sqlFiles, "sql")
}

// Options configures the payment handler.
type Options struct {
	// LimitCents is the largest amount charged; larger charges are declined.
	// Zero means LimitCentsDefault.
	LimitCents int64
}

// WithDefaults returns o with zero fields set to their defaults.
func (o Options) WithDefaults() Options {
	if o.LimitCents == 0 {
		o.LimitCents = LimitCentsDefault
	}
	return o
}

func (o Options) validate() error {
	if o.LimitCents < 0 {
		return fmt.Errorf("payment: Options.LimitCents is %d, want >= 0 (0 means %d)", o.LimitCents, LimitCentsDefault)
	}
	return nil
}

// Register adds the charge-payment forward handler to p (no compensation:
// it is the pivot). Its tables live in p.Schema().
func Register(p *participants.Participant, opts Options) error {
	if p == nil {
		return errors.New("payment: Register: participant is nil")
	}
	h, err := newHandlers(p.Schema(), opts)
	if err != nil {
		return err
	}
	if err := p.Handle(orderapi.StepChargePayment, participants.WithBatch(h.charge, h.chargeBatch), nil); err != nil {
		return fmt.Errorf("payment: Register: %w", err)
	}
	return nil
}

// DB is what the helpers need: a pool, a connection or a transaction.
type DB = participants.DB

type handlers struct {
	ledger string // qualified table name
	opts   Options
}

func newHandlers(schema string, opts Options) (*handlers, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	return &handlers{ledger: pgx.Identifier{schema, "ledger"}.Sanitize(), opts: opts.WithDefaults()}, nil
}

// charge is the forward action: decline over the limit, else record one
// charge for the saga.
func decodeCharge(cmd message.Command) (orderapi.ChargePayment, error) {
	in, err := participants.Decode[orderapi.ChargePayment](cmd)
	if err != nil {
		return in, err
	}
	switch {
	case in.OrderID == "":
		return in, participants.InvalidField(cmd, "order_id", "is empty")
	case in.Customer == "":
		return in, participants.InvalidField(cmd, "customer", "is empty")
	case in.AmountCents < 0:
		return in, participants.InvalidField(cmd, "amount_cents", fmt.Sprintf("is %d, want >= 0", in.AmountCents))
	}
	return in, nil
}

func (h *handlers) charge(ctx context.Context, tx pgx.Tx, cmd message.Command) (participants.Result, error) {
	in, err := decodeCharge(cmd)
	if err != nil {
		return participants.Result{}, err
	}
	if in.AmountCents > h.opts.LimitCents {
		return participants.Fail(orderapi.ReasonPaymentDeclined), nil
	}
	var id int64
	err = tx.QueryRow(ctx, `INSERT INTO `+h.ledger+` (saga_id, order_id, customer, amount_cents, kind)
VALUES ($1, $2, $3, $4, 'charge')
ON CONFLICT (saga_id, kind) DO NOTHING
RETURNING id`, cmd.SagaID, in.OrderID, in.Customer, in.AmountCents).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		// Already charged: answer the first charge.
		err = tx.QueryRow(ctx, `SELECT id FROM `+h.ledger+` WHERE saga_id = $1 AND kind = 'charge'`, cmd.SagaID).Scan(&id)
	}
	if err != nil {
		return participants.Result{}, fmt.Errorf("payment charge saga %s order %q amount %d: %w", cmd.SagaID, in.OrderID, in.AmountCents, err)
	}
	return participants.Success(orderapi.ChargePaymentResult{PaymentID: strconv.FormatInt(id, 10)}), nil
}

// chargeBatch is the batch form of charge (participants.BatchFunc): the
// charges of a batch in one statement. A charge over the limit, or one the
// ledger already holds, is left to charge (a non-Success result sends the
// batch one by one).
func (h *handlers) chargeBatch(ctx context.Context, tx pgx.Tx, cmds []message.Command) ([]participants.Result, error) {
	out := make([]participants.Result, len(cmds))
	var (
		sagas             []uuid.UUID
		orders, customers []string
		amounts           []int64
	)
	for i, cmd := range cmds {
		in, err := decodeCharge(cmd)
		if err != nil {
			return nil, err
		}
		if in.AmountCents > h.opts.LimitCents {
			out[i] = participants.Fail(orderapi.ReasonPaymentDeclined)
			return out, nil
		}
		sagas, orders, customers, amounts = append(sagas, cmd.SagaID), append(orders, in.OrderID), append(customers, in.Customer), append(amounts, in.AmountCents)
	}
	ids, err := participants.QueryMap[uuid.UUID, int64](ctx, tx, `INSERT INTO `+h.ledger+` (saga_id, order_id, customer, amount_cents, kind)
SELECT s, o, c, a, 'charge' FROM unnest($1::uuid[], $2::text[], $3::text[], $4::bigint[]) AS u(s, o, c, a)
ON CONFLICT (saga_id, kind) DO NOTHING
RETURNING saga_id, id`, sagas, orders, customers, amounts)
	if err != nil {
		return nil, fmt.Errorf("payment charge %d orders: %w", len(cmds), err)
	}
	return participants.AnswerBatch(cmds, ids, func(id int64) any {
		return orderapi.ChargePaymentResult{PaymentID: strconv.FormatInt(id, 10)}
	}), nil
}

// Charges returns, per saga, how many charge rows the ledger holds (1 for a
// charged saga; more would break the at-most-once invariant).
func Charges(ctx context.Context, db DB, schema string) (map[uuid.UUID]int, error) {
	out, err := participants.QueryMap[uuid.UUID, int](ctx, db, `SELECT saga_id, count(*) FROM `+pgx.Identifier{schema, "ledger"}.Sanitize()+` WHERE kind = 'charge' GROUP BY saga_id`)
	if err != nil {
		return nil, fmt.Errorf("payment charges: %w", err)
	}
	return out, nil
}

// Charged returns the total charged per customer.
func Charged(ctx context.Context, db DB, schema string) (map[string]int64, error) {
	out, err := participants.QueryMap[string, int64](ctx, db, `SELECT customer, sum(amount_cents)::bigint FROM `+pgx.Identifier{schema, "ledger"}.Sanitize()+` WHERE kind = 'charge' GROUP BY customer`)
	if err != nil {
		return nil, fmt.Errorf("payment charged: %w", err)
	}
	return out, nil
}
