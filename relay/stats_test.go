package relay_test

import (
	"testing"
	"time"

	"github.com/sagaflow/sagaflow/internal/outboxdb"
	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/outbox"
)

// Stats counts what is unsent, on the pool (its own read-only transaction,
// index scans) and inside a caller's transaction, which it leaves open: a
// rollback afterwards still undoes the caller's insert.
func TestOutboxStatsOnThePoolAndInACallersTransaction(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := testkit.Context(t, 30*time.Second)
	before, err := outboxdb.For(f.ob.Schema()).Stats(ctx, f.pool)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := f.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if err := f.ob.Enqueue(ctx, tx, outbox.Message{Topic: f.topic, Key: "k", Value: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	in, err := outboxdb.For(f.ob.Schema()).Stats(ctx, tx)
	if err != nil {
		t.Fatal(err)
	}
	if in.Pending != before.Pending+1 {
		t.Fatalf("in the transaction: %d pending, want %d", in.Pending, before.Pending+1)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatalf("rollback after Stats in the transaction: %v", err)
	}
	after, err := outboxdb.For(f.ob.Schema()).Stats(ctx, f.pool)
	if err != nil {
		t.Fatal(err)
	}
	if after.Pending != before.Pending {
		t.Fatalf("after the rollback: %d pending, want %d (Stats must not have committed the caller's transaction)", after.Pending, before.Pending)
	}
}
