package points

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

// Migrations returns the business-table migration set (entries, balances)
// for schema. The SDK's own sets come from migrations.Participant(schema).
func Migrations(schema string) ([]migrations.Set, error) {
	sub, err := fs.Sub(sqlFiles, "sql")
	if err != nil {
		return nil, fmt.Errorf("points migrations: %w", err)
	}
	s, err := migrations.FromFS(orderapi.Points, schema, sub)
	if err != nil {
		return nil, err
	}
	return []migrations.Set{s}, nil
}

// Options configures the points handler. The zero value never injects a
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
		return fmt.Errorf("points: Options.FailRate is %v, want a probability in [0, 1]", o.FailRate)
	}
	return nil
}

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
	if err := p.Handle(orderapi.StepAwardPoints, h.award, nil); err != nil {
		return fmt.Errorf("points: Register: %w", err)
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
	entries, balances string // qualified table names
	opts              Options
}

func newHandlers(schema string, opts Options) (*handlers, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	return &handlers{
		entries:  pgx.Identifier{schema, "entries"}.Sanitize(),
		balances: pgx.Identifier{schema, "balances"}.Sanitize(),
		opts:     opts,
	}, nil
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

// award is the forward action: one entry per order, added to the balance
// only when it is new.
func (h *handlers) award(ctx context.Context, tx pgx.Tx, cmd message.Command) (participants.Result, error) {
	in, err := participants.Decode[orderapi.AwardPoints](cmd)
	if err != nil {
		return participants.Result{}, err
	}
	switch {
	case in.OrderID == "":
		return participants.Result{}, invalid(cmd, "order_id", "is empty")
	case in.Customer == "":
		return participants.Result{}, invalid(cmd, "customer", "is empty")
	case in.Points < 0:
		return participants.Result{}, invalid(cmd, "points", fmt.Sprintf("is %d, want >= 0", in.Points))
	}
	if h.injectFailure(cmd) {
		return participants.RetryLater(orderapi.ReasonTransient), nil
	}
	tag, err := tx.Exec(ctx, `INSERT INTO `+h.entries+` (order_id, saga_id, customer, points)
VALUES ($1, $2, $3, $4)
ON CONFLICT DO NOTHING`, in.OrderID, cmd.SagaID, in.Customer, in.Points)
	if err != nil {
		return participants.Result{}, fmt.Errorf("points award saga %s order %q: insert entry: %w", cmd.SagaID, in.OrderID, err)
	}
	var balance int64
	if tag.RowsAffected() == 1 {
		err = tx.QueryRow(ctx, `INSERT INTO `+h.balances+` AS b (customer, points) VALUES ($1, $2)
ON CONFLICT (customer) DO UPDATE SET points = b.points + excluded.points, updated_at = now()
RETURNING points`, in.Customer, in.Points).Scan(&balance)
	} else {
		// Already awarded for this order (or by this saga): answer the balance.
		err = tx.QueryRow(ctx, `SELECT COALESCE((SELECT points FROM `+h.balances+` WHERE customer = $1), 0)`, in.Customer).Scan(&balance)
	}
	if err != nil {
		return participants.Result{}, fmt.Errorf("points award saga %s order %q customer %q: balance: %w", cmd.SagaID, in.OrderID, in.Customer, err)
	}
	return participants.Success(orderapi.AwardPointsResult{Balance: balance}), nil
}

// Entries returns, per saga, how many entries it created (0 or 1).
func Entries(ctx context.Context, db DB, schema string) (map[uuid.UUID]int, error) {
	rows, err := db.Query(ctx, `SELECT saga_id, count(*) FROM `+pgx.Identifier{schema, "entries"}.Sanitize()+` GROUP BY saga_id`)
	if err != nil {
		return nil, fmt.Errorf("points entries: %w", err)
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
		return nil, fmt.Errorf("points entries: %w", err)
	}
	return out, nil
}

// Balances returns every customer's balance.
func Balances(ctx context.Context, db DB, schema string) (map[string]int64, error) {
	rows, err := db.Query(ctx, `SELECT customer, points FROM `+pgx.Identifier{schema, "balances"}.Sanitize())
	if err != nil {
		return nil, fmt.Errorf("points balances: %w", err)
	}
	out := map[string]int64{}
	var (
		customer string
		n        int64
	)
	if _, err := pgx.ForEachRow(rows, []any{&customer, &n}, func() error {
		out[customer] = n
		return nil
	}); err != nil {
		return nil, fmt.Errorf("points balances: %w", err)
	}
	return out, nil
}
