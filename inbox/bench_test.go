package inbox

import (
	"context"
	"testing"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/migrations"
)

// BenchmarkBatchDedupe measures the single-statement dedupe of a batch of
// 100 new message ids against real Postgres, in its own transaction.
func BenchmarkBatchDedupe(b *testing.B) {
	pool := testkit.Pool(b)
	testkit.Migrate(b, pool, testkit.MustSets(b)(migrations.Participant("p")))
	ctx := context.Background()
	const size = 100
	topics := make([]string, size)
	for i := range topics {
		topics[i] = "bench"
	}
	table := `"p"."inbox"`
	b.ResetTimer()
	for b.Loop() {
		ids := make([]uuid.UUID, size)
		for i := range ids {
			ids[i] = uuid.New()
		}
		tx, fresh, err := beginDeduped(ctx, pool, table, ids, topics, nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		if len(fresh) != size {
			b.Fatalf("dedupe returned %d new ids, want %d", len(fresh), size)
		}
		if err := tx.Commit(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
