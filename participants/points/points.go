package points

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
	if p == nil {
		return errors.New("points: Register: participant is nil")
	}
	h, err := newHandlers(p.Schema(), opts)
	if err != nil {
		return err
	}
	if err := p.Handle(orderapi.StepAwardPoints, participants.WithBatch(h.award, h.awardBatch), nil); err != nil {
		return fmt.Errorf("points: Register: %w", err)
	}
	return nil
}

// DB is what the helpers need: a pool, a connection or a transaction.
type DB = participants.DB

type handlers struct {
	entries, balances string // qualified table names
	opts              Options
}

func newHandlers(schema string, opts Options) (*handlers, error) {
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("points: %w", err)
	}
	return &handlers{
		entries:  pgx.Identifier{schema, "entries"}.Sanitize(),
		balances: pgx.Identifier{schema, "balances"}.Sanitize(),
		opts:     opts,
	}, nil
}

// award is the forward action: one entry per order, added to the balance
// only when it is new.
func decodeAward(cmd message.Command) (orderapi.AwardPoints, error) {
	in, err := participants.Decode[orderapi.AwardPoints](cmd)
	if err != nil {
		return in, err
	}
	switch {
	case in.OrderID == "":
		return in, participants.InvalidField(cmd, "order_id", "is empty")
	case in.Customer == "":
		return in, participants.InvalidField(cmd, "customer", "is empty")
	case in.Points < 0:
		return in, participants.InvalidField(cmd, "points", fmt.Sprintf("is %d, want >= 0", in.Points))
	}
	return in, nil
}

func (h *handlers) award(ctx context.Context, tx pgx.Tx, cmd message.Command) (participants.Result, error) {
	in, err := decodeAward(cmd)
	if err != nil {
		return participants.Result{}, err
	}
	if h.opts.Fails(cmd) {
		return participants.RetryLater(orderapi.ReasonTransient), nil
	}
	// One statement: the entry, and the balance raised only when the entry
	// is new; a repeat answers the balance as it is. The final SELECT reads
	// balances as they were before the statement, so it is only the
	// fallback when nothing was added.
	var balance int64
	err = tx.QueryRow(ctx, `WITH e AS (
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

// awardBatch is the batch form of award (participants.BatchFunc): the
// entries of a batch and one balance update per customer in one statement.
// Each command answers the balance award would have answered had the
// batch's commands run one by one in order: the balance before the batch
// plus the customer's points up to and including its own. An order that
// already has its entry, and a command the fault option fails, are left to
// award (a non-Success result sends the batch one by one).
func (h *handlers) awardBatch(ctx context.Context, tx pgx.Tx, cmds []message.Command) ([]participants.Result, error) {
	out := make([]participants.Result, len(cmds))
	var (
		orders, customers []string
		sagas             []uuid.UUID
		pts               []int64
	)
	seen := make(map[uuid.UUID]bool, len(cmds))
	for i, cmd := range cmds {
		in, err := decodeAward(cmd)
		if err != nil {
			return nil, err
		}
		if seen[cmd.SagaID] {
			return nil, fmt.Errorf("points award: saga %s twice in one batch", cmd.SagaID)
		}
		seen[cmd.SagaID] = true
		if h.opts.Fails(cmd) {
			out[i] = participants.RetryLater(orderapi.ReasonTransient)
			return out, nil
		}
		orders, sagas, customers, pts = append(orders, in.OrderID), append(sagas, cmd.SagaID), append(customers, in.Customer), append(pts, in.Points)
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
	out, err := participants.QueryMap[uuid.UUID, int](ctx, db, `SELECT saga_id, count(*) FROM `+pgx.Identifier{schema, "entries"}.Sanitize()+` GROUP BY saga_id`)
	if err != nil {
		return nil, fmt.Errorf("points entries: %w", err)
	}
	return out, nil
}

// Balances returns every customer's balance.
func Balances(ctx context.Context, db DB, schema string) (map[string]int64, error) {
	out, err := participants.QueryMap[string, int64](ctx, db, `SELECT customer, points FROM `+pgx.Identifier{schema, "balances"}.Sanitize())
	if err != nil {
		return nil, fmt.Errorf("points balances: %w", err)
	}
	return out, nil
}
