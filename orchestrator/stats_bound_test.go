package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sagaflow/sagaflow/saga"
)

// TestStatsWindowIsBounded: a stats read counts at most StatsWindowMax of
// finished sagas. On 3,000 finished sagas spread over 50 hours, a longer
// window is refused (ErrInvalidInput naming the window), and the finished
// count at the longest window reads, on sagas_finished_idx, only the rows
// of its day (EXPLAIN ANALYZE), not the whole history.
func TestStatsWindowIsBounded(t *testing.T) {
	t.Parallel()
	pool, e := orchEngine(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `
INSERT INTO orch.sagas (id, type, definition_version, aggregate_id, idempotency_key, state, current_step, data, steps, version,
  created_at, updated_at, finished_at)
SELECT gen_random_uuid(), 'place-order', 1, 'agg-' || i, 'key-' || i, 'completed', '', '{}', '[]', 3,
  now() - (i || ' minutes')::interval, now() - (i || ' minutes')::interval, now() - (i || ' minutes')::interval
FROM generate_series(1, 3000) AS i;
ANALYZE orch.sagas;`)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []time.Duration{StatsWindowMax + time.Second, 1000 * time.Hour} {
		_, err := e.Stats(ctx, w)
		var ie *InputError
		if !errors.Is(err, ErrInvalidInput) || !errors.As(err, &ie) || ie.Field != "window" || !strings.Contains(err.Error(), StatsWindowMax.String()) {
			t.Errorf("Stats(%s) = %v; want an input error naming the window and its bound %s", w, err, StatsWindowMax)
		}
	}
	st, err := e.Stats(ctx, StatsWindowMax)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Finished["place-order"][saga.Completed]; got < 1435 || got > 1440 {
		t.Errorf("Stats(%s) counts %d finished sagas, want the 1,440 of the last day", StatsWindowMax, got)
	}
	q := "EXPLAIN (ANALYZE, FORMAT TEXT) " + fmt.Sprintf(statsFinishedSQL, e.st.sagas)
	rows, err := pool.Query(ctx, q, e.cfg.Now().Add(-StatsWindowMax), e.cfg.StatsExactLimit+1)
	if err != nil {
		t.Fatal(err)
	}
	var plan []string
	for rows.Next() {
		var l string
		if err := rows.Scan(&l); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, l)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	text := strings.Join(plan, "\n")
	if strings.Contains(text, "Seq Scan") || !strings.Contains(text, "sagas_finished_idx") {
		t.Fatalf("the finished count does not read sagas_finished_idx:\n%s", text)
	}
	// The index scan's actual rows: the day's, not the 3,000.
	m := regexp.MustCompile(`Index (?:Only )?Scan.*actual time=\S+ rows=(\d+)`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("no index scan with actual rows in:\n%s", text)
	}
	if n, _ := strconv.Atoi(m[1]); n > 1440 {
		t.Errorf("the finished count at the longest window read %d index rows of 3,000; want at most a day's 1,440:\n%s", n, text)
	}
}
