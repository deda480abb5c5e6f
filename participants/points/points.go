package points

import (
	"context"
	"embed"
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

// Migrations returns the business-table migration set (entries, balances)
// for schema. The SDK's own sets come from migrations.Participant(schema).
func Migrations(schema string) ([]migrations.Set, error) {
	return migrations.FromEmbedded(orderapi.Points, schema, sqlFiles, "sql")
}

// Options configures the points handler: transient-failure injection (see
// package flaky). The zero value never injects a failure.
type Options = flaky.Options

// Register adds the award-points forward handler to p (no compensation: the
// step is retryable, after the pivot). Its tables live in p.Schema().
func Register(p *participants.Participant, opts Options) error {
	return refstep.Register(p, orderapi.Points, func(schema string) refstep.Step[orderapi.AwardPoints] { return step(schema, opts) })
}

// DB is what the helpers need: a pool, a connection or a transaction.
type DB = participants.DB

// step is the award-points step in schema: one entry per order, added to
// the balance only when it is new.
func step(schema string, opts Options) refstep.Step[orderapi.AwardPoints] {
	h := &handlers{entries: refstep.Table(schema, "entries"), balances: refstep.Table(schema, "balances")}
	return refstep.Step[orderapi.AwardPoints]{Name: orderapi.StepAwardPoints, Check: check, Forward: h.award, ForwardMany: h.awardBatch, Flaky: opts}
}

type handlers struct {
	entries, balances string // qualified table names
}

func check(in orderapi.AwardPoints) (field, why string) {
	switch {
	case in.OrderID == "":
		return "order_id", "is empty"
	case in.Customer == "":
		return "customer", "is empty"
	case in.Points < 0:
		return "points", fmt.Sprintf("is %d, want >= 0", in.Points)
	}
	return "", ""
}

func (h *handlers) award(ctx context.Context, tx pgx.Tx, cmd message.Command, in orderapi.AwardPoints) (participants.Result, error) {
	// One statement: the entry, and the balance raised only when the entry
	// is new; a repeat answers the balance as it is. The final SELECT reads
	// balances as they were before the statement, so it is only the
	// fallback when nothing was added.
	var balance int64
	err := tx.QueryRow(ctx, `WITH e AS (
  INSERT INTO `+h.entries+` (order_id, saga_id, customer, points) VALUES ($1, $2, $3, $4)
  ON CONFLICT DO NOTHING
  RETURNING customer, points),
b AS (
  INSERT INTO `+h.balances+` AS b (customer, points) SELECT customer, points FROM e
  ON CONFLICT (customer) DO UPDATE SET points = b.points + excluded.points, updated_at = now()
  RETURNING points)
SELECT COALESCE((SELECT points FROM b), (SELECT points FROM `+h.balances+` WHERE customer = $3), 0)`,
		in.OrderID, cmd.SagaID, in.Customer, in.Points).Scan(&balance)
	if err != nil {
		return participants.Result{}, fmt.Errorf("points award saga %s order %q customer %q: balance: %w", cmd.SagaID, in.OrderID, in.Customer, err)
	}
	return participants.Success(orderapi.AwardPointsResult{Balance: balance}), nil
}

// awardBatch is the set-based form of award: the entries of a batch and
// one balance update per customer in one statement. Each command answers
// the balance award would have answered had the batch's commands run one
// by one in order: the balance before the batch plus the customer's points
// up to and including its own. An order that already has its entry is
// left to award alone.
func (h *handlers) awardBatch(ctx context.Context, tx pgx.Tx, cmds []message.Command, ins []orderapi.AwardPoints) ([]participants.Result, error) {
	orders, sagas, customers, pts := make([]string, len(cmds)), make([]uuid.UUID, len(cmds)), make([]string, len(cmds)), make([]int64, len(cmds))
	for i, in := range ins {
		orders[i], sagas[i], customers[i], pts[i] = in.OrderID, cmds[i].SagaID, in.Customer, in.Points
	}
	balances, err := participants.QueryMap[uuid.UUID, int64](ctx, tx, `WITH req AS (
  SELECT * FROM unnest($1::text[], $2::uuid[], $3::text[], $4::bigint[]) WITH ORDINALITY AS r(order_id, saga_id, customer, points, ord)),
e AS (
  INSERT INTO `+h.entries+` (order_id, saga_id, customer, points) SELECT order_id, saga_id, customer, points FROM req
  ON CONFLICT DO NOTHING
  RETURNING saga_id),
tot AS (SELECT customer, sum(points)::bigint AS points FROM req JOIN e USING (saga_id) GROUP BY customer),
b AS (
  INSERT INTO `+h.balances+` AS b (customer, points) SELECT customer, points FROM tot
  ON CONFLICT (customer) DO UPDATE SET points = b.points + excluded.points, updated_at = now()
  RETURNING customer, points)
SELECT req.saga_id, (b.points - tot.points + sum(req.points) OVER (PARTITION BY req.customer ORDER BY req.ord))::bigint
FROM req JOIN e USING (saga_id) JOIN tot USING (customer) JOIN b USING (customer)`, orders, sagas, customers, pts)
	if err != nil {
		return nil, fmt.Errorf("points award %d orders: %w", len(cmds), err)
	}
	return participants.AnswerBatch(cmds, balances, func(b int64) any { return orderapi.AwardPointsResult{Balance: b} }), nil
}

// Entries returns, per saga, how many entries it created (0 or 1).
func Entries(ctx context.Context, db DB, schema string) (map[uuid.UUID]int, error) {
	return refstep.Read[uuid.UUID, int](ctx, db, "points entries", `SELECT saga_id, count(*) FROM `+refstep.Table(schema, "entries")+` GROUP BY saga_id`)
}

// Balances returns every customer's balance.
func Balances(ctx context.Context, db DB, schema string) (map[string]int64, error) {
	return refstep.Read[string, int64](ctx, db, "points balances", `SELECT customer, points FROM `+refstep.Table(schema, "balances"))
}
