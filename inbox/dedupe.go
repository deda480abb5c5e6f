package inbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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
//
// The first attempt inserts the ids expecting none of them to be there (a
// plain INSERT: for Postgres one index descent per index and row, where
// INSERT ... ON CONFLICT first probes the unique index, inserts a
// speculative row, then confirms it with a WAL record of its own). A batch
// holding a message seen before (a redelivery) fails that insert with a
// unique violation (which Postgres logs); the batch then begins again with
// the insert that skips the ids already there and tells which are new.
func beginDeduped(ctx context.Context, pool *pgxpool.Pool, table string, ids []uuid.UUID, topics []string, queue func(*pgx.Batch), hooks *commitHooks) (pgx.Tx, map[uuid.UUID]bool, error) {
	tx, fresh, err := beginDedupedAs(ctx, pool, table, ids, topics, queue, hooks, false)
	var pgErr *pgconn.PgError
	if err != nil && len(ids) > 0 && errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return beginDedupedAs(ctx, pool, table, ids, topics, queue, hooks, true)
	}
	return tx, fresh, err
}

// beginDedupedAs is one attempt of beginDeduped: with skipSeen the insert
// skips the ids already recorded, else it fails on one.
func beginDedupedAs(ctx context.Context, pool *pgxpool.Pool, table string, ids []uuid.UUID, topics []string, queue func(*pgx.Batch), hooks *commitHooks, skipSeen bool) (pgx.Tx, map[uuid.UUID]bool, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("inbox: begin batch transaction: %w", err)
	}
	fresh := make(map[uuid.UUID]bool, len(ids))
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	switch {
	case len(ids) > 0 && !skipSeen:
		for _, id := range ids {
			fresh[id] = true
		}
		b.Queue("INSERT INTO "+table+" (message_id, topic) SELECT * FROM unnest($1::uuid[], $2::text[])", pgid.UUIDs(ids), topics)
	case len(ids) > 0:
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
	}
	if len(ids) > 0 {
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

// beginLazy is the begin of a batch whose message ids are recorded at the
// end: it sends nothing. BEGIN and the savepoint go with the handler's
// first statement, and the plain insert of ids goes first in the round
// trip that commits, so a participant's batch takes one round trip fewer.
// Every id is taken as new: a copy of a message seen before makes the
// commit fail (a unique violation), and the batch runs again the way
// beginDeduped begins it, which finds the copy before the handler runs
// (see Consumer.process: a batch that began lazily and did anything but
// apply every message runs again that way too, so the handler's answer for
// a copy is never kept).
func beginLazy(ctx context.Context, pool *pgxpool.Pool, table string, ids []uuid.UUID, topics []string, hooks *commitHooks) (*batchTx, map[uuid.UUID]bool, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("inbox: begin batch transaction: %w", err)
	}
	fresh := make(map[uuid.UUID]bool, len(ids))
	for _, id := range ids {
		fresh[id] = true
	}
	head := &pgx.Batch{}
	head.Queue("INSERT INTO "+table+" (message_id, topic) SELECT * FROM unnest($1::uuid[], $2::text[])", pgid.UUIDs(ids), topics)
	tx := &batchTx{conn: conn, hooks: hooks, lazy: true, head: head}
	tx.root = tx
	return tx, fresh, nil
}
