package orchestrator

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/internal/pgid"
	"github.com/sagaflow/sagaflow/saga"
)

// preloaded holds sagas loaded by a statement queueLoad added to a batch,
// for applyReplies in the same transaction.
type preloaded struct {
	asked map[uuid.UUID]bool
	rows  map[uuid.UUID]saga.Instance
	ran   bool
	// kept: the rows are the engine's kept sagas (sagaCache), loaded by
	// nothing; applyReplies uses them only where its writes go with the
	// COMMIT behind their version check.
	kept bool
}

// queueLoad adds to b the load of the sagas ids (one statement) and returns
// what it will hold once b has run. The rows are as of that statement; the
// version check of applyReplies' update guards the writes made from them,
// as for rows it loads itself.
//
// When the engine keeps every one of those sagas (sagaCache) it queues
// nothing and returns them, taken out of the cache: the inbox then begins
// the batch with nothing sent and the whole batch goes with its COMMIT.
func (e *Engine) queueLoad(b *pgx.Batch, ids []uuid.UUID) *preloaded {
	if len(ids) == 0 {
		return nil
	}
	asked := make(map[uuid.UUID]bool, len(ids))
	for _, id := range ids {
		asked[id] = true
	}
	if rows, ok := e.cache.take(ids); ok {
		e.cfg.Metrics.countKept("hit", len(ids))
		return &preloaded{asked: asked, rows: rows, ran: true, kept: true}
	}
	e.cfg.Metrics.countKept("miss", len(ids))
	p := &preloaded{asked: asked, rows: make(map[uuid.UUID]saga.Instance, len(ids))}
	queuePlanSettings(b, len(ids))
	b.Queue(e.st.loadManySQL, pgid.UUIDs(ids)).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			in, err := scanInstance(rows)
			if err != nil {
				return fmt.Errorf("preload %d sagas: %w", len(ids), err)
			}
			p.rows[in.ID] = in
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("preload %d sagas: %w", len(ids), err)
		}
		p.ran = true
		return nil
	})
	return p
}

// Plan settings of the engine's reply transactions (SET LOCAL: the rest
// of the transaction). Every statement there finds its rows by key, so an
// index scan is always the right plan, but Postgres does not always see
// it: on a table whose statistics are those of a smaller table (a fresh
// deployment, a table grown since its last analyze) it joined the batch to
// the sagas by scanning the whole table, and with the array parameters it
// kept preferring a custom plan, made anew at every execution (for a lone
// saga's update, longer than running it; docs/perf/figures.md#saga-reply-plans).
// So sequential scans are off, and batches of up
// to genericPlansMax sagas run on their generic plans (a large batch's
// custom planning is spread over its sagas).
const (
	noSeqScan       = "SET LOCAL enable_seqscan = off"
	genericPlans    = "SET LOCAL plan_cache_mode = force_generic_plan"
	genericPlansMax = 16
)

// queuePlanSettings adds the plan settings for a batch of n sagas to b.
func queuePlanSettings(b *pgx.Batch, n int) {
	b.Queue(noSeqScan)
	if n <= genericPlansMax {
		b.Queue(genericPlans)
	}
}

// take returns the sagas ids: those p loaded (an id p asked for and did
// not find does not exist), the others loaded from db now. A nil p, or one
// whose statement did not run, loads them all.
func (p *preloaded) take(ctx context.Context, st *store, db querier, ids []uuid.UUID) (map[uuid.UUID]saga.Instance, error) {
	if p == nil || !p.ran {
		return st.loadMany(ctx, db, ids)
	}
	out := make(map[uuid.UUID]saga.Instance, len(ids))
	var missing []uuid.UUID
	for _, id := range ids {
		switch in, ok := p.rows[id]; {
		case ok:
			out[id] = in
		case !p.asked[id]:
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		more, err := st.loadMany(ctx, db, missing)
		if err != nil {
			return nil, err
		}
		for id, in := range more {
			out[id] = in
		}
	}
	return out, nil
}
