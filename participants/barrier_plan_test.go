package participants_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/sagaflow/sagaflow/participants"
)

// TestRecordForwardsFindsRowsByKeyInAGenericPlan: the statement recording
// a run of forwards' outcomes reaches each claimed row through the
// primary key even in a generic plan of a table without statistics,
// where an UPDATE joined to unnest was planned as a scan of the whole
// barrier (a cost growing with every step ever run).
func TestRecordForwardsFindsRowsByKeyInAGenericPlan(t *testing.T) {
	f := setup(t)
	claim, record := participants.BarrierStatements("pt")
	if _, err := f.pool.Exec(f.ctx, `INSERT INTO pt.barrier (saga_id, step, action, outcome)
SELECT gen_random_uuid(), 'step-' || i, 'forward', 'success' FROM generate_series(1, 2000) AS i`); err != nil {
		t.Fatalf("fill barrier: %v", err)
	}
	tx, err := f.pool.Begin(f.ctx)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	defer func() { _ = tx.Rollback(f.ctx) }()
	if _, err := tx.Exec(f.ctx, `SET LOCAL plan_cache_mode = force_generic_plan`); err != nil {
		t.Fatalf("generic plans: %v", err)
	}
	id := pgtype.UUID{Bytes: uuid.New(), Valid: true}
	ids, steps := []pgtype.UUID{id}, []string{"reserve"}
	if _, err := tx.Exec(f.ctx, claim, ids, steps); err != nil {
		t.Fatalf("claim: %v", err)
	}
	if _, err := tx.Prepare(f.ctx, "record", record); err != nil {
		t.Fatalf("prepare record: %v", err)
	}
	// EXPLAIN takes no parameters: the arguments are literals.
	rows, err := tx.Query(f.ctx, fmt.Sprintf(`EXPLAIN (ANALYZE, COSTS OFF)
EXECUTE record('{%s}', '{reserve}', '{success}', '{""}', '{NULL}')`, uuid.UUID(id.Bytes)))
	if err != nil {
		t.Fatalf("explain record: %v", err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("explain record: %v", err)
	}
	plan := strings.Join(lines, "\n")
	if strings.Contains(plan, "Seq Scan on barrier") {
		t.Fatalf("recording one forward scans the whole barrier:\n%s", plan)
	}
	var outcome string
	if err := tx.QueryRow(f.ctx, `SELECT outcome FROM pt.barrier WHERE saga_id = $1 AND step = 'reserve' AND action = 'forward'`, id).Scan(&outcome); err != nil {
		t.Fatalf("read back: %v", err)
	}
	if outcome != "success" {
		t.Fatalf("outcome recorded = %q, want success:\n%s", outcome, plan)
	}
}
