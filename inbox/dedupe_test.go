package inbox

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/migrations"
)

// A batch of new ids is recorded by the insert that expects none to be
// there; a batch holding an id recorded before fails that insert and is
// begun again with the one that skips it: the seen id is not fresh, the
// others are, every id is recorded once, and the prefetch reads queued with
// the second attempt run in the transaction that is returned.
func TestDedupeRedeliveredIDsBeginsAgainSkippingThem(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	testkit.Migrate(t, pool, testkit.MustSets(t)(migrations.Participant("p")))
	ctx := testkit.Context(t, 30*time.Second)
	table := `"p"."inbox"`
	begin := func(ids []uuid.UUID) (pgx.Tx, map[uuid.UUID]bool, *int, *int64) {
		t.Helper()
		topics := make([]string, len(ids))
		for i := range topics {
			topics[i] = "t"
		}
		calls := new(int)
		xid := new(int64)
		queue := func(b *pgx.Batch) {
			*calls++
			b.Queue("SELECT txid_current()").QueryRow(func(r pgx.Row) error { return r.Scan(xid) })
		}
		tx, fresh, err := beginDeduped(ctx, pool, table, ids, topics, queue, nil)
		if err != nil {
			t.Fatal(err)
		}
		return tx, fresh, calls, xid
	}
	seen := uuid.New()
	tx, fresh, calls, _ := begin([]uuid.UUID{seen})
	if !fresh[seen] || *calls != 1 {
		t.Fatalf("first batch: fresh %v, prefetch queued %d times; want the id fresh, queued once", fresh, *calls)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	a, b := uuid.New(), uuid.New()
	tx, fresh, calls, xid := begin([]uuid.UUID{a, seen, b})
	if fresh[seen] || !fresh[a] || !fresh[b] || len(fresh) != 2 {
		t.Fatalf("redelivered batch: fresh %v, want %s and %s only", fresh, a, b)
	}
	if *calls != 2 {
		t.Fatalf("prefetch queued %d times, want 2 (the failed attempt and the one returned)", *calls)
	}
	var inTx int64
	if err := tx.QueryRow(ctx, "SELECT txid_current()").Scan(&inTx); err != nil {
		t.Fatal(err)
	}
	if *xid != inTx {
		t.Fatalf("the prefetch ran in transaction %d, the batch is %d", *xid, inTx)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var n, distinct int
	if err := pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT message_id) FROM p.inbox WHERE message_id = ANY($1)`, []uuid.UUID{a, b, seen}).Scan(&n, &distinct); err != nil {
		t.Fatal(err)
	}
	if n != 3 || distinct != 3 {
		t.Fatalf("inbox holds %d rows (%d distinct) of the 3 ids, want 3", n, distinct)
	}

	// The same id twice in one batch is recorded once and is fresh.
	c := uuid.New()
	tx, fresh, _, _ = begin([]uuid.UUID{c, c})
	if !fresh[c] {
		t.Fatalf("an id twice in a new batch: fresh %v, want it fresh", fresh)
	}
	if err := tx.Rollback(context.WithoutCancel(ctx)); err != nil {
		t.Fatal(err)
	}
}
