// Package pgid converts ids for Postgres array parameters.
package pgid

import (
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// UUIDs converts ids for a uuid[] parameter: pgx encodes pgtype.UUID
// directly, while uuid.UUID goes through driver.Valuer and text, which
// showed in CPU profiles.
func UUIDs(ids []uuid.UUID) []pgtype.UUID {
	out := make([]pgtype.UUID, len(ids))
	for i, id := range ids {
		out[i] = pgtype.UUID{Bytes: id, Valid: true}
	}
	return out
}
