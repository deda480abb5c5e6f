// Package pgid converts ids for Postgres array parameters and checks the
// schema names that go into SQL.
package pgid

import (
	"regexp"

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

// IdentifierPattern is the form of a schema name sagaflow accepts: an
// unquoted Postgres identifier in lower case, at most 63 bytes.
const IdentifierPattern = `[a-z_][a-z0-9_]{0,62}`

var identifierRE = regexp.MustCompile(`^` + IdentifierPattern + `$`)

// ValidIdentifier reports whether name matches IdentifierPattern.
func ValidIdentifier(name string) bool { return identifierRE.MatchString(name) }
