package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/saga"
)

// Flow reconciliation: besides the state of each saga, the reconciler
// checks the flow between the orchestrator and the outside over its window.
//
//   - Commands recorded: a sample of the sagas finished in the window
//     (FlowSampleRate, at most MaxFlowChecks a run) is sent a check, the
//     participant query the barrier check uses; a step the saga holds as
//     answered whose participant has no record of its command (the query
//     closed an empty barrier) is KindCommandNotRecorded.
//   - One saga per start: the unique index on (idempotency_key, type) makes
//     a second saga for a start impossible while it is in force; when it is
//     missing or invalid, the starts of the window are grouped by key and
//     every extra saga is KindStartDuplicated.
const (
	KindCommandNotRecorded DiscrepancyKind = "flow_command_not_recorded"
	KindStartDuplicated    DiscrepancyKind = "flow_start_duplicated"
)

// Flow check defaults (ReconcileOptions).
const (
	ReconcileFlowSampleDefault    = 0.1
	ReconcileMaxFlowChecksDefault = 100
)

// flowReason is the reason journaled with a flow check.
const flowReason = "reconcile: flow: commands recorded by their participants"

// notRecordedKind is the kind saga.Disagreement gives a step the saga
// holds as succeeded whose participant recorded nothing (its query closed
// the empty barrier): the command was answered but is not recorded.
var notRecordedKind = saga.Disagreement(saga.Completed, saga.StepSucceeded, "closed")

// flowKind is the kind a check answer's difference is reported under:
// the flow check's when the participant has no record of the command.
func flowKind(kind string) DiscrepancyKind {
	if kind == notRecordedKind {
		return KindCommandNotRecorded
	}
	return DiscrepancyKind(kind)
}

// flowChecks sends a check to a sample of the sagas finished in the window
// that were not checked yet (by this check or the barrier check), at most
// o.MaxFlowChecks.
func (e *Engine) flowChecks(ctx context.Context, o ReconcileOptions, since time.Time) (int, error) {
	if o.FlowSampleRate <= 0 || o.MaxFlowChecks == 0 {
		return 0, nil
	}
	// A different hash than the barrier sample's, so the two samples
	// differ.
	rows, err := e.pool.Query(ctx, `SELECT s.id FROM `+e.st.sagas+` s
WHERE s.finished_at IS NOT NULL AND s.finished_at >= $1 AND s.state IN ('completed', 'compensated')
  AND (abs(hashtext('flow' || s.id::text)) % 1000000) < $2
  AND NOT EXISTS (SELECT 1 FROM `+e.st.journal+` j WHERE j.saga_id = s.id AND j.event = '`+saga.JournalCheckSent+`')
ORDER BY s.finished_at LIMIT $3`, since, int64(o.FlowSampleRate*1000000), o.MaxFlowChecks)
	if err != nil {
		return 0, fmt.Errorf("reconcile: flow: sample finished sagas: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return 0, fmt.Errorf("reconcile: flow: sample finished sagas: %w", err)
	}
	n := 0
	for _, id := range ids {
		_, err := e.Operate(ctx, id, saga.Operator{Action: saga.ActionCheck, Actor: o.Actor, Reason: flowReason})
		var refused *saga.RefusedError
		switch {
		case errors.As(err, &refused):
			continue
		case err != nil:
			return n, fmt.Errorf("reconcile: flow: check saga %s: %w", id, err)
		}
		n++
	}
	return n, nil
}

// idempotencyIndex names the unique index that makes one saga per start.
const idempotencyIndex = "sagas_idempotency_key_idx"

// duplicatedStarts finds the starts of the window that made more than one
// saga; cheap while the unique index is in force (nothing can be found),
// a grouping of the window's sagas when it is not.
func (e *Engine) duplicatedStarts(ctx context.Context, since time.Time) ([]Discrepancy, error) {
	var enforced bool
	err := e.pool.QueryRow(ctx, `SELECT coalesce((SELECT i.indisunique AND i.indisvalid FROM pg_index i WHERE i.indexrelid = to_regclass($1)), false)`,
		pgx.Identifier{e.cfg.Schema, idempotencyIndex}.Sanitize()).Scan(&enforced)
	if err != nil {
		return nil, fmt.Errorf("reconcile: flow: read the idempotency index: %w", err)
	}
	if enforced {
		return nil, nil
	}
	e.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "reconcile: the unique index of idempotency keys is missing or invalid; grouping the window's starts",
		slog.String("index", idempotencyIndex))
	rows, err := e.pool.Query(ctx, `SELECT type, idempotency_key, array_agg(id ORDER BY created_at, id), array_agg(version ORDER BY created_at, id)
FROM `+e.st.sagas+` WHERE created_at >= $1 AND idempotency_key <> '' GROUP BY type, idempotency_key HAVING count(*) > 1 LIMIT $2`, since, reconcileScanLimit)
	if err != nil {
		return nil, fmt.Errorf("reconcile: flow: group the window's starts: %w", err)
	}
	defer rows.Close()
	var out []Discrepancy
	for rows.Next() {
		var typ, key string
		var ids []uuid.UUID
		var versions []int64
		if err := rows.Scan(&typ, &key, &ids, &versions); err != nil {
			return nil, fmt.Errorf("reconcile: flow: group the window's starts: %w", err)
		}
		for i := 1; i < len(ids); i++ {
			out = append(out, Discrepancy{SagaID: ids[i], SagaType: typ, version: versions[i], Kind: KindStartDuplicated,
				Detail: fmt.Sprintf("the start of %s with idempotency key %q made %d sagas; the first is %s", typ, clip(key, 200), len(ids), ids[0])})
		}
	}
	return out, rows.Err()
}

// clip shortens s to at most n bytes.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}
