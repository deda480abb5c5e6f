package migrations

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// applyOutsideTx runs the statements of a NoTransactionMarker migration
// one by one, each in its own implicit transaction, then records the
// version (record, with args). An error names the statement that failed.
func applyOutsideTx(ctx context.Context, conn *pgx.Conn, sql, record string, args ...any) error {
	for i, st := range statements(sql) {
		if _, err := conn.Exec(ctx, st); err != nil {
			return fmt.Errorf("statement %d (%.80s): %w", i+1, st, err)
		}
	}
	_, err := conn.Exec(ctx, record, args...)
	return err
}

// statements splits sql into its statements: a statement ends with a line
// ending in ";". Comment lines (--) and blank lines are dropped.
func statements(sql string) []string {
	var out []string
	var cur []string
	for line := range strings.SplitSeq(sql, "\n") {
		t := strings.TrimSpace(line)
		if t == "" || strings.HasPrefix(t, "--") {
			continue
		}
		cur = append(cur, line)
		if strings.HasSuffix(t, ";") {
			out = append(out, strings.Join(cur, "\n"))
			cur = nil
		}
	}
	if len(cur) > 0 {
		out = append(out, strings.Join(cur, "\n"))
	}
	return out
}
