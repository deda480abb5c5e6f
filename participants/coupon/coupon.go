package coupon

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

// DiscountCentsDefault is the discount of a coupon seeded by Seed.
const DiscountCentsDefault int64 = 500

// Migrations returns the business-table migration set (coupons) for schema.
// The SDK's own sets come from migrations.Participant(schema).
func Migrations(schema string) ([]migrations.Set, error) {
	return migrations.FromEmbedded(orderapi.Coupon, schema, sqlFiles, "sql")
}

// Options configures the coupon handlers. The zero value is ready to use;
// there is nothing to tune today.
type Options struct{}

// Register adds the lock-coupon forward and compensate handlers to p. Its
// tables live in p.Schema().
func Register(p *participants.Participant, opts Options) error {
	return refstep.Register(p, orderapi.Coupon, step)
}

// DB is what the helpers need: a pool, a connection or a transaction.
type DB = participants.DB

// step is the lock-coupon step in schema.
func step(schema string) refstep.Step[orderapi.LockCoupon] {
	h := &handlers{coupons: refstep.Table(schema, "coupons")}
	return refstep.Step[orderapi.LockCoupon]{Name: orderapi.StepLockCoupon, Check: check, Forward: h.lock, ForwardMany: h.lockBatch, Compensate: h.unlock}
}

type handlers struct {
	coupons string // qualified table name
}

func check(in orderapi.LockCoupon) (field, why string) {
	if in.OrderID == "" {
		return "order_id", "is empty"
	}
	return "", ""
}

// lock is the forward action: take the coupon for this saga.
func (h *handlers) lock(ctx context.Context, tx pgx.Tx, cmd message.Command, in orderapi.LockCoupon) (participants.Result, error) {
	if in.Code == "" {
		return participants.Success(orderapi.LockCouponResult{}), nil
	}
	var discount int64
	err := tx.QueryRow(ctx, `UPDATE `+h.coupons+`
SET locked_by = $2, locked_at = COALESCE(locked_at, now())
WHERE code = $1 AND (locked_by IS NULL OR locked_by = $2)
RETURNING discount_cents`, in.Code, cmd.SagaID).Scan(&discount)
	if err == nil {
		return participants.Success(orderapi.LockCouponResult{DiscountCents: discount}), nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return participants.Result{}, fmt.Errorf("coupon lock saga %s code %q: %w", cmd.SagaID, in.Code, err)
	}
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+h.coupons+` WHERE code = $1)`, in.Code).Scan(&exists); err != nil {
		return participants.Result{}, fmt.Errorf("coupon lock saga %s code %q: look up code: %w", cmd.SagaID, in.Code, err)
	}
	if !exists {
		return participants.Fail(orderapi.ReasonUnknownCoupon), nil
	}
	return participants.Fail(orderapi.ReasonCouponTaken), nil
}

// lockBatch is the set-based form of lock: the
// coupons of a batch's orders taken in one statement (orders without a code
// need none). A code that is unknown, held by another saga, or wanted by
// two sagas of the batch is left to lock (a non-Success result sends the
// batch one by one, where the first saga takes it and the other is told).
func (h *handlers) lockBatch(ctx context.Context, tx pgx.Tx, cmds []message.Command, ins []orderapi.LockCoupon) ([]participants.Result, error) {
	var (
		sagas, none []uuid.UUID
		codes       []string
	)
	for i, cmd := range cmds {
		in := ins[i]
		if in.Code == "" {
			none = append(none, cmd.SagaID)
			continue
		}
		sagas, codes = append(sagas, cmd.SagaID), append(codes, in.Code)
	}
	discounts := map[uuid.UUID]int64{}
	if len(sagas) > 0 {
		var err error
		discounts, err = participants.QueryMap[uuid.UUID, int64](ctx, tx, `UPDATE `+h.coupons+` AS c
SET locked_by = u.saga, locked_at = COALESCE(c.locked_at, now())
FROM unnest($1::uuid[], $2::text[]) AS u(saga, code)
WHERE c.code = u.code AND (c.locked_by IS NULL OR c.locked_by = u.saga)
RETURNING u.saga, c.discount_cents`, sagas, codes)
		if err != nil {
			return nil, fmt.Errorf("coupon lock %d codes: %w", len(sagas), err)
		}
	}
	for _, id := range none {
		discounts[id] = 0 // no code: nothing to take
	}
	return participants.AnswerBatch(cmds, discounts, func(d int64) any { return orderapi.LockCouponResult{DiscountCents: d} }), nil
}

// unlock is the compensation: free the coupon if, and only if, this saga
// holds it.
func (h *handlers) unlock(ctx context.Context, tx pgx.Tx, cmd message.Command, in orderapi.LockCoupon) (participants.Result, error) {
	if in.Code == "" {
		return participants.Success(nil), nil
	}
	if _, err := tx.Exec(ctx, `UPDATE `+h.coupons+`
SET locked_by = NULL, locked_at = NULL
WHERE code = $1 AND locked_by = $2`, in.Code, cmd.SagaID); err != nil {
		return participants.Result{}, fmt.Errorf("coupon unlock saga %s code %q: %w", cmd.SagaID, in.Code, err)
	}
	return participants.Success(nil), nil
}

// Seed inserts codes as free coupons worth DiscountCentsDefault; existing
// codes are left as they are.
func Seed(ctx context.Context, db DB, schema string, codes ...string) error {
	coupons := pgx.Identifier{schema, "coupons"}.Sanitize()
	for _, code := range codes {
		if code == "" {
			return errors.New("coupon seed: empty code")
		}
		if _, err := db.Exec(ctx, `INSERT INTO `+coupons+` (code, discount_cents) VALUES ($1, $2)
ON CONFLICT (code) DO NOTHING`, code, DiscountCentsDefault); err != nil {
			return fmt.Errorf("coupon seed code %q: %w", code, err)
		}
	}
	return nil
}

// Locks returns every locked coupon's code and the saga holding it.
func Locks(ctx context.Context, db DB, schema string) (map[string]uuid.UUID, error) {
	return refstep.Read[string, uuid.UUID](ctx, db, "coupon locks", `SELECT code, locked_by FROM `+refstep.Table(schema, "coupons")+` WHERE locked_by IS NOT NULL`)
}
