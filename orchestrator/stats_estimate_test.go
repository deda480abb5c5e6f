package orchestrator

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/migrations"
	"github.com/sagaflow/sagaflow/saga"
)

// testClock is a clock a test moves.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// estimateEngine is an engine on a fresh schema that counts at most limit
// sagas one by one in a stats count, on a clock the test moves.
func estimateEngine(t *testing.T, limit int, slo SLO) (*pgxpool.Pool, *Engine, *testClock) {
	t.Helper()
	pool := testkit.Pool(t)
	testkit.Migrate(t, pool, testkit.MustSets(t)(migrations.Orchestrator("orch")))
	clock := &testClock{now: time.Now().UTC().Truncate(time.Second)}
	e, err := NewEngine(pool, saga.NewRegistry(), &EngineConfig{Schema: "orch", Now: clock.Now, SLO: slo,
		GaugeInterval: 5 * time.Second, Advanced: Advanced{StatsExactLimit: limit}})
	if err != nil {
		t.Fatal(err)
	}
	return pool, e, clock
}

// addSagas inserts n sagas of type typ in state, created (and, if
// finished, finished) every step seconds back from at.
func addSagas(t *testing.T, pool *pgxpool.Pool, n int, typ, state string, at time.Time, step time.Duration) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `
INSERT INTO orch.sagas (id, type, definition_version, aggregate_id, idempotency_key, state, current_step, data, steps, version,
  created_at, updated_at, finished_at)
SELECT gen_random_uuid(), $1, 1, 'agg', gen_random_uuid()::text, $2, 'a', '{}', '[]', 1,
  $3::timestamptz - i * $4::interval, $3::timestamptz - i * $4::interval,
  CASE WHEN $2 IN ('completed', 'compensated', 'failed') THEN $3::timestamptz - i * $4::interval END
FROM generate_series(0, $5 - 1) AS i`, typ, state, at, step, n)
	if err != nil {
		t.Fatal(err)
	}
}

// TestStatsOverTheExactLimitAreEstimatesThatSaySo: with no more sagas in
// flight than the limit, the counts are live and exact; over it, a read
// takes the engine's last full count if it is at most three gauge
// intervals old (and says so, with the time it was taken), and makes a
// full count itself (exact) if not. The failed sagas stay exact and live.
func TestStatsOverTheExactLimitAreEstimatesThatSaySo(t *testing.T) {
	t.Parallel()
	pool, e, clock := estimateEngine(t, 10, nil)
	ctx := context.Background()
	now := clock.Now()
	addSagas(t, pool, 6, "place-order", "running", now.Add(-time.Hour), time.Minute)
	addSagas(t, pool, 3, "refund", "compensating", now.Add(-time.Hour), time.Minute)
	addSagas(t, pool, 2, "refund", "failed", now.Add(-2*time.Hour), time.Minute)

	st, err := e.Stats(ctx, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	wantOpen := func(st Stats, po, rc, rf int64) {
		t.Helper()
		if got := st.Open["place-order"][saga.Running]; got != po {
			t.Errorf("open place-order running = %d, want %d", got, po)
		}
		if got := st.Open["refund"][saga.Compensating]; got != rc {
			t.Errorf("open refund compensating = %d, want %d", got, rc)
		}
		if got := st.Open["refund"][saga.Failed]; got != rf {
			t.Errorf("open refund failed = %d, want %d", got, rf)
		}
	}
	// 9 in flight, limit 10: counted now.
	wantOpen(st, 6, 3, 2)
	if st.OpenEstimated || !st.OpenCountedAt.Equal(now) {
		t.Errorf("under the limit: estimated %v counted at %v, want exact at %v", st.OpenEstimated, st.OpenCountedAt, now)
	}

	// 14 in flight and no full count yet: the read makes one, exact.
	addSagas(t, pool, 5, "place-order", "running", now.Add(-time.Minute), time.Second)
	clock.add(time.Second)
	first := clock.Now()
	if st, err = e.Stats(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	wantOpen(st, 11, 3, 2)
	if st.OpenEstimated || !st.OpenCountedAt.Equal(first) {
		t.Errorf("over the limit, no count kept: estimated %v counted at %v, want exact at %v", st.OpenEstimated, st.OpenCountedAt, first)
	}

	// Two more running and one more failed, 10 s later: the running
	// ones are the count of 10 s ago, said to be an estimate; the failed
	// ones are counted now.
	addSagas(t, pool, 2, "place-order", "running", now.Add(-time.Minute), time.Second)
	addSagas(t, pool, 1, "refund", "failed", now.Add(-time.Minute), time.Second)
	clock.add(10 * time.Second)
	if st, err = e.Stats(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	wantOpen(st, 11, 3, 3)
	if !st.OpenEstimated || !st.OpenCountedAt.Equal(first) {
		t.Errorf("over the limit, count 10 s old: estimated %v counted at %v, want estimated, counted at %v", st.OpenEstimated, st.OpenCountedAt, first)
	}

	// The gauge refresh counts them all again: the next read has it.
	if _, err := e.InFlight(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err = e.Stats(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	wantOpen(st, 13, 3, 3)
	if !st.OpenEstimated || !st.OpenCountedAt.Equal(clock.Now()) {
		t.Errorf("after the gauge's count: estimated %v counted at %v, want estimated at %v", st.OpenEstimated, st.OpenCountedAt, clock.Now())
	}

	// Older than three gauge intervals: not used, a read counts again.
	addSagas(t, pool, 1, "refund", "compensating", now.Add(-time.Minute), time.Second)
	clock.add(16 * time.Second)
	if st, err = e.Stats(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	wantOpen(st, 13, 4, 3)
	if st.OpenEstimated || !st.OpenCountedAt.Equal(clock.Now()) {
		t.Errorf("count 16 s old: estimated %v counted at %v, want exact at %v", st.OpenEstimated, st.OpenCountedAt, clock.Now())
	}

	// Back under the limit: live again, whatever count is kept.
	if _, err := pool.Exec(ctx, `UPDATE orch.sagas SET state = 'completed', finished_at = now() WHERE state = 'running'`); err != nil {
		t.Fatal(err)
	}
	if st, err = e.Stats(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	wantOpen(st, 0, 4, 3)
	if st.OpenEstimated {
		t.Error("under the limit again: still an estimate")
	}
}

// TestStatsFinishedOverTheExactLimitAreScaled: more sagas finished in the
// window than the limit are estimated from the newest limit+1, scaled to
// the window by the time they span, and said to be; at a steady rate the
// estimate is near the truth.
func TestStatsFinishedOverTheExactLimitAreScaled(t *testing.T) {
	t.Parallel()
	pool, e, clock := estimateEngine(t, 10, nil)
	ctx := context.Background()
	now := clock.Now()
	// 10 completed, one every 6 minutes: at the limit, exact.
	addSagas(t, pool, 10, "place-order", "completed", now.Add(-time.Minute), 6*time.Minute)
	st, err := e.Stats(ctx, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Finished["place-order"][saga.Completed]; got != 10 || st.FinishedEstimated {
		t.Fatalf("10 finished, limit 10: %d estimated %v, want 10 exact", got, st.FinishedEstimated)
	}

	// One every 36 s over the hour, 100 in all, three quarters completed:
	// the newest 11 span 6 minutes, scaled by 10.
	if _, err := pool.Exec(ctx, `DELETE FROM orch.sagas`); err != nil {
		t.Fatal(err)
	}
	at := now.Add(-time.Second)
	for i := 0; i < 100; i++ {
		state := "completed"
		if i%4 == 3 {
			state = "compensated"
		}
		addSagas(t, pool, 1, "place-order", state, at.Add(-time.Duration(i)*36*time.Second), time.Second)
	}
	if st, err = e.Stats(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	if !st.FinishedEstimated {
		t.Fatal("100 finished in the window, limit 10: not said to be an estimate")
	}
	// The newest 11: i = 0..10, compensated at i = 3 and 7; they span
	// 361 s of 3,600.
	scale := 3600.0 / 361.0
	for s, n := range map[saga.State]float64{saga.Completed: 9, saga.Compensated: 2} {
		if got, want := st.Finished["place-order"][s], int64(math.Round(n*scale)); got != want {
			t.Errorf("estimated %s = %d, want %d", s, got, want)
		}
	}
	total := st.Finished["place-order"][saga.Completed] + st.Finished["place-order"][saga.Compensated]
	if total < 90 || total > 120 {
		t.Errorf("estimated %d finished in the hour at a steady rate, truth 100", total)
	}
}

// TestSLOBreachCountStopsAtTheLimit: a type with more open sagas past
// its window than the limit gets a count that stops and says so; the
// plan of each count is a scan of its open-saga index with a limit.
func TestSLOBreachCountStopsAtTheLimit(t *testing.T) {
	t.Parallel()
	pool, e, clock := estimateEngine(t, 10, SLO{"place-order": time.Minute, "refund": time.Minute})
	ctx := context.Background()
	now := clock.Now()
	addSagas(t, pool, 15, "place-order", "running", now.Add(-time.Hour), time.Second)
	addSagas(t, pool, 3, "place-order", "failed", now.Add(-time.Hour), time.Second)
	addSagas(t, pool, 4, "refund", "running", now.Add(-time.Hour), time.Second)
	addSagas(t, pool, 4, "refund", "running", now, time.Second) // within the window
	b, err := e.SLOBreaches(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != 2 {
		t.Fatalf("SLO breaches %+v, want two types", b)
	}
	if b[0].Type != "place-order" || b[0].Open != 11+3 || !b[0].AtLeast {
		t.Errorf("place-order: %+v, want at least 14 (11 in flight counted, 3 failed)", b[0])
	}
	if b[1].Type != "refund" || b[1].Open != 4 || b[1].AtLeast {
		t.Errorf("refund: %+v, want exactly 4", b[1])
	}
	plan := explainAnalyze(t, pool, e.sloBreachSQL(), "place-order", now.Add(-time.Minute), 11)
	if !strings.Contains(plan, "Limit") || strings.Contains(plan, "Seq Scan") {
		t.Errorf("the SLO count does not stop at its limit on an index:\n%s", plan)
	}
}

// TestStatsReadsAreNotCompiled: the stats' reads run with sequential and
// bitmap scans off, and a plan that still needs one (failed_counts is
// read whole) then costs more than jit_above_cost: JIT compiled it, 142 ms
// for a read of 3 ms at ten million sagas. The read transaction turns JIT
// off; the open counts' plan, run in it, has no JIT section.
func TestStatsReadsAreNotCompiled(t *testing.T) {
	t.Parallel()
	pool, e, _ := estimateEngine(t, 10, nil)
	ctx := context.Background()
	addSagas(t, pool, 3, "refund", "failed", time.Now(), time.Second)
	b := readBatch()
	var setting string
	b.Queue("SHOW jit").QueryRow(func(r pgx.Row) error { return r.Scan(&setting) })
	var plan []string
	b.Queue("EXPLAIN (ANALYZE) "+fmt.Sprintf(statsOpenSQL, e.st.sagas, e.st.failedCounts), 11).Query(func(rows pgx.Rows) error {
		var err error
		plan, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if err := e.sendRead(ctx, b); err != nil {
		t.Fatal(err)
	}
	if text := strings.Join(plan, "\n"); setting != "off" || strings.Contains(text, "JIT") {
		t.Fatalf("jit = %s in the stats' read transaction; plan:\n%s", setting, text)
	}
}

// TestStaleCountIsMadeOnceForConcurrentReads: reads that find the full
// count stale together make one count between them: the first counts
// (exact), the others wait for it and use it (an estimate).
func TestStaleCountIsMadeOnceForConcurrentReads(t *testing.T) {
	t.Parallel()
	pool, e, clock := estimateEngine(t, 2, nil)
	ctx := context.Background()
	addSagas(t, pool, 5, "place-order", "running", clock.Now().Add(-time.Minute), time.Second)
	const readers = 8
	var wg sync.WaitGroup
	results := make(chan Stats, readers)
	for range readers {
		wg.Go(func() {
			st, err := e.Stats(ctx, time.Hour)
			if err != nil {
				t.Error(err)
				return
			}
			results <- st
		})
	}
	wg.Wait()
	close(results)
	exact := 0
	for st := range results {
		if !st.OpenEstimated {
			exact++
		}
		if got := st.Open["place-order"][saga.Running]; got != 5 {
			t.Errorf("running = %d, want 5", got)
		}
	}
	if exact != 1 {
		t.Fatalf("%d of %d concurrent reads made a full count, want 1", exact, readers)
	}
}
