package retention_test

import (
	"context"
	"testing"
	"time"

	"github.com/sagaflow/sagaflow/internal/retention"
	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/migrations"
)

// BenchmarkPurge measures one retention cycle over 50,000 expired sent
// outbox rows and 50,000 expired inbox rows (plus as many recent ones that
// stay), in batches of retention.BatchSizeDefault:
//
//	go test -run '^$' -bench Purge -benchtime 3x ./retention/
func BenchmarkPurge(b *testing.B) {
	pool := testkit.Pool(b)
	testkit.Migrate(b, pool, testkit.MustSets(b)(migrations.Participant("p")))
	ctx := context.Background()
	p, err := retention.New(pool, &retention.Config{Schemas: []string{"p"}, SentOutboxAfter: time.Hour, InboxAfter: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	const n = 50_000
	var rows int64
	var longest time.Duration
	for b.Loop() {
		b.StopTimer()
		for _, q := range []string{
			`INSERT INTO p.outbox (topic, key, value, created_at, sent_at) SELECT 't', 'k', 'v', now() - interval '2 hours', now() - interval '2 hours' FROM generate_series(1, $1)`,
			`INSERT INTO p.outbox (topic, key, value, sent_at) SELECT 't', 'k', 'v', now() FROM generate_series(1, $1)`,
			`INSERT INTO p.inbox (message_id, topic, received_at) SELECT gen_random_uuid(), 't', now() - interval '2 hours' FROM generate_series(1, $1)`,
			`INSERT INTO p.inbox (message_id, topic) SELECT gen_random_uuid(), 't' FROM generate_series(1, $1)`,
			`ANALYZE p.outbox`, `ANALYZE p.inbox`,
		} {
			args := []any{n}
			if q[0] == 'A' {
				args = nil
			}
			if _, err := pool.Exec(ctx, q, args...); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		start := time.Now()
		got, err := p.PurgeOnce(ctx, time.Now())
		if err != nil {
			b.Fatal(err)
		}
		longest = max(longest, time.Since(start))
		if got["p.outbox"] != n || got["p.inbox"] != n {
			b.Fatalf("purged %v, want %d of each", got, n)
		}
		rows += got["p.outbox"] + got["p.inbox"]
		b.StopTimer()
		if _, err := pool.Exec(ctx, `TRUNCATE p.outbox, p.inbox`); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "rows/s")
	b.ReportMetric(float64(retention.BatchSizeDefault)*longest.Seconds()/float64(2*n)*1000, "ms/batch")
}
