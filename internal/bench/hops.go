package bench

import (
	"context"
	"fmt"
	"github.com/sagaflow/sagaflow/internal/pgid"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// StepHop is where the time of one step went, over the measured sagas
// that completed it, from timestamps the databases already keep (one
// machine, one clock):
//   - Command: the orchestrator decided the step (the step's started_at)
//     -> the participant's transaction (its barrier row's created_at, the
//     transaction's start: for a batch that is one round trip, its
//     commit): the rest of the orchestrator's transaction, the dispatch,
//     Kafka, the participant consumer's queue (and, in one round trip, the
//     handler).
//   - Reply: the participant's transaction -> the orchestrator decided the
//     step's end (its finished_at): the participant's commit, the
//     dispatch, Kafka, the reply consumer's queue, the load of the saga
//     when it was not kept.
//
// The orchestrator's own reply transaction has no mark of its own in
// between: a batch of kept sagas begins it with its commit, after the
// decision.
type StepHop struct {
	Step         string  `json:"step"`
	Count        int     `json:"count"`
	CommandP50Ms float64 `json:"command_p50_ms"`
	CommandP99Ms float64 `json:"command_p99_ms"`
	ReplyP50Ms   float64 `json:"reply_p50_ms"`
	ReplyP99Ms   float64 `json:"reply_p99_ms"`
}

// stepHopsSQL builds the query over the orchestrator's schema and the
// participants' barrier tables; $1 is the measured saga ids.
func stepHopsSQL(orchestrator string, participants []string) string {
	o := func(t string) string { return pgx.Identifier{orchestrator, t}.Sanitize() }
	var barriers []string
	for _, p := range participants {
		barriers = append(barriers, `SELECT saga_id, step, created_at FROM `+pgx.Identifier{p, "barrier"}.Sanitize()+` WHERE action = 'forward'`)
	}
	return `WITH st AS (
  SELECT s.id, x.ord, x.e->>'name' AS step,
         (x.e->>'started_at')::timestamptz AS started, (x.e->>'finished_at')::timestamptz AS finished
  FROM ` + o("sagas") + ` s, jsonb_array_elements(s.steps) WITH ORDINALITY AS x(e, ord)
  WHERE s.id = ANY($1) AND x.e->>'state' = 'succeeded'),
b AS (` + strings.Join(barriers, "\nUNION ALL ") + `),
h AS (
  SELECT st.ord, st.step,
         extract(epoch FROM b.created_at - st.started) * 1000 AS command,
         extract(epoch FROM st.finished - b.created_at) * 1000 AS reply
  FROM st JOIN b ON b.saga_id = st.id AND b.step = st.step)
SELECT step, count(*)::int,
  percentile_cont(0.5) WITHIN GROUP (ORDER BY command), percentile_cont(0.99) WITHIN GROUP (ORDER BY command),
  percentile_cont(0.5) WITHIN GROUP (ORDER BY reply), percentile_cont(0.99) WITHIN GROUP (ORDER BY reply)
FROM h GROUP BY ord, step ORDER BY ord`
}

// stepHops reads the per-step breakdown of the sagas ids.
func stepHops(ctx context.Context, pool *pgxpool.Pool, orchestrator string, participants []string, ids []uuid.UUID) ([]StepHop, error) {
	if len(participants) == 0 || len(ids) == 0 {
		return nil, nil
	}
	rows, err := pool.Query(ctx, stepHopsSQL(orchestrator, participants), pgid.UUIDs(ids))
	if err != nil {
		return nil, fmt.Errorf("bench: per-step breakdown of %d sagas: %w", len(ids), err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (StepHop, error) {
		var h StepHop
		err := row.Scan(&h.Step, &h.Count, &h.CommandP50Ms, &h.CommandP99Ms, &h.ReplyP50Ms, &h.ReplyP99Ms)
		return h, err
	})
	if err != nil {
		return nil, fmt.Errorf("bench: per-step breakdown of %d sagas: %w", len(ids), err)
	}
	return out, nil
}

// medianHops is the field-by-field median of the runs' breakdowns when
// every run has the same steps in the same order; otherwise nil.
func medianHops(runs []Result, med func(func(Result) float64) float64) []StepHop {
	if !sameRows(runs, func(r Result) []StepHop { return r.StepHops }, func(h StepHop) string { return h.Step }) {
		return nil
	}
	first := runs[0].StepHops
	out := make([]StepHop, len(first))
	for i := range first {
		f := func(get func(StepHop) float64) float64 {
			return med(func(r Result) float64 { return get(r.StepHops[i]) })
		}
		out[i] = StepHop{
			Step:         first[i].Step,
			Count:        int(f(func(h StepHop) float64 { return float64(h.Count) })),
			CommandP50Ms: f(func(h StepHop) float64 { return h.CommandP50Ms }),
			CommandP99Ms: f(func(h StepHop) float64 { return h.CommandP99Ms }),
			ReplyP50Ms:   f(func(h StepHop) float64 { return h.ReplyP50Ms }),
			ReplyP99Ms:   f(func(h StepHop) float64 { return h.ReplyP99Ms }),
		}
	}
	return out
}
