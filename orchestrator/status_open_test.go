package orchestrator

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sagaflow/sagaflow/saga"
)

// openHistorySQL adds 10,000 sagas: 1% failed spread over the whole
// history, the 100 newest running and the 20 before them compensating, the
// rest completed; then VACUUM ANALYZE (as autovacuum would) marks the
// pages all-visible.
const openHistorySQL = `
INSERT INTO orch.sagas (id, type, definition_version, aggregate_id, idempotency_key, state, current_step, data, steps, version,
  created_at, updated_at, finished_at)
SELECT gen_random_uuid(), (ARRAY['place-order', 'refund'])[1 + i % 2], 1, 'agg-' || i, 'key-' || i,
  CASE WHEN i <= 100 THEN 'running' WHEN i <= 120 THEN 'compensating' WHEN i % 100 = 7 THEN 'failed' ELSE 'completed' END,
  'a', '{}', '[]', 3, now() - (i || ' minutes')::interval, now() - (i || ' minutes')::interval,
  CASE WHEN i > 120 THEN now() - (i || ' minutes')::interval END
FROM generate_series(1, 10000) AS i`

func openHistory(t *testing.T) (*pgxpool.Pool, *Engine) {
	t.Helper()
	pool, e := orchEngine(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, openHistorySQL); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE orch.sagas`); err != nil {
		t.Fatal(err)
	}
	return pool, e
}

// explainAnalyze runs q under EXPLAIN ANALYZE and returns the plan.
func explainAnalyze(t *testing.T, pool *pgxpool.Pool, q string, args ...any) string {
	t.Helper()
	rows, err := pool.Query(context.Background(), "EXPLAIN (ANALYZE, COSTS OFF) "+q, args...)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}

// TestOpenSagaReadsAreIndexOnly: on a history where the failed sagas far
// outnumber those in flight and are spread over all of it, the stats'
// open counts and oldest in-flight saga read sagas_in_flight_idx alone
// (state and type are in it; the failed sagas are counted in
// failed_counts): an index-only scan with no heap fetches that passes no
// failed saga's entry; and a page of one open state is picked from that
// state's index alone.
func TestOpenSagaReadsAreIndexOnly(t *testing.T) {
	t.Parallel()
	pool, e := openHistory(t)
	ctx := context.Background()
	for name, q := range map[string]struct {
		sql  string
		args []any
	}{
		"stats: open counts":         {fmt.Sprintf(statsOpenSQL, e.st.sagas, e.st.failedCounts), []any{e.cfg.StatsExactLimit + 1}},
		"stats: oldest in flight":    {fmt.Sprintf(statsOldestSQL, e.st.sagas), nil},
		"in-flight gauge (no hints)": {`SELECT type, state, count(*) FROM orch.sagas WHERE ` + inFlightPredicate + ` GROUP BY type, state`, nil},
	} {
		plan := explainAnalyze(t, pool, q.sql, q.args...)
		if !strings.Contains(plan, "Index Only Scan using sagas_in_flight_idx") || !strings.Contains(plan, "Heap Fetches: 0") ||
			strings.Contains(plan, "sagas_failed_idx") || strings.Contains(plan, "Rows Removed") {
			t.Errorf("%s is not an index-only scan of sagas_in_flight_idx alone without heap fetches:\n%s", name, plan)
		}
	}
	p, err := e.List(ctx, Filter{State: saga.Failed, Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]Filter{
		"failed":                {State: saga.Failed},
		"compensating":          {State: saga.Compensating},
		"running":               {State: saga.Running},
		"failed, type":          {State: saga.Failed, Type: "refund"},
		"failed, cursor":        {State: saga.Failed, Cursor: p.Next},
		"compensating, type":    {State: saga.Compensating, Type: "refund"},
		"failed, older than 1h": {State: saga.Failed, OlderThan: 3600e9},
		// The finished states: the newest sagas are the ones in flight,
		// and a page of completed ones must not read them on its way.
		"completed":           {State: saga.Completed},
		"completed, type":     {State: saga.Completed, Type: "refund"},
		"compensated, type":   {State: saga.Compensated, Type: "place-order"},
		"completed, cursor":   {State: saga.Completed, Cursor: p.Next},
		"completed, older 2h": {State: saga.Completed, Type: "refund", OlderThan: 7200e9},
	} {
		q, args, _, err := e.listQuery(f)
		if err != nil {
			t.Fatal(err)
		}
		index := "sagas_in_flight_idx"
		switch f.State {
		case saga.Failed:
			index = "sagas_failed_idx"
		case saga.Completed, saga.Compensated:
			index = "sagas_finished_state_idx"
		case saga.Compensating:
			// Its own index (migration 022) holds the compensating
			// sagas alone, by type and creation: the planner may take
			// either; both are index-only.
			if strings.Contains(explainAnalyze(t, pool, q, args...), "sagas_compensating_idx") {
				index = "sagas_compensating_idx"
			}
		}
		plan := explainAnalyze(t, pool, q, args...)
		want := "Index Only Scan Backward using " + index
		switch index {
		case "sagas_compensating_idx":
			want = "using " + index // by type first: the newest of every type, then sorted
		case "sagas_finished_state_idx":
			want = "Index Only Scan using " + index // newest first as built
		}
		if !strings.Contains(plan, "Index Only Scan") || !strings.Contains(plan, want) || !strings.Contains(plan, "Heap Fetches: 0") ||
			strings.Contains(plan, "Seq Scan") {
			t.Errorf("list %s does not pick its page from %s alone:\n%s", name, index, plan)
		}
	}
}

// TestOpenListPagesMatchTheTable: the list of one open state, page by page
// (its ids picked from the index, then its rows read), returns exactly the
// sagas of that state, newest first, each once.
func TestOpenListPagesMatchTheTable(t *testing.T) {
	t.Parallel()
	pool, e := openHistory(t)
	ctx := context.Background()
	for _, f := range []Filter{{State: saga.Failed}, {State: saga.Compensating}, {State: saga.Failed, Type: "refund"}, {State: saga.Running, Type: "place-order"}} {
		var want []string
		args := []any{string(f.State)}
		q := `SELECT id::text FROM orch.sagas WHERE state = $1`
		if f.Type != "" {
			q += ` AND type = $2`
			args = append(args, f.Type)
		}
		rows, err := pool.Query(ctx, q+` ORDER BY created_at DESC, id DESC`, args...)
		if err != nil {
			t.Fatal(err)
		}
		if want, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			t.Fatal(err)
		}
		var got []string
		f.Limit = 7
		for pages := 0; ; pages++ {
			if pages > 100 {
				t.Fatalf("list %+v: more than 100 pages", f)
			}
			p, err := e.List(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range p.Sagas {
				got = append(got, s.ID.String())
			}
			if p.Next == "" {
				break
			}
			f.Cursor = p.Next
		}
		if len(want) == 0 || strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("list %s %s: %d sagas, want the %d of the table in order", f.State, f.Type, len(got), len(want))
		}
	}
}

// TestStatsOpenCountsUnderTransitions: while other transactions move open
// sagas between running, compensating and failed (one saga per
// transaction, clearing the pages' all-visible bits as they go), every
// stats read counts each open saga exactly once (the total stays 218);
// afterwards the counts by type and state are those of the table.
func TestStatsOpenCountsUnderTransitions(t *testing.T) {
	t.Parallel()
	pool, e := openHistory(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const open = 100 + 20 + 98 // running, compensating, failed
	moves := make(chan error, 1)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		states := []string{"running", "compensating", "failed"}
		for i := 0; ctx.Err() == nil && i < 400; i++ {
			_, err := pool.Exec(ctx, `UPDATE orch.sagas SET state = $1, version = version + 1
WHERE id = (SELECT id FROM orch.sagas WHERE state NOT IN ('completed', 'compensated') ORDER BY random() LIMIT 1)`, states[i%3])
			if err != nil && ctx.Err() == nil {
				moves <- err
				return
			}
		}
	}()
	reads := 0
	for done := false; !done; {
		select {
		case err := <-moves:
			t.Fatal(err)
		case <-finished:
			done = true
		default:
		}
		st, err := e.Stats(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		reads++
		var n int64
		for _, byState := range st.Open {
			for _, c := range byState {
				n += c
			}
		}
		if n != open {
			t.Fatalf("stats read %d counts %d open sagas, want %d (%v)", reads, n, open, st.Open)
		}
	}
	t.Logf("%d stats reads during the moves", reads)
	st, err := e.Stats(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(context.Background(), `SELECT type, state, count(*) FROM orch.sagas WHERE state NOT IN ('completed', 'compensated') AND id::text <> '' GROUP BY 1, 2`)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[saga.State]int64{}
	for rows.Next() {
		var ty, s string
		var n int64
		if err := rows.Scan(&ty, &s, &n); err != nil {
			t.Fatal(err)
		}
		if want[ty] == nil {
			want[ty] = map[saga.State]int64{}
		}
		want[ty][saga.State(s)] = n
	}
	if fmt.Sprint(st.Open) != fmt.Sprint(want) {
		t.Fatalf("after %d reads during the moves: Stats.Open = %v, want the table's %v", reads, st.Open, want)
	}
}
