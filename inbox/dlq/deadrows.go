package dlq

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/internal/jsonlite"
	"github.com/sagaflow/sagaflow/internal/outboxdb"
)

// DeadRow is an outbox row the relay parked after its publish attempts ran
// out.
type DeadRow struct {
	ID        int64             `json:"id"`
	Topic     string            `json:"topic"`
	Key       string            `json:"key"`
	Value     []byte            `json:"value"`
	Headers   map[string]string `json:"headers"`
	Attempts  int               `json:"attempts"`
	LastError string            `json:"last_error"`
	CreatedAt time.Time         `json:"created_at"`
	DeadAt    time.Time         `json:"dead_at"`
}

// listDead returns up to limit dead rows of o with ids above after, in id
// order (the index outbox_dead_idx serves it).
func listDead(ctx context.Context, db outboxdb.DB, o *outboxdb.Table, after int64, limit int) ([]DeadRow, error) {
	rows, err := db.Query(ctx, `SELECT id, topic, key, value, headers, attempts, coalesce(last_error, ''), created_at, dead_at
FROM `+pgx.Identifier{o.Schema(), "outbox"}.Sanitize()+`
WHERE dead_at IS NOT NULL AND sent_at IS NULL AND id > $1 ORDER BY id LIMIT $2`, after, limit)
	if err != nil {
		return nil, fmt.Errorf("outbox %s: list dead rows: %w", o.Schema(), err)
	}
	defer rows.Close()
	var out []DeadRow
	for rows.Next() {
		var r DeadRow
		var h []byte
		if err := rows.Scan(&r.ID, &r.Topic, &r.Key, &r.Value, &h, &r.Attempts, &r.LastError, &r.CreatedAt, &r.DeadAt); err != nil {
			return nil, fmt.Errorf("outbox %s: list dead rows: %w", o.Schema(), err)
		}
		if r.Headers, err = jsonlite.ReadStringMap(h); err != nil {
			return nil, fmt.Errorf("outbox %s: dead row %d headers: %w", o.Schema(), r.ID, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("outbox %s: list dead rows: %w", o.Schema(), err)
	}
	return out, nil
}

// requeue makes the dead rows ids of o due again, in the caller's transaction:
// their dead mark and attempts are cleared (last_error is kept until the
// next failure) and the relay is notified at commit. It returns the ids it
// requeued; ids that are not dead rows (sent, deleted, live) are left
// alone. A requeued row keeps its id, so the relay claims it before newer
// rows, but rows of its key published meanwhile have overtaken it.
func requeue(ctx context.Context, tx outboxdb.DB, o *outboxdb.Table, ids []int64) ([]int64, error) {
	rows, err := tx.Query(ctx, `WITH r AS (
  UPDATE `+pgx.Identifier{o.Schema(), "outbox"}.Sanitize()+` SET dead_at = NULL, attempts = 0, available_at = now()
  WHERE id = ANY($1) AND dead_at IS NOT NULL AND sent_at IS NULL RETURNING id)
SELECT r.id FROM r, (SELECT pg_notify($2, '')) n ORDER BY r.id`, ids, o.Channel())
	if err != nil {
		return nil, fmt.Errorf("outbox %s: requeue %d dead rows: %w", o.Schema(), len(ids), err)
	}
	done, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("outbox %s: requeue %d dead rows: %w", o.Schema(), len(ids), err)
	}
	return done, nil
}

// RowStatus is where an outbox row stands: RowDead (parked by the relay),
// RowLive (waiting to be published), RowSent (published and kept for
// retention), or RowGone (no such row: never written, published and
// deleted, or purged).
type RowStatus string

// The statuses of an outbox row.
const (
	RowGone RowStatus = ""
	RowLive RowStatus = "live"
	RowDead RowStatus = "dead"
	RowSent RowStatus = "sent"
)

// rowStatus returns where the row id of o stands, and when it was sent or parked
// (zero for live and gone rows).
func rowStatus(ctx context.Context, db outboxdb.DB, o *outboxdb.Table, id int64) (RowStatus, time.Time, error) {
	var sent, dead *time.Time
	err := db.QueryRow(ctx, `SELECT sent_at, dead_at FROM `+pgx.Identifier{o.Schema(), "outbox"}.Sanitize()+` WHERE id = $1`, id).Scan(&sent, &dead)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return RowGone, time.Time{}, nil
	case err != nil:
		return RowGone, time.Time{}, fmt.Errorf("outbox %s: status of row %d: %w", o.Schema(), id, err)
	case sent != nil:
		return RowSent, *sent, nil
	case dead != nil:
		return RowDead, *dead, nil
	}
	return RowLive, time.Time{}, nil
}
