package inbox

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sagaflow/sagaflow/internal/pgid"
)

// beginDeduped begins the batch transaction, records ids in the inbox
// table and sets batchSavepoint, all in one round trip (BEGIN pipelined
// with the statements), and returns the transaction and the ids that were
// not there yet. With no ids it only begins. queue, when not nil, adds the
// handler's prefetch reads after them. The transaction holds its own pool
// connection (see batchTx); hooks are the batch's. On error nothing is
// left open.
func beginDeduped(ctx context.Context, pool *pgxpool.Pool, table string, ids []uuid.UUID, topics []string, queue func(*pgx.Batch), hooks *commitHooks) (pgx.Tx, map[uuid.UUID]bool, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("inbox: begin batch transaction: %w", err)
	}
	fresh := make(map[uuid.UUID]bool, len(ids))
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	if len(ids) > 0 {
		b.Queue("INSERT INTO "+table+" (message_id, topic) SELECT * FROM unnest($1::uuid[], $2::text[]) ON CONFLICT DO NOTHING RETURNING message_id",
			pgid.UUIDs(ids), topics).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var id pgtype.UUID
				if err := rows.Scan(&id); err != nil {
					return fmt.Errorf("scan: %w", err)
				}
				fresh[uuid.UUID(id.Bytes)] = true
			}
			return rows.Err()
		})
		b.Queue("SAVEPOINT " + batchSavepoint)
		if queue != nil {
			queue(b)
		}
	}
	br := conn.Conn().SendBatch(ctx, b)
	tx := &batchTx{flushing: flushing{Tx: br.Tx()}, conn: conn, hooks: hooks}
	tx.root = tx
	if err := br.Close(); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		if len(ids) == 0 {
			return nil, nil, fmt.Errorf("inbox: begin batch transaction: %w", err)
		}
		return nil, nil, fmt.Errorf("inbox: begin the batch transaction and record %d message ids in %s: %w", len(ids), table, err)
	}
	return tx, fresh, nil
}
