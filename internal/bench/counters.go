package bench

import (
	"context"
	"fmt"
	"github.com/sagaflow/sagaflow/internal/pgid"
	"math"
	"slices"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// latencies reads created_at -> finished_at of the completed sagas among
// ids (milliseconds, sorted), their number and the last finish time.
func latencies(ctx context.Context, pool *pgxpool.Pool, sagas string, ids []uuid.UUID) ([]float64, int, time.Time, error) {
	rows, err := pool.Query(ctx, `SELECT created_at, finished_at FROM `+sagas+` WHERE id = ANY($1) AND state = 'completed' AND finished_at IS NOT NULL`, pgid.UUIDs(ids))
	if err != nil {
		return nil, 0, time.Time{}, fmt.Errorf("bench: read latencies of %d sagas: %w", len(ids), err)
	}
	defer rows.Close()
	var out []float64
	var last time.Time
	for rows.Next() {
		var c, f time.Time
		if err := rows.Scan(&c, &f); err != nil {
			return nil, 0, time.Time{}, fmt.Errorf("bench: read latencies: %w", err)
		}
		out = append(out, float64(f.Sub(c))/float64(time.Millisecond))
		if f.After(last) {
			last = f
		}
	}
	if err := rows.Err(); err != nil {
		return nil, 0, time.Time{}, fmt.Errorf("bench: read latencies: %w", err)
	}
	slices.Sort(out)
	return out, len(out), last, nil
}

// pct is the nearest-rank percentile q of sorted xs.
func pct(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(xs)))) - 1
	return xs[min(max(i, 0), len(xs)-1)]
}

type counters struct {
	xact int64
	wal  int64
}

const countersSQL = `SELECT xact_commit, pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint FROM pg_stat_database WHERE datname = $1`

func readCounters(ctx context.Context, pool *pgxpool.Pool, db string) (counters, error) {
	var c counters
	if err := pool.QueryRow(ctx, countersSQL, db).Scan(&c.xact, &c.wal); err != nil {
		return c, fmt.Errorf("bench: read pg_stat_database of %s: %w", db, err)
	}
	return c, nil
}

// settledCounters reads the counters once every backend of the run has
// exited (exiting backends flush their statistics).
func settledCounters(ctx context.Context, baseURL, db string) (counters, error) {
	conn, err := pgx.Connect(ctx, baseURL)
	if err != nil {
		return counters{}, fmt.Errorf("bench: connect to read statistics: %w", err)
	}
	defer conn.Close(ctx)
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1`, db).Scan(&n); err != nil {
			return counters{}, fmt.Errorf("bench: wait for backends of %s: %w", db, err)
		}
		if n == 0 || time.Now().After(deadline) {
			break
		}
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return counters{}, ctx.Err()
		case <-t.C:
		}
	}
	var c counters
	if _, err := conn.Exec(ctx, `SELECT pg_stat_clear_snapshot()`); err != nil {
		return c, fmt.Errorf("bench: clear statistics snapshot: %w", err)
	}
	if err := conn.QueryRow(ctx, countersSQL, db).Scan(&c.xact, &c.wal); err != nil {
		return c, fmt.Errorf("bench: read pg_stat_database of %s: %w", db, err)
	}
	return c, nil
}

// cpuSeconds is the user+system CPU time of this process so far.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}
