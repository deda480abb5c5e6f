package participants

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sagaflow/sagaflow/message"
)

// DB is what participants' read helpers need: a pool, a connection or a
// transaction.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// InvalidField returns an error wrapping message.ErrInvalid that names the
// command (step, action, saga) and the payload field that is wrong, for a
// handler to return when a decoded payload fails validation.
func InvalidField(cmd message.Command, field, why string) error {
	return fmt.Errorf("%w: step %q %s saga %s: payload field %q %s",
		message.ErrInvalid, cmd.Step, cmd.Action, cmd.SagaID, field, why)
}

// QueryMap runs sql on db, whose rows are (key, value) pairs, and returns
// them as a map (a later row with the same key wins). Participants use it
// for their read helpers (counts per saga, balances per customer).
func QueryMap[K comparable, V any](ctx context.Context, db DB, sql string, args ...any) (map[K]V, error) {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	out := map[K]V{}
	var (
		k K
		v V
	)
	if _, err := pgx.ForEachRow(rows, []any{&k, &v}, func() error {
		out[k] = v
		return nil
	}); err != nil {
		return nil, err
	}
	return out, nil
}
