package inbox

import (
	"context"
	"fmt"
	"github.com/sagaflow/sagaflow/internal/pgid"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// dedupe records ids in the inbox table in one statement, sets
// batchSavepoint after it in the same round trip, and returns the ids that
// were not there yet.
func dedupe(ctx context.Context, tx pgx.Tx, table string, ids []uuid.UUID, topics []string) (map[uuid.UUID]bool, error) {
	fresh := make(map[uuid.UUID]bool, len(ids))
	if len(ids) == 0 {
		return fresh, nil
	}
	b := &pgx.Batch{}
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
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("inbox: record %d message ids in %s: %w", len(ids), table, err)
	}
	return fresh, nil
}
