package relay_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/outbox"
	"github.com/sagaflow/sagaflow/relay"
)

// BenchmarkClaimPublishMark measures one claim-publish-mark cycle of a batch
// of 500 rows against real Postgres and the in-process broker.
func BenchmarkClaimPublishMark(b *testing.B) {
	f := setup(b)
	r := f.newRelay(b, relay.Config{BatchSize: 500})
	cy := relay.NewCycler(r)
	defer cy.Close()
	ctx := context.Background()
	conn, err := pgx.ConnectConfig(ctx, f.pool.Config().ConnConfig.Copy())
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	msgs := make([]outbox.Message, 500)
	// Warm up metadata so the loop measures the steady state.
	f.enqueue(b, msg(f.topic, "warm", "up"))
	if _, err := cy.Cycle(ctx, conn); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		for i := range msgs {
			msgs[i] = msg(f.topic, fmt.Sprintf("key-%d", i%50), `{"n":1}`)
		}
		f.enqueue(b, msgs...)
		b.StartTimer()
		n, err := cy.Cycle(ctx, conn)
		if err != nil {
			b.Fatal(err)
		}
		if n != len(msgs) {
			b.Fatalf("cycle handled %d rows, want %d", n, len(msgs))
		}
	}
	b.ReportMetric(float64(len(msgs)), "rows/op")
}
