package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// DeadRow is an outbox row the relay parked after its publish attempts ran
// out (MarkDead).
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

// ListDead returns up to limit dead rows with ids above after, in id
// order (the index outbox_dead_idx serves it).
func (o *Outbox) ListDead(ctx context.Context, db DB, after int64, limit int) ([]DeadRow, error) {
	rows, err := db.Query(ctx, `SELECT id, topic, key, value, headers, attempts, coalesce(last_error, ''), created_at, dead_at
FROM `+pgx.Identifier{o.schema, "outbox"}.Sanitize()+`
WHERE dead_at IS NOT NULL AND sent_at IS NULL AND id > $1 ORDER BY id LIMIT $2`, after, limit)
	if err != nil {
		return nil, fmt.Errorf("outbox %s: list dead rows: %w", o.schema, err)
	}
	defer rows.Close()
	var out []DeadRow
	for rows.Next() {
		var r DeadRow
		var h []byte
		if err := rows.Scan(&r.ID, &r.Topic, &r.Key, &r.Value, &h, &r.Attempts, &r.LastError, &r.CreatedAt, &r.DeadAt); err != nil {
			return nil, fmt.Errorf("outbox %s: list dead rows: %w", o.schema, err)
		}
		if r.Headers, err = decodeHeaders(h); err != nil {
			return nil, fmt.Errorf("outbox %s: dead row %d headers: %w", o.schema, r.ID, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("outbox %s: list dead rows: %w", o.schema, err)
	}
	return out, nil
}

// Requeue makes the dead rows ids due again, in the caller's transaction:
// their dead mark and attempts are cleared (last_error is kept until the
// next failure) and the relay is notified at commit. It returns the ids it
// requeued; ids that are not dead rows (sent, deleted, live) are left
// alone. A requeued row keeps its id, so the relay claims it before newer
// rows, but rows of its key published meanwhile have overtaken it.
func (o *Outbox) Requeue(ctx context.Context, tx DB, ids []int64) ([]int64, error) {
	rows, err := tx.Query(ctx, `WITH r AS (
  UPDATE `+pgx.Identifier{o.schema, "outbox"}.Sanitize()+` SET dead_at = NULL, attempts = 0, available_at = now()
  WHERE id = ANY($1) AND dead_at IS NOT NULL AND sent_at IS NULL RETURNING id)
SELECT r.id FROM r, (SELECT pg_notify($2, '')) n ORDER BY r.id`, ids, o.channel)
	if err != nil {
		return nil, fmt.Errorf("outbox %s: requeue %d dead rows: %w", o.schema, len(ids), err)
	}
	done, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("outbox %s: requeue %d dead rows: %w", o.schema, len(ids), err)
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

// Status returns where the row id stands, and when it was sent or parked
// (zero for live and gone rows).
func (o *Outbox) Status(ctx context.Context, db DB, id int64) (RowStatus, time.Time, error) {
	var sent, dead *time.Time
	err := db.QueryRow(ctx, `SELECT sent_at, dead_at FROM `+pgx.Identifier{o.schema, "outbox"}.Sanitize()+` WHERE id = $1`, id).Scan(&sent, &dead)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return RowGone, time.Time{}, nil
	case err != nil:
		return RowGone, time.Time{}, fmt.Errorf("outbox %s: status of row %d: %w", o.schema, id, err)
	case sent != nil:
		return RowSent, *sent, nil
	case dead != nil:
		return RowDead, *dead, nil
	}
	return RowLive, time.Time{}, nil
}
