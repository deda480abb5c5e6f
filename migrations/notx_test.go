package migrations_test

import (
	"context"
	"testing"
	"testing/fstest"

	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/migrations"
)

// TestNoTransactionMigration: a file whose first line is the marker runs
// outside a transaction (CREATE INDEX CONCURRENTLY fails inside one), is
// recorded once, and a file without it still runs in one transaction (a
// failing statement undoes the ones before it).
func TestNoTransactionMigration(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	ctx := context.Background()
	fsys := fstest.MapFS{
		"001_table.up.sql": {Data: []byte("CREATE TABLE {{schema}}.t (a int, b int);\nINSERT INTO {{schema}}.t SELECT i, i FROM generate_series(1, 100) i;")},
		"002_index.up.sql": {Data: []byte(migrations.NoTransactionMarker + "\n-- a comment\nDROP INDEX CONCURRENTLY IF EXISTS {{schema}}.t_b_idx;\nCREATE INDEX CONCURRENTLY t_b_idx\n    ON {{schema}}.t (b);\n")},
	}
	s, err := migrations.FromFS("things", "notx", fsys)
	if err != nil {
		t.Fatal(err)
	}
	if s.Migrations[0].NoTransaction || !s.Migrations[1].NoTransaction {
		t.Fatalf("NoTransaction = %v, %v; want false, true (the marker is on 002 only)", s.Migrations[0].NoTransaction, s.Migrations[1].NoTransaction)
	}
	applied, err := migrations.Migrate(ctx, pool, s)
	if err != nil || len(applied) != 2 {
		t.Fatalf("Migrate = %v, %v; want both versions applied", applied, err)
	}
	var valid bool
	if err := pool.QueryRow(ctx, `SELECT i.indisvalid FROM pg_index i WHERE i.indexrelid = 'notx.t_b_idx'::regclass`).Scan(&valid); err != nil || !valid {
		t.Fatalf("index t_b_idx valid = %v, %v; want a valid index built concurrently", valid, err)
	}
	if again, err := migrations.Migrate(ctx, pool, s); err != nil || len(again) != 0 {
		t.Fatalf("second Migrate = %v, %v; want nothing applied", again, err)
	}

	// Without the marker the same CONCURRENTLY statement runs inside the
	// version's transaction and Postgres refuses it.
	bad := fstest.MapFS{"001_index.up.sql": {Data: []byte("CREATE INDEX CONCURRENTLY t_a_idx ON {{schema}}.t (a);")}}
	s2, err := migrations.FromFS("more", "notx", bad)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Migrate(ctx, pool, s2); err == nil {
		t.Fatal("CREATE INDEX CONCURRENTLY in a transactional migration was applied; want Postgres' refusal")
	}
}
