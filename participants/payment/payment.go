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
	"github.com/sagaflow/sagaflow/participants/internal/refstep"
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
	if err := opts.validate(); err != nil {
		return err
	}
	return refstep.Register(p, orderapi.Payment, func(schema string) refstep.Step[orderapi.ChargePayment] { return step(schema, opts) })
}

// DB is what the helpers need: a pool, a connection or a transaction.
type DB = participants.DB

// step is the charge-payment step in schema: decline over the limit, else
// record one charge for the saga.
func step(schema string, opts Options) refstep.Step[orderapi.ChargePayment] {
	h := &handlers{ledger: refstep.Table(schema, "ledger"), limit: opts.WithDefaults().LimitCents}
	return refstep.Step[orderapi.ChargePayment]{Name: orderapi.StepChargePayment, Check: check, Forward: h.charge, ForwardMany: h.chargeBatch}
}

type handlers struct {
	ledger string // qualified table name
	limit  int64  // Options.LimitCents
}

func check(in orderapi.ChargePayment) (field, why string) {
	for _, f := range [...][2]string{{"order_id", in.OrderID}, {"customer", in.Customer}} {
		if f[1] == "" {
			return f[0], "is empty"
		}
	}
	if in.AmountCents < 0 {
		return "amount_cents", fmt.Sprintf("is %d, want >= 0", in.AmountCents)
	}
	return "", ""
}

func (h *handlers) charge(ctx context.Context, tx pgx.Tx, cmd message.Command, in orderapi.ChargePayment) (participants.Result, error) {
	if in.AmountCents > h.limit {
		return participants.Fail(orderapi.ReasonPaymentDeclined), nil
	}
	var id int64
	err := tx.QueryRow(ctx, `INSERT INTO `+h.ledger+` (saga_id, order_id, customer, amount_cents, kind)
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

// chargeBatch is the set-based form of charge: the charges of a batch in
// one statement. A charge over the limit, or one the ledger already holds,
// is left to charge alone.
func (h *handlers) chargeBatch(ctx context.Context, tx pgx.Tx, cmds []message.Command, ins []orderapi.ChargePayment) ([]participants.Result, error) {
	sagas, orders, customers, amounts := make([]uuid.UUID, len(cmds)), make([]string, len(cmds)), make([]string, len(cmds)), make([]int64, len(cmds))
	for i, in := range ins {
		if in.AmountCents > h.limit {
			return refstep.Stop(len(cmds), i, participants.Fail(orderapi.ReasonPaymentDeclined)), nil
		}
		sagas[i], orders[i], customers[i], amounts[i] = cmds[i].SagaID, in.OrderID, in.Customer, in.AmountCents
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
	return refstep.Read[uuid.UUID, int](ctx, db, "payment charges", `SELECT saga_id, count(*) FROM `+refstep.Table(schema, "ledger")+` WHERE kind = 'charge' GROUP BY saga_id`)
}

// Charged returns the total charged per customer.
func Charged(ctx context.Context, db DB, schema string) (map[string]int64, error) {
	return refstep.Read[string, int64](ctx, db, "payment charged", `SELECT customer, sum(amount_cents)::bigint FROM `+refstep.Table(schema, "ledger")+` WHERE kind = 'charge' GROUP BY customer`)
}
