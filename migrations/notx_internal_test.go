package migrations

import (
	"slices"
	"testing"
)

func TestStatements(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		sql  string
		want []string
	}{
		"comments and blanks dropped": {"-- sagaflow:no-transaction\n-- why\n\nDROP INDEX CONCURRENTLY IF EXISTS a;\n", []string{"DROP INDEX CONCURRENTLY IF EXISTS a;"}},
		"multi-line statement":        {"CREATE INDEX CONCURRENTLY a ON t (x)\n    WHERE y;\nDROP INDEX b;", []string{"CREATE INDEX CONCURRENTLY a ON t (x)\n    WHERE y;", "DROP INDEX b;"}},
		"last without semicolon":      {"SELECT 1;\nSELECT 2", []string{"SELECT 1;", "SELECT 2"}},
		"nothing":                     {"-- only a comment\n", nil},
	} {
		if got := statements(c.sql); !slices.Equal(got, c.want) {
			t.Errorf("%s: statements = %q, want %q", name, got, c.want)
		}
	}
}
