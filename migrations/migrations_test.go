package migrations_test

import (
	"context"
	"sync"
	"testing"

	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/migrations"
)

func TestMigrateConcurrentlyAppliesOnce(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	ctx := context.Background()
	orch, err := migrations.Orchestrator("orch")
	if err != nil {
		t.Fatal(err)
	}
	part, err := migrations.Participant("inventory")
	if err != nil {
		t.Fatal(err)
	}
	sets := append(orch, part...)
	var wg sync.WaitGroup
	counts := make([]int, 3)
	errs := make([]error, 3)
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, err := migrations.Migrate(ctx, pool, sets...)
			counts[i], errs[i] = len(a), err
		}()
	}
	wg.Wait()
	total := 0
	for i := range 3 {
		if errs[i] != nil {
			t.Fatalf("run %d: %v", i, errs[i])
		}
		total += counts[i]
	}
	want := 0
	for _, s := range sets {
		want += len(s.Migrations)
	}
	if total != want {
		t.Fatalf("applied %d migrations over three concurrent runs, want each of %d exactly once", total, want)
	}
	n, err := migrations.Pending(ctx, pool, sets...)
	if err != nil || n != 0 {
		t.Fatalf("pending = %d, %v; want 0", n, err)
	}
	for _, tbl := range []string{"orch.sagas", "orch.journal", "orch.outbox", "orch.inbox", "inventory.barrier", "inventory.outbox"} {
		var ok bool
		if err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, tbl).Scan(&ok); err != nil || !ok {
			t.Errorf("table %s missing after migrate (%v)", tbl, err)
		}
	}
}

func TestSchemaNameValidated(t *testing.T) {
	t.Parallel()
	if _, err := migrations.Orchestrator("bad-name; drop"); err == nil {
		t.Fatal("want an error for an invalid schema name")
	}
}
