package bench_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/internal/bench"
	"github.com/sagaflow/sagaflow/internal/dburl"
	"github.com/sagaflow/sagaflow/internal/testkit"
)

// The floor runs every chain it reports, each with all of a lone saga's
// commits and hops: the rows its transactions wrote are counted, and its
// figures are ordered and made of its parts.
func TestFloorRunsEveryChainWithAllItsCommits(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 2*time.Minute)
	db := "sagaflow_floor_test_" + testkit.RandomSuffix(6)
	t.Cleanup(func() { testkit.DropDatabase(t, db) })
	const steps, warmup, chains = 2, 3, 25
	res, err := bench.Floor(ctx, bench.Config{DatabaseURL: databaseURL(), Database: db, Brokers: testkit.Brokers(t),
		Steps: steps, Warmup: warmup, Sagas: chains})
	if err != nil {
		t.Fatalf("Floor: %v", err)
	}
	if res.Chains != chains || res.Steps != steps || res.Transactions != 2*steps+1 || res.Hops != 2*steps {
		t.Fatalf("result %+v: want %d chains of %d steps, %d transactions and %d hops each", res, chains, steps, 2*steps+1, 2*steps)
	}
	if !(res.ChainP50Ms > 0 && res.ChainP50Ms <= res.ChainP90Ms && res.ChainP90Ms <= res.ChainP99Ms) {
		t.Fatalf("chain p50 %v p90 %v p99 %v: want 0 < p50 <= p90 <= p99", res.ChainP50Ms, res.ChainP90Ms, res.ChainP99Ms)
	}
	if !(res.CommitP50Ms > 0 && res.CommitP50Ms <= res.CommitP90Ms && res.HopP50Ms > 0 && res.HopP50Ms <= res.HopP90Ms) {
		t.Fatalf("commit p50 %v p90 %v, hop p50 %v p90 %v: want 0 < p50 <= p90", res.CommitP50Ms, res.CommitP90Ms, res.HopP50Ms, res.HopP90Ms)
	}
	if res.ProduceP50Ms <= 0 || res.FetchP50Ms < 0 || res.ProduceP50Ms > res.HopP90Ms {
		t.Fatalf("produce p50 %v, fetch p50 %v, hop p90 %v: want a produce inside its hop", res.ProduceP50Ms, res.FetchP50Ms, res.HopP90Ms)
	}
	// A chain is at least its commits one after the other: its median
	// cannot be below a third of their medians' sum (percentiles do not add).
	if res.ChainP50Ms < float64(res.Transactions)*res.CommitP50Ms/3 {
		t.Fatalf("chain p50 %v ms for %d commits of p50 %v ms: the chain did not wait for them", res.ChainP50Ms, res.Transactions, res.CommitP50Ms)
	}
	url, err := dburl.WithDatabase(databaseURL(), db)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var completed, running, inbox, effects, outbox int
	if err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'completed' AND version = $1), count(*) FILTER (WHERE state <> 'completed'),
  (SELECT count(*) FROM inbox), (SELECT count(*) FROM effects), (SELECT count(*) FROM outbox) FROM sagas`, int64(steps+1)).
		Scan(&completed, &running, &inbox, &effects, &outbox); err != nil {
		t.Fatal(err)
	}
	all := warmup + chains
	if completed != all || running != 0 || inbox != all*2*steps || effects != all*steps || outbox != all*2*steps {
		t.Fatalf("rows: %d completed and %d other sagas, %d inbox, %d effects, %d outbox; want %d, 0, %d, %d, %d",
			completed, running, inbox, effects, outbox, all, all*2*steps, all*steps, all*2*steps)
	}
}

func TestFloorRejectsBadConfig(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, time.Minute)
	for _, c := range []struct {
		name string
		cfg  bench.Config
		want string
	}{
		{"no steps", bench.Config{Steps: -1, Sagas: 5}, "steps is -1"},
		{"no chains", bench.Config{Steps: 2, Sagas: -3}, "sagas (chains to measure) is -3"},
		{"negative warmup", bench.Config{Steps: 2, Sagas: 3, Warmup: -1}, "warmup is -1"},
	} {
		c.cfg.DatabaseURL, c.cfg.Database = databaseURL(), "sagaflow_floor_never"
		_, err := bench.Floor(ctx, c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Floor error %v, want one naming %q", c.name, err, c.want)
		}
	}
	if !strings.Contains(bench.ErrFloorFlags.Error(), "--steps") || errors.Unwrap(bench.ErrFloorFlags) != nil {
		t.Fatalf("ErrFloorFlags %q: want the flags --floor takes", bench.ErrFloorFlags)
	}
}
