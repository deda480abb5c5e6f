package orchestrator

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/saga"
)

// reconcileScanLimit bounds the sagas one query of a run reads.
const reconcileScanLimit = 10000

// stuckWhere selects the running and compensating sagas not moved since
// $1, on sagas_in_flight_idx (its predicate stated literally).
//
// A saga waiting for an external event is not stuck: it waits by
// definition (its wait's deadline, if any, moves it).
const stuckWhere = inFlightPredicate + ` AND updated_at < $1
     AND NOT steps @? '$[*] ? (@.state == "waiting")'`

// failedWhere selects the failed sagas on sagas_failed_idx (its predicate
// stated literally).
const failedWhere = failedPredicate

// brokenRules pre-selects the finished sagas whose steps break a rule
// InstanceDiscrepancies judges.
const brokenRules = `state IN ('completed', 'compensated') AND (
        steps @? '$[*] ? (@.state == "running" || @.state == "retrying" || @.state == "querying" || @.state == "unknown" || @.state == "compensating" || @.state == "compensation_retrying" || @.state == "waiting")'
     OR (state = 'completed' AND steps @? '$[*] ? (@.state != "succeeded" && @.state != "skipped")')
     OR (steps @? '$[*] ? (@.kind == "pivot" && @.state == "succeeded")' AND steps @? '$[*] ? (@.state == "compensated" || @.state == "compensating")')
     OR steps @? '$[*] ? (@.state == "compensated" && !exists(@.started_at))')`

// finishedInWindow selects the sagas finished since $1, on
// sagas_finished_idx.
const finishedInWindow = `finished_at IS NOT NULL AND finished_at >= $1 AND `

// movedAfterFinish selects the sagas that moved out of a finished state
// since $1 (an operator's check or resolve), on journal_from_end_idx.
const movedAfterFinish = `id IN (SELECT saga_id FROM {journal} WHERE from_state IN ('completed', 'compensated', 'failed') AND NOT ignored
  AND from_state IN ('completed', 'compensated') AND at >= $1) AND `

// findDiscrepancies looks for everything a run reports: failed and stuck
// sagas, commands the relay gave up on, finished sagas that break the
// journal's rules, and the differences check answers journaled.
func (e *Engine) findDiscrepancies(ctx context.Context, o ReconcileOptions, now time.Time) ([]Discrepancy, error) {
	var found []Discrepancy
	since := now.Add(-o.Since)

	// Failed sagas (all of them), and the finished ones whose steps break
	// the rules (pre-selected in SQL, judged in Go) among those that
	// finished in the window or moved out of a finished state in it: three
	// queries, each on an index, none reading the whole table.
	failed, err := e.scanInstances(ctx, failedWhere, nil)
	if err != nil {
		return nil, err
	}
	finished, err := e.scanInstances(ctx, finishedInWindow+brokenRules, since)
	if err != nil {
		return nil, err
	}
	moved, err := e.scanInstances(ctx, strings.Replace(movedAfterFinish, "{journal}", e.st.journal, 1)+brokenRules, since)
	if err != nil {
		return nil, err
	}
	for _, in := range slices.Concat(failed, finished, moved) {
		found = append(found, instanceDiscrepancies(in)...)
	}

	// Stuck: not moved for StuckAfter although running or compensating.
	stuck, err := e.scanInstances(ctx, stuckWhere, now.Add(-o.StuckAfter))
	if err != nil {
		return nil, err
	}
	for _, in := range stuck {
		found = append(found, Discrepancy{SagaID: in.ID, SagaType: in.Type, version: in.Version, Step: in.CurrentStep(), Kind: KindStuck,
			Detail: fmt.Sprintf("%s at step %q (%s) and not moved since %s", in.State, in.CurrentStep(), in.Steps[max(in.Cursor, 0)].State, in.UpdatedAt.Format(time.RFC3339))})
	}

	// Commands the relay gave up publishing.
	dead, err := e.deadCommands(ctx)
	if err != nil {
		return nil, err
	}
	found = append(found, dead...)

	// Flow: one saga per start.
	dup, err := e.duplicatedStarts(ctx, since)
	if err != nil {
		return nil, err
	}
	found = append(found, dup...)

	// Flow: every end on the outcome topic once. The topic unreachable
	// (the broker down) leaves this check for the next run, not the
	// others.
	if o.Outcomes != nil {
		miss, err := e.missingOutcomes(ctx, o.Outcomes, now.Add(-o.OutcomeWindow), now.Add(-o.OutcomeGrace))
		if err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			e.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "reconcile: the outcome topic could not be read; its check waits for the next run", slog.String("error", err.Error()))
		}
		found = append(found, miss...)
	}
	if o.Starts != nil {
		lost, err := e.lostStarts(ctx, o.Starts, now.Add(-o.OutcomeWindow), now.Add(-o.OutcomeGrace))
		if err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			e.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "reconcile: the start topic could not be read; its check waits for the next run", slog.String("error", err.Error()))
		}
		found = append(found, lost...)
	}

	// Journal: transitions of a finished saga that no operator made, and
	// the differences check answers found (while the saga has not moved
	// since: a later transition settled or superseded them).
	rows, err := e.pool.Query(ctx, e.journalFindingsSQL(), since, reconcileScanLimit)
	if err != nil {
		return nil, fmt.Errorf("reconcile: read the journal: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var d Discrepancy
		var event, from, reason string
		if err := rows.Scan(&d.SagaID, &d.SagaType, &d.version, &d.Step, &event, &from, &reason); err != nil {
			return nil, fmt.Errorf("reconcile: read the journal: %w", err)
		}
		if event == saga.JournalDifference {
			kind, _, _ := strings.Cut(reason, ":")
			d.Kind, d.Detail = flowKind(kind), reason
		} else {
			d.Kind, d.Detail = KindEventAfterTerminal, fmt.Sprintf("journal %q moved the saga out of %s: %s", event, from, reason)
		}
		found = append(found, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reconcile: read the journal: %w", err)
	}
	found = dedupeDiscrepancies(found)
	sortDiscrepancies(found)
	return found, nil
}

// failedExits are the journal events that may move a failed saga: an
// operator's resolve or query (and the query round it starts), and checks.
var failedExits = []string{saga.JournalOperator + string(saga.ActionResolve), saga.JournalOperator + string(saga.ActionQuery), saga.JournalQuerying,
	saga.JournalOperator + string(saga.ActionCheck), saga.JournalCheckSent}

// instanceDiscrepancies judges a failed or finished saga by its own rules:
// a failed saga is a discrepancy (a given-up step is one the reconciler may
// settle by asking again); a finished saga must have no step awaiting an
// answer, a completed one only succeeded steps, and no step may be
// compensated once the pivot succeeded or without its forward sent.
func instanceDiscrepancies(in saga.Instance) []Discrepancy {
	var out []Discrepancy
	add := func(step string, kind DiscrepancyKind, format string, args ...any) {
		out = append(out, Discrepancy{SagaID: in.ID, SagaType: in.Type, version: in.Version, Step: step, Kind: kind, Detail: fmt.Sprintf(format, args...)})
	}
	if in.State == saga.Failed {
		name, st, why := "", saga.StepStatus(""), ""
		if in.Cursor >= 0 && in.Cursor < len(in.Steps) {
			s := in.Steps[in.Cursor]
			name, st, why = s.Name, s.State, s.LastError
		}
		if st == saga.StepUnknown {
			add(name, KindFailedUnknown, "failed: step %q given up without a definite answer: %s", name, why)
		} else {
			add(name, KindFailed, "failed at step %q (%s): %s", name, st, why)
		}
		return out
	}
	if !in.State.Terminal() {
		return nil
	}
	pivotDone := false
	for _, s := range in.Steps {
		if s.Kind == saga.Pivot && s.State == saga.StepSucceeded {
			pivotDone = true
		}
	}
	for _, s := range in.Steps {
		switch s.State {
		case saga.StepRunning, saga.StepRetrying, saga.StepQuerying, saga.StepAccepted, saga.StepUnknown, saga.StepCompensating, saga.StepCompRetrying, saga.StepWaiting:
			add(s.Name, KindActiveAfterTerminal, "the saga is %s but step %q is %s", in.State, s.Name, s.State)
			continue
		}
		if in.State == saga.Completed && s.State != saga.StepSucceeded && s.State != saga.StepSkipped {
			add(s.Name, KindCompletedUnfinished, "the saga is completed but step %q is %s", s.Name, s.State)
		}
		if pivotDone && s.State == saga.StepCompensated {
			add(s.Name, KindCompensatedPastPivot, "step %q is compensated although the pivot succeeded", s.Name)
		}
		if s.State == saga.StepCompensated && s.StartedAt == nil {
			add(s.Name, KindCompensatedUnsent, "step %q is compensated but its forward was never sent", s.Name)
		}
	}
	return out
}

// scanInstances loads the sagas matching where (with $1 = arg unless arg
// is nil), at most reconcileScanLimit.
func (e *Engine) scanInstances(ctx context.Context, where string, arg any) ([]saga.Instance, error) {
	var args []any
	if arg != nil {
		args = []any{arg}
	}
	rows, err := e.pool.Query(ctx, `SELECT `+sagaColumns+` FROM `+e.st.sagas+` WHERE `+where+` LIMIT `+fmt.Sprint(reconcileScanLimit), args...)
	if err != nil {
		return nil, fmt.Errorf("reconcile: scan sagas: %w", err)
	}
	defer rows.Close()
	var out []saga.Instance
	for rows.Next() {
		in, err := scanInstance(rows)
		if err != nil {
			return nil, fmt.Errorf("reconcile: scan sagas: %w", err)
		}
		out = append(out, in)
	}
	return out, rows.Err()
}

// deadCommands lists the orchestrator's dead outbox rows: commands that
// never reached their participant.
func (e *Engine) deadCommands(ctx context.Context) ([]Discrepancy, error) {
	rows, err := e.pool.Query(ctx, `SELECT o.id, o.topic, coalesce(o.headers->>'saga-id', ''), coalesce(o.last_error, ''), coalesce(s.type, ''), coalesce(s.version, 0)
FROM `+e.st.outbox+` o LEFT JOIN `+e.st.sagas+` s ON s.id::text = lower(o.headers->>'saga-id')
WHERE o.dead_at IS NOT NULL AND o.sent_at IS NULL ORDER BY o.id LIMIT $1`, reconcileScanLimit)
	if err != nil {
		return nil, fmt.Errorf("reconcile: dead commands: %w", err)
	}
	defer rows.Close()
	var out []Discrepancy
	for rows.Next() {
		var id, version int64
		var topic, sagaID, lastErr, typ string
		if err := rows.Scan(&id, &topic, &sagaID, &lastErr, &typ, &version); err != nil {
			return nil, fmt.Errorf("reconcile: dead commands: %w", err)
		}
		sid, _ := uuid.Parse(sagaID)
		out = append(out, Discrepancy{SagaID: sid, SagaType: typ, version: version, Step: fmt.Sprintf("outbox %d", id), Kind: KindCommandDead,
			Detail: fmt.Sprintf("the command in outbox row %d for %s was given up by the relay: %s", id, topic, lastErr)})
	}
	return out, rows.Err()
}

// discrepancyKey is what makes an open discrepancy unique.
type discrepancyKey struct {
	id   uuid.UUID
	step string
	kind DiscrepancyKind
}

// dedupeDiscrepancies keeps one discrepancy per (saga, step, kind), the
// last found.
func dedupeDiscrepancies(ds []Discrepancy) []Discrepancy {
	at := map[discrepancyKey]int{}
	out := ds[:0]
	for _, d := range ds {
		k := discrepancyKey{d.SagaID, d.Step, d.Kind}
		if i, ok := at[k]; ok {
			out[i] = d
			continue
		}
		at[k] = len(out)
		out = append(out, d)
	}
	return out
}

// journalFindingsSQL selects the journal entries since $1 (at most $2)
// that are findings: transitions of a finished saga no operator made, and
// differences that check answers found while the saga has not moved since.
// Both are rare: the differences are read through journal_reconcile_idx,
// the transitions out of an end state through journal_from_end_idx, and
// the whole condition is judged on the union.
func (e *Engine) journalFindingsSQL() string {
	return `SELECT j.saga_id, coalesce(s.type, ''), coalesce(s.version, 0), j.step, j.event, j.from_state, j.reason FROM (
  SELECT id, saga_id, at, step, event, from_state, reason, ignored FROM ` + e.st.journal + `
  WHERE event IN ('` + saga.JournalDifference + `', '` + saga.JournalCheckSent + `') AND event = '` + saga.JournalDifference + `' AND at >= $1
  UNION ALL
  SELECT id, saga_id, at, step, event, from_state, reason, ignored FROM ` + e.st.journal + `
  WHERE from_state IN ('completed', 'compensated', 'failed') AND NOT ignored AND at >= $1 AND event <> '` + saga.JournalDifference + `'
) j
LEFT JOIN ` + e.st.sagas + ` s ON s.id = j.saga_id
WHERE (j.event = '` + saga.JournalDifference + `' AND (s.updated_at IS NULL OR s.updated_at <= j.at))
   OR (NOT j.ignored AND j.from_state IN ('completed', 'compensated') AND j.event NOT IN ('` + saga.JournalOperator + string(saga.ActionCheck) + `', '` + saga.JournalCheckSent + `'))
   OR (NOT j.ignored AND j.from_state = 'failed' AND j.event NOT IN ('` + strings.Join(failedExits, "', '") + `'))
ORDER BY j.id LIMIT $2`
}
