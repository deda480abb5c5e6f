package retention

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/migrations"
)

// TestSagaPurgeReadsCreationOrderFromItsPosition checks with EXPLAIN, on
// 20,000 analyzed sagas, that both saga purges find their batch on
// sagas_created_idx with the position (created_at, id) as an index
// condition, so a batch starts where the one before it stopped, and never
// read the whole saga table. (The journal's plan depends on its size: on
// this small table Postgres reads it whole, on a long history by its key.)
func TestSagaPurgeReadsCreationOrderFromItsPosition(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	testkit.Migrate(t, pool, testkit.MustSets(t)(migrations.Orchestrator("orch")))
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `
INSERT INTO orch.sagas (id, type, definition_version, aggregate_id, idempotency_key, state, data, steps, version, created_at, updated_at, finished_at)
SELECT gen_random_uuid(), 'x', 1, 'a', 'k-' || i, CASE WHEN i % 100 = 0 THEN 'failed' ELSE 'completed' END, '{}', '[]', 1,
  now() - make_interval(mins => i), now() - make_interval(mins => i), now() - make_interval(mins => i)
FROM generate_series(1, 20000) AS i;
INSERT INTO orch.journal (saga_id, at, event, actor) SELECT id, created_at, 'started', '' FROM orch.sagas`); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`VACUUM ANALYZE orch.sagas`, `VACUUM ANALYZE orch.journal`} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	finished, failed := sagaPurgeSQL("orch")
	now := time.Now()
	for name, q := range map[string]string{"finished": finished, "failed": failed} {
		for _, from := range []time.Time{{}, now.Add(-10 * 24 * time.Hour)} {
			rows, err := pool.Query(ctx, "EXPLAIN "+q, now.Add(-24*time.Hour), 1000, from, "00000000-0000-0000-0000-000000000000")
			if err != nil {
				t.Fatal(err)
			}
			lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			plan := strings.Join(lines, "\n")
			if !strings.Contains(plan, "sagas_created_idx") || !strings.Contains(plan, "ROW(created_at, id) >") ||
				strings.Contains(plan, "Seq Scan on sagas") {
				t.Errorf("the %s purge from %s does not start at its position on sagas_created_idx:\n%s", name, from.Format(time.DateTime), plan)
			}
		}
	}
}
