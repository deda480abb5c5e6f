package outboxdb

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/migrations"
)

// The stats query reads the live unsent rows through outbox_unsent_idx and
// the dead ones through outbox_dead_idx (the indexes the relay's claim and
// the dead-row listing keep anyway), never the table, and counts right:
// sent rows, dead rows and live rows are told apart.
func TestStatsReadTheRelaysPartialIndexes(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	pool := testkit.Pool(t)
	testkit.Migrate(t, pool, testkit.MustSets(t)(migrations.Orchestrator("orch")))
	o, err := New("orch")
	if err != nil {
		t.Fatal(err)
	}
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// 2,000 sent rows (history the stats must not read), 30 live unsent
	// rows, the oldest 2 minutes old, and 4 dead ones.
	exec(`INSERT INTO orch.outbox (topic, key, value, sent_at) SELECT 't', 'k', '\x00', now() FROM generate_series(1, 2000)`)
	exec(`INSERT INTO orch.outbox (topic, key, value, created_at) SELECT 't', 'k', '\x00', now() - interval '2 minutes' + g * interval '1 second' FROM generate_series(0, 29) g`)
	exec(`INSERT INTO orch.outbox (topic, key, value, created_at, dead_at) SELECT 't', 'k', '\x00', now() - interval '1 hour', now() FROM generate_series(1, 4)`)
	exec(`ANALYZE orch.outbox`)

	s, err := o.Stats(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if s.Pending != 30 || s.Dead != 4 || s.OldestUnsent < 2*time.Minute || s.OldestUnsent > 3*time.Minute {
		t.Fatalf("Stats = %+v, want 30 pending, 4 dead, oldest unsent about 2 minutes", s)
	}

	tx, err := pool.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	for _, set := range []string{"SET LOCAL enable_seqscan = off", "SET LOCAL enable_bitmapscan = off"} {
		if _, err := tx.Exec(ctx, set); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := tx.Query(ctx, "EXPLAIN "+o.statsSQL)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	plan := strings.Join(lines, "\n")
	t.Logf("plan of the outbox stats:\n%s", plan)
	for _, idx := range []string{"outbox_unsent_idx", "outbox_dead_idx"} {
		if !strings.Contains(plan, idx) {
			t.Errorf("the stats do not read %s:\n%s", idx, plan)
		}
	}
	if strings.Contains(plan, "Seq Scan") || strings.Contains(plan, "Bitmap") {
		t.Errorf("the stats read the table or a bitmap of it:\n%s", plan)
	}
}
