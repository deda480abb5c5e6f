package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sagaflow/sagaflow/internal/pgid"
	"github.com/sagaflow/sagaflow/saga"
)

// tracker learns of the end of watched sagas: from the in-process engine at
// once (endSink), and by polling the saga table (a split run's only way,
// and the fallback of the other).
type tracker struct {
	pool     *pgxpool.Pool
	q        string
	interval time.Duration
	polls    atomic.Int64

	mu      sync.Mutex
	waiting map[uuid.UUID]chan struct{}
	// order is the watched ids oldest first (ended and forgotten ones are
	// dropped when a poll walks past them).
	order []uuid.UUID
}

func newTracker(pool *pgxpool.Pool, sagas string, interval time.Duration) *tracker {
	return &tracker{
		pool: pool, interval: interval, waiting: map[uuid.UUID]chan struct{}{},
		q: `SELECT id FROM ` + sagas + ` WHERE id = ANY($1) AND state NOT IN ('running', 'compensating')`,
	}
}

func (t *tracker) watch(id uuid.UUID, done chan struct{}) {
	t.mu.Lock()
	t.waiting[id] = done
	t.order = append(t.order, id)
	t.mu.Unlock()
}

func (t *tracker) forget(id uuid.UUID) {
	t.mu.Lock()
	delete(t.waiting, id)
	t.mu.Unlock()
}

// pollCostPerID spaces the tracker's polls by the number of sagas watched:
// each poll costs Postgres a lookup per watched id, and frequent polls with
// many in flight took a share of its statement time away from the workload
// (measured: docs/perf/figures.md#bench-poll-cost-per-id).
// At 1,024 the polls are 51 ms apart, which changes nothing for a closed
// loop whose sagas take far longer; with few sagas watched it stays at the
// tracker's interval.
const pollCostPerID = 50 * time.Microsecond

// pollWindow bounds the ids one poll looks up to the oldest watched ones:
// sagas end roughly in the order they started, so the oldest hold nearly
// all the ends a poll can find, and a poll costs Postgres a lookup per id
// (measured: docs/perf/figures.md#bench-poll-window). Every
// fullPollEvery-th poll looks all of them up, so a saga that ends while
// younger ones block the window is found all the same.
const (
	pollWindow    = 256
	fullPollEvery = 8
)

// polled returns the ids the next poll looks up: all of them when full,
// else the oldest pollWindow; n is the number watched.
func (t *tracker) polled(dst []uuid.UUID, full bool) (ids []uuid.UUID, n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	live := t.order[:0]
	for _, id := range t.order {
		if _, ok := t.waiting[id]; ok {
			live = append(live, id)
		}
	}
	clear(t.order[len(live):])
	t.order = live
	k := len(live)
	if !full {
		k = min(k, pollWindow)
	}
	return append(dst[:0], live[:k]...), len(live)
}

func (t *tracker) run(ctx context.Context) error {
	wait := time.NewTimer(t.interval)
	defer wait.Stop()
	var ids []uuid.UUID
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-wait.C:
		}
		n := t.polls.Load()
		var watched int
		ids, watched = t.polled(ids, n%fullPollEvery == fullPollEvery-1)
		wait.Reset(max(t.interval, time.Duration(watched)*pollCostPerID))
		if len(ids) == 0 {
			continue
		}
		t.polls.Add(1)
		rows, err := t.pool.Query(ctx, t.q, pgid.UUIDs(ids))
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("poll %d sagas: %w", len(ids), err)
		}
		ended, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("poll %d sagas: %w", len(ids), err)
		}
		t.mu.Lock()
		for _, id := range ended {
			if d, ok := t.waiting[id]; ok {
				close(d)
				delete(t.waiting, id)
			}
		}
		t.mu.Unlock()
	}
}

// ended is called when the engine finished saga id.
func (t *tracker) ended(id uuid.UUID) {
	t.mu.Lock()
	if d, ok := t.waiting[id]; ok {
		close(d)
		delete(t.waiting, id)
	}
	t.mu.Unlock()
}

// endSink is the engine's OnFinished in an in-process run: it hands the
// ends to the tracker once there is one.
type endSink struct{ tr atomic.Pointer[tracker] }

func (s *endSink) finished(id uuid.UUID, _ saga.State) {
	if t := s.tr.Load(); t != nil {
		t.ended(id)
	}
}
