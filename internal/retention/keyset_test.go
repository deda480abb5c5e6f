package retention_test

import (
	"context"
	"testing"
	"time"

	"github.com/sagaflow/sagaflow/internal/retention"
	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/migrations"
)

// TestPurgeSagasBatchByBatchInCreationOrder: a cycle's saga batches go on
// from the last saga the batch before deleted, in (created_at, id) order.
// With 4-saga batches over 30 expired sagas created at three instants (ten
// each, so batches end among equal times), interleaved with sagas that
// must stay (audited, locked by another transaction, recent), every
// expired saga goes with its journal in one cycle and none that must stay
// does; the locked one goes in the next cycle.
func TestPurgeSagasBatchByBatchInCreationOrder(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	testkit.Migrate(t, pool, testkit.MustSets(t)(migrations.Orchestrator("orch")))
	ctx := context.Background()
	now := time.Now()
	old := now.Add(-40 * 24 * time.Hour)
	exec(t, pool, `INSERT INTO orch.sagas (id, type, definition_version, aggregate_id, idempotency_key, state, data, steps, version, created_at, updated_at, finished_at)
SELECT gen_random_uuid(), 'x', 1, 'a', 'k-' || i, CASE WHEN i % 2 = 0 THEN 'completed' ELSE 'compensated' END, '{}', '[]', 1,
  $1::timestamptz + make_interval(secs => i % 3), $1::timestamptz + make_interval(secs => i % 3), $1::timestamptz + make_interval(secs => i % 3)
FROM generate_series(1, 34) AS i`, old)
	exec(t, pool, `INSERT INTO orch.sagas (id, type, definition_version, aggregate_id, idempotency_key, state, data, steps, version, created_at, updated_at, finished_at)
VALUES (gen_random_uuid(), 'x', 1, 'a', 'recent', 'completed', '{}', '[]', 1, $1, $1, $1)`, now.Add(-time.Hour))
	exec(t, pool, `INSERT INTO orch.journal (saga_id, at, event, actor) SELECT id, created_at, 'started', '' FROM orch.sagas`)
	// Three audited sagas (an operator acted on them) stay.
	exec(t, pool, `INSERT INTO orch.journal (saga_id, at, event, actor)
SELECT id, created_at, 'operator resolve', 'alice@ops' FROM orch.sagas WHERE idempotency_key IN ('k-3', 'k-10', 'k-20')`)

	// Another transaction holds one expired saga's row: the purge passes it.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM orch.sagas WHERE idempotency_key = 'k-7' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}

	p, err := retention.New(pool, &retention.Config{OrchestratorSchema: "orch", BatchSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	got, err := p.PurgeOnce(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	if got["orch.sagas"] != 30 || got["orch.journal"] != 30 {
		t.Fatalf("first cycle purged %v; want the 30 expired sagas (34 less 3 audited, 1 locked) and their 30 journal rows", got)
	}
	left := count(t, pool, `SELECT count(*) FROM orch.sagas WHERE idempotency_key IN ('recent', 'k-3', 'k-10', 'k-20', 'k-7')`)
	if n := count(t, pool, `SELECT count(*) FROM orch.sagas`); n != 5 || left != 5 {
		t.Fatalf("%d sagas left (%d of them the recent, audited and locked ones); want exactly those 5", n, left)
	}
	if n := count(t, pool, `SELECT count(*) FROM orch.journal j WHERE NOT EXISTS (SELECT 1 FROM orch.sagas s WHERE s.id = j.saga_id)`); n != 0 {
		t.Fatalf("%d journal rows of purged sagas left", n)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	again, err := p.PurgeOnce(ctx, now)
	if err != nil || again["orch.sagas"] != 1 {
		t.Fatalf("second cycle purged %v, %v; want the saga that was locked", again, err)
	}
}
