package orchestrator

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sagaflow/sagaflow/saga"
)

// Reconciler defaults.
const (
	ReconcileSinceDefault      = 24 * time.Hour
	ReconcileSampleDefault     = 0.01
	ReconcileMaxChecksDefault  = 200
	ReconcileMaxRepairsDefault = 200
	ReconcileStuckAfterDefault = 15 * time.Minute
	// ReconcileQueryRoundsDefault bounds the reconciler's query rounds per
	// failed saga: after them its discrepancy waits for a person.
	ReconcileQueryRoundsDefault = 3
)

// DiscrepancyKind names what the reconciler found wrong with a saga.
type DiscrepancyKind string

// Kinds of discrepancy the reconciler reports (differences found by check
// answers add the kinds of saga.Disagreement).
const (
	KindFailedUnknown        DiscrepancyKind = "failed_unknown_step"       // failed: a step given up without a definite answer
	KindFailed               DiscrepancyKind = "failed"                    // failed for another reason (a definition error)
	KindStuck                DiscrepancyKind = "stuck"                     // running or compensating, not moved for StuckAfter
	KindCommandDead          DiscrepancyKind = "command_dead"              // a command the relay gave up publishing (a dead outbox row)
	KindActiveAfterTerminal  DiscrepancyKind = "terminal_with_active_step" // a finished saga with a step still awaiting an answer
	KindCompletedUnfinished  DiscrepancyKind = "completed_with_open_step"  // completed with a step not succeeded
	KindCompensatedPastPivot DiscrepancyKind = "compensated_after_pivot"   // a step compensated although the pivot succeeded
	KindCompensatedUnsent    DiscrepancyKind = "compensated_step_not_sent" // a compensated step whose forward was never sent
	KindEventAfterTerminal   DiscrepancyKind = "transition_after_terminal" // the journal moved a finished saga (not an operator)
)

// ReconcileOptions configures one reconciliation run. Zero fields take the
// defaults above.
type ReconcileOptions struct {
	// Since: the window of journal entries and finished sagas looked at.
	// Failed, stuck and dead-command checks look at every saga.
	Since time.Duration
	// SampleRate: the share of finished sagas in the window that are
	// checked against their participants (queries); negative: none.
	SampleRate float64
	// MaxChecks and MaxRepairs bound the checks sent and repairs made by
	// one run.
	MaxChecks, MaxRepairs int
	// FlowSampleRate: the share of finished sagas in the window whose
	// commands are checked against their participants' records (flow
	// reconciliation, reconcile_flow.go); negative: none. MaxFlowChecks
	// bounds those checks per run.
	FlowSampleRate float64
	MaxFlowChecks  int
	// Outcomes, if set, is the outcome topic the reconciler compares with
	// the sagas that finished between OutcomeWindow and OutcomeGrace ago
	// (reconcile_outcomes.go); serve sets it to its Service's.
	Outcomes                    OutcomeSource
	OutcomeWindow, OutcomeGrace time.Duration
	// Starts, if set, is the start topic whose records of the same window
	// must each have made a saga or been dead-lettered.
	Starts StartSource
	// StuckAfter: a running or compensating saga that has not moved for
	// this long is stuck (its timers should have moved it).
	StuckAfter time.Duration
	// QueryRounds: reconciler query rounds per failed saga.
	QueryRounds int
	// DryRun finds and reports but repairs, checks and records nothing.
	DryRun bool
	// Actor of the repairs; default ActorReconciler.
	Actor string
}

// WithDefaults returns o with its zero fields set to the defaults.
func (o ReconcileOptions) WithDefaults() ReconcileOptions {
	o.Since = cmp.Or(o.Since, ReconcileSinceDefault)
	o.SampleRate = cmp.Or(o.SampleRate, ReconcileSampleDefault)
	o.MaxChecks = cmp.Or(o.MaxChecks, ReconcileMaxChecksDefault)
	o.MaxRepairs = cmp.Or(o.MaxRepairs, ReconcileMaxRepairsDefault)
	o.FlowSampleRate = cmp.Or(o.FlowSampleRate, ReconcileFlowSampleDefault)
	o.MaxFlowChecks = cmp.Or(o.MaxFlowChecks, ReconcileMaxFlowChecksDefault)
	o.OutcomeWindow = cmp.Or(o.OutcomeWindow, ReconcileOutcomeWindowDefault)
	o.OutcomeGrace = cmp.Or(o.OutcomeGrace, ReconcileOutcomeGraceDefault)
	o.StuckAfter = cmp.Or(o.StuckAfter, ReconcileStuckAfterDefault)
	o.QueryRounds = cmp.Or(o.QueryRounds, ReconcileQueryRoundsDefault)
	o.Actor = cmp.Or(o.Actor, saga.ActorReconciler)
	return o
}

func (o ReconcileOptions) validate() error {
	switch {
	case o.Since < 0:
		return fmt.Errorf("reconcile: Since %s must not be negative", o.Since)
	case o.SampleRate > 1:
		return fmt.Errorf("reconcile: SampleRate %g must be at most 1", o.SampleRate)
	case o.FlowSampleRate > 1:
		return fmt.Errorf("reconcile: FlowSampleRate %g must be at most 1", o.FlowSampleRate)
	case o.MaxFlowChecks < 0:
		return fmt.Errorf("reconcile: MaxFlowChecks %d must not be negative", o.MaxFlowChecks)
	case o.MaxChecks < 0 || o.MaxRepairs < 0:
		return fmt.Errorf("reconcile: MaxChecks %d and MaxRepairs %d must not be negative", o.MaxChecks, o.MaxRepairs)
	case o.OutcomeGrace < 0 || o.OutcomeWindow < 0:
		return fmt.Errorf("reconcile: OutcomeWindow %s and OutcomeGrace %s must not be negative", o.OutcomeWindow, o.OutcomeGrace)
	case o.StuckAfter < 0:
		return fmt.Errorf("reconcile: StuckAfter %s must not be negative", o.StuckAfter)
	case o.QueryRounds < 0:
		return fmt.Errorf("reconcile: QueryRounds %d must not be negative", o.QueryRounds)
	}
	return nil
}

// Discrepancy is one difference between what the orchestrator believes and
// what the participants or the journal's own rules say.
type Discrepancy struct {
	// ID is the open discrepancy's row (0 in a dry run).
	ID       int64           `json:"id,omitempty"`
	SagaID   uuid.UUID       `json:"saga_id"`
	SagaType string          `json:"saga_type,omitempty"`
	Step     string          `json:"step,omitempty"`
	Kind     DiscrepancyKind `json:"kind"`
	Detail   string          `json:"detail"`
	// Repair is what the reconciler did about it ("" for nothing: a person
	// must look).
	Repair  string    `json:"repair,omitempty"`
	FoundAt time.Time `json:"found_at,omitzero"`
	version int64
}

// ReconcileReport is what one run found and did.
type ReconcileReport struct {
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	Since      time.Time `json:"since"`
	DryRun     bool      `json:"dry_run"`
	// Differences found by this run, and by kind.
	Differences int            `json:"differences"`
	ByKind      map[string]int `json:"by_kind"`
	// Repaired: differences repaired through the one door (audited).
	Repaired int `json:"repaired"`
	// Checked: finished sagas sent a check (queries) by this run; their
	// answers are compared as they arrive and found by the next run.
	Checked int `json:"checked"`
	// FlowChecked: of those, the ones the flow check sent (their commands
	// against the participants' records).
	FlowChecked int `json:"flow_checked"`
	// Open: discrepancies open after the run (this run's and earlier ones).
	Open int           `json:"open"`
	List []Discrepancy `json:"list"`
}

// ReconcileMetrics are the reconciler's metrics.
type ReconcileMetrics struct {
	differences *prometheus.GaugeVec
	repairs     *prometheus.CounterVec
	lastRun     prometheus.Gauge
	runs        *prometheus.CounterVec
}

// NewReconcileMetrics registers the reconciler's metrics on reg.
func NewReconcileMetrics(reg prometheus.Registerer, ns string) (*ReconcileMetrics, error) {
	m := &ReconcileMetrics{
		differences: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "reconcile_differences",
			Help: "Open discrepancies after the last reconciliation run, by kind."}, []string{"kind"}),
		repairs: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "reconcile_repairs_total",
			Help: "Discrepancies the reconciler repaired through the one door, by kind."}, []string{"kind"}),
		lastRun: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "reconcile_last_run_timestamp_seconds",
			Help: "When the last reconciliation run finished (Unix time)."}),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "reconcile_runs_total",
			Help: "Reconciliation runs, by result (ok, error)."}, []string{"result"}),
	}
	for _, c := range []prometheus.Collector{m.differences, m.repairs, m.lastRun, m.runs} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register reconcile metrics: %w", err)
		}
	}
	return m, nil
}

func (m *ReconcileMetrics) observe(r ReconcileReport, open map[string]int, err error) {
	if m == nil {
		return
	}
	if err != nil {
		m.runs.WithLabelValues("error").Inc()
		return
	}
	m.runs.WithLabelValues("ok").Inc()
	m.lastRun.Set(float64(r.FinishedAt.UnixNano()) / 1e9)
	m.differences.Reset()
	for k, n := range open {
		m.differences.WithLabelValues(k).Set(float64(n))
	}
	for _, d := range r.List {
		if d.Repair != "" {
			m.repairs.WithLabelValues(string(d.Kind)).Inc()
		}
	}
}

// Reconcile runs one reconciliation: it compares what the orchestrator
// believes with the journal's own rules and with what participants
// answered to checks, repairs what is safe through the one door (audited,
// actor o.Actor: a failed saga whose step was given up is queried again, a
// stuck one has its active command re-sent), sends checks to a sample of
// finished sagas, records the rest as open discrepancies, and returns the
// report. m may be nil.
func (e *Engine) Reconcile(ctx context.Context, o ReconcileOptions, m *ReconcileMetrics) (ReconcileReport, error) {
	o = o.WithDefaults()
	if err := o.validate(); err != nil {
		return ReconcileReport{}, err
	}
	if !o.DryRun {
		unlock, err := e.lockReconcile(ctx)
		if err != nil {
			return ReconcileReport{}, err
		}
		defer unlock()
	}
	rep, open, err := e.reconcile(ctx, o)
	m.observe(rep, open, err)
	return rep, err
}

func (e *Engine) reconcile(ctx context.Context, o ReconcileOptions) (ReconcileReport, map[string]int, error) {
	now := e.cfg.Now()
	rep := ReconcileReport{StartedAt: now, Since: now.Add(-o.Since), DryRun: o.DryRun, ByKind: map[string]int{}, List: []Discrepancy{}}
	found, err := e.findDiscrepancies(ctx, o, now)
	if err != nil {
		return rep, nil, err
	}
	if found, err = e.dropSettled(ctx, found); err != nil {
		return rep, nil, err
	}
	repairs := 0
	for i := range found {
		d := &found[i]
		if o.DryRun || repairs >= o.MaxRepairs {
			continue
		}
		repair, err := e.repair(ctx, o, d)
		if err != nil {
			return rep, nil, err
		}
		if repair != "" {
			d.Repair = repair
			repairs++
		}
	}
	if !o.DryRun && o.SampleRate > 0 {
		if rep.Checked, err = e.sampleChecks(ctx, o, rep.Since); err != nil {
			return rep, nil, err
		}
	}
	if !o.DryRun {
		if rep.FlowChecked, err = e.flowChecks(ctx, o, rep.Since); err != nil {
			return rep, nil, err
		}
		rep.Checked += rep.FlowChecked
	}
	for _, d := range found {
		rep.ByKind[string(d.Kind)]++
		if d.Repair != "" {
			rep.Repaired++
		}
	}
	rep.Differences = len(found)
	var open map[string]int
	if o.DryRun {
		rep.List = found
	} else {
		if rep.List, open, err = e.recordDiscrepancies(ctx, found, now); err != nil {
			return rep, nil, err
		}
		for _, n := range open {
			rep.Open += n
		}
	}
	rep.FinishedAt = e.cfg.Now()
	if !o.DryRun {
		b, err := json.Marshal(rep)
		if err != nil {
			return rep, nil, err
		}
		if _, err := e.pool.Exec(ctx, `INSERT INTO `+e.st.reconcileRuns+` (started_at, finished_at, differences, repaired, report) VALUES ($1, $2, $3, $4, $5)`,
			rep.StartedAt, rep.FinishedAt, rep.Differences, rep.Repaired, b); err != nil {
			return rep, nil, fmt.Errorf("reconcile: record the run: %w", err)
		}
	}
	e.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "reconciled", slog.Int("differences", rep.Differences), slog.Int("repaired", rep.Repaired),
		slog.Int("checked", rep.Checked), slog.Int("open", rep.Open), slog.Bool("dry_run", o.DryRun))
	return rep, open, nil
}

// repair fixes d through the one door when that is safe, and says what it
// did ("" when it did nothing).
func (e *Engine) repair(ctx context.Context, o ReconcileOptions, d *Discrepancy) (string, error) {
	var op saga.Operator
	switch d.Kind {
	case KindFailedUnknown, "participant_done_step_unknown":
		rounds, err := e.countJournal(ctx, d.SagaID, saga.JournalOperator+string(saga.ActionQuery), o.Actor)
		if err != nil {
			return "", err
		}
		if rounds >= o.QueryRounds {
			return "", nil
		}
		op = saga.Operator{Action: saga.ActionQuery, Actor: o.Actor, Reason: fmt.Sprintf("reconcile: %s; ask the participant again (round %d of %d)", d.Kind, rounds+1, o.QueryRounds)}
	case KindStuck:
		op = saga.Operator{Action: saga.ActionRetry, Actor: o.Actor, Reason: "reconcile: stuck for " + o.StuckAfter.String() + "; re-send the active command"}
	default:
		return "", nil
	}
	_, err := e.Operate(ctx, d.SagaID, op)
	var refused *saga.RefusedError
	switch {
	case errors.As(err, &refused), errors.Is(err, saga.ErrNotFound):
		// It moved meanwhile: what was found is no longer so.
		return "", nil
	case err != nil:
		return "", fmt.Errorf("reconcile: repair saga %s (%s): %w", d.SagaID, d.Kind, err)
	}
	return string(op.Action), nil
}

func (e *Engine) countJournal(ctx context.Context, id uuid.UUID, event, actor string) (int, error) {
	var n int
	err := e.pool.QueryRow(ctx, `SELECT count(*) FROM `+e.st.journal+` WHERE saga_id = $1 AND event = $2 AND actor = $3`, id, event, actor).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("reconcile: count journal of saga %s: %w", id, err)
	}
	return n, nil
}

// sampleChecks sends a check to a sample of the sagas finished in the
// window that were not checked yet.
func (e *Engine) sampleChecks(ctx context.Context, o ReconcileOptions, since time.Time) (int, error) {
	rows, err := e.pool.Query(ctx, `SELECT s.id FROM `+e.st.sagas+` s
WHERE s.state IN ('completed', 'compensated') AND s.created_at >= $1
  AND (abs(hashtext(s.id::text)) % 1000000) < $2
  AND NOT EXISTS (SELECT 1 FROM `+e.st.journal+` j WHERE j.saga_id = s.id AND j.event = '`+saga.JournalCheckSent+`')
ORDER BY s.created_at DESC LIMIT $3`, since, int64(o.SampleRate*1000000), o.MaxChecks)
	if err != nil {
		return 0, fmt.Errorf("reconcile: sample finished sagas: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return 0, fmt.Errorf("reconcile: sample finished sagas: %w", err)
	}
	n := 0
	for _, id := range ids {
		_, err := e.Operate(ctx, id, saga.Operator{Action: saga.ActionCheck, Actor: o.Actor, Reason: "reconcile: sampled finished saga"})
		var refused *saga.RefusedError
		switch {
		case errors.As(err, &refused):
			continue
		case err != nil:
			return n, fmt.Errorf("reconcile: check saga %s: %w", id, err)
		}
		n++
	}
	return n, nil
}

// recordDiscrepancies upserts the found discrepancies as open, closes the
// open ones no longer found (those the run re-evaluates in full) or whose
// saga moved since, and returns the found ones with their ids and the open
// count by kind.
func (e *Engine) recordDiscrepancies(ctx context.Context, found []Discrepancy, now time.Time) ([]Discrepancy, map[string]int, error) {
	open := map[string]int{}
	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		if err := e.upsertDiscrepancies(ctx, tx, found, now); err != nil {
			return err
		}
		// Kinds looked for in full every run are settled when not found
		// again; window kinds (journal rules, check answers) when their saga
		// moved since they were found.
		if _, err := tx.Exec(ctx, `UPDATE `+e.st.discrepancies+` d SET resolved_at = $1, resolved_by = $2, resolution = 'no longer found'
WHERE d.resolved_at IS NULL AND d.last_seen_at < $1 AND d.kind = ANY($3)`, now, saga.ActorReconciler, fullKinds); err != nil {
			return fmt.Errorf("reconcile: settle discrepancies: %w", err)
		}
		if _, err := tx.Exec(ctx, `UPDATE `+e.st.discrepancies+` d SET resolved_at = $1, resolved_by = $2, resolution = 'the saga moved on'
FROM `+e.st.sagas+` s WHERE d.resolved_at IS NULL AND s.id = d.saga_id AND s.version > d.saga_version AND d.last_seen_at < $1 AND NOT d.kind = ANY($3)`,
			now, saga.ActorReconciler, fullKinds); err != nil {
			return fmt.Errorf("reconcile: settle discrepancies: %w", err)
		}
		rows, err := tx.Query(ctx, `SELECT kind, count(*) FROM `+e.st.discrepancies+` WHERE resolved_at IS NULL GROUP BY kind`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var k string
			var n int
			if err := rows.Scan(&k, &n); err != nil {
				return err
			}
			open[k] = n
		}
		return rows.Err()
	})
	return found, open, err
}

// upsertDiscrepancies records found (unique by saga, step and kind:
// dedupeDiscrepancies) in one statement: new ones are inserted, open ones
// seen again updated; each gets its id and when it was first found.
func (e *Engine) upsertDiscrepancies(ctx context.Context, tx pgx.Tx, found []Discrepancy, now time.Time) error {
	if len(found) == 0 {
		return nil
	}
	n := len(found)
	ids, types, versions := make([]uuid.UUID, n), make([]string, n), make([]int64, n)
	steps, kinds, details, repairs := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	at := make(map[discrepancyKey]int, n)
	for i, d := range found {
		ids[i], types[i], versions[i], steps[i], kinds[i], details[i], repairs[i] = d.SagaID, d.SagaType, d.version, d.Step, string(d.Kind), d.Detail, d.Repair
		at[discrepancyKey{d.SagaID, d.Step, d.Kind}] = i
	}
	rows, err := tx.Query(ctx, `INSERT INTO `+e.st.discrepancies+` AS t (saga_id, saga_type, saga_version, step, kind, detail, repair, found_at, last_seen_at)
SELECT f.saga_id, f.saga_type, f.saga_version, f.step, f.kind, f.detail, f.repair, $8, $8
FROM unnest($1::uuid[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::text[], $7::text[]) AS f(saga_id, saga_type, saga_version, step, kind, detail, repair)
ON CONFLICT (saga_id, step, kind) WHERE resolved_at IS NULL
DO UPDATE SET detail = excluded.detail, repair = excluded.repair, saga_version = excluded.saga_version, last_seen_at = excluded.last_seen_at
RETURNING id, found_at, saga_id, step, kind`, ids, types, versions, steps, kinds, details, repairs, now)
	if err != nil {
		return fmt.Errorf("reconcile: record discrepancies: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var foundAt time.Time
		var k discrepancyKey
		if err := rows.Scan(&id, &foundAt, &k.id, &k.step, &k.kind); err != nil {
			return fmt.Errorf("reconcile: record discrepancies: %w", err)
		}
		if i, ok := at[k]; ok {
			found[i].ID, found[i].FoundAt = id, foundAt
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("reconcile: record discrepancies: %w", err)
	}
	return nil
}

// dropSettled leaves out what was resolved before (by a person, or
// settled by the reconciler) on a saga that has not moved since: it is not
// reopened.
func (e *Engine) dropSettled(ctx context.Context, found []Discrepancy) ([]Discrepancy, error) {
	if len(found) == 0 {
		return found, nil
	}
	ids, steps, kinds, versions := make([]uuid.UUID, len(found)), make([]string, len(found)), make([]string, len(found)), make([]int64, len(found))
	for i, d := range found {
		ids[i], steps[i], kinds[i], versions[i] = d.SagaID, d.Step, string(d.Kind), d.version
	}
	// One round trip for the whole run, whatever it found.
	rows, err := e.pool.Query(ctx, `SELECT f.i FROM unnest($1::uuid[], $2::text[], $3::text[], $4::bigint[]) WITH ORDINALITY AS f(saga_id, step, kind, version, i)
WHERE EXISTS (SELECT 1 FROM `+e.st.discrepancies+` d WHERE d.saga_id = f.saga_id AND d.step = f.step AND d.kind = f.kind
  AND d.resolved_at IS NOT NULL AND d.saga_version >= f.version)`, ids, steps, kinds, versions)
	if err != nil {
		return nil, fmt.Errorf("reconcile: look up settled discrepancies: %w", err)
	}
	settled, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("reconcile: look up settled discrepancies: %w", err)
	}
	drop := make(map[int64]bool, len(settled))
	for _, i := range settled {
		drop[i-1] = true
	}
	out := found[:0]
	for i, d := range found {
		if !drop[int64(i)] {
			out = append(out, d)
		}
	}
	return out, nil
}

// fullKinds are the kinds every run looks for over all sagas.
var fullKinds = []string{string(KindFailedUnknown), string(KindFailed), string(KindStuck), string(KindCommandDead)}

// OpenDiscrepancies lists the open discrepancies, newest first (at most
// limit).
func (e *Engine) OpenDiscrepancies(ctx context.Context, limit int) ([]Discrepancy, error) {
	rows, err := e.pool.Query(ctx, `SELECT id, saga_id, saga_type, step, kind, detail, repair, found_at FROM `+e.st.discrepancies+`
WHERE resolved_at IS NULL ORDER BY found_at DESC, id DESC LIMIT $1`, cmp.Or(limit, 100))
	if err != nil {
		return nil, fmt.Errorf("open discrepancies: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Discrepancy, error) {
		var d Discrepancy
		err := r.Scan(&d.ID, &d.SagaID, &d.SagaType, &d.Step, &d.Kind, &d.Detail, &d.Repair, &d.FoundAt)
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("open discrepancies: %w", err)
	}
	return list, nil
}

// ResolveDiscrepancy closes an open discrepancy by a person (audited with
// actor and reason). ErrNotFound when no such open discrepancy exists.
func (e *Engine) ResolveDiscrepancy(ctx context.Context, id int64, actor, reason string) error {
	if strings.TrimSpace(actor) == "" || strings.TrimSpace(reason) == "" {
		return &saga.RefusedError{Action: "resolve discrepancy", Why: "an actor and a reason are required"}
	}
	tag, err := e.pool.Exec(ctx, `UPDATE `+e.st.discrepancies+` SET resolved_at = now(), resolved_by = $2, resolution = $3 WHERE id = $1 AND resolved_at IS NULL`, id, actor, reason)
	if err != nil {
		return fmt.Errorf("resolve discrepancy %d: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("discrepancy %d: %w (or already resolved)", id, saga.ErrNotFound)
	}
	e.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "discrepancy resolved", slog.Int64("id", id), slog.String("actor", actor), slog.String("reason", reason))
	return nil
}

// LastReconcile returns when the last run finished (zero if none).
func (e *Engine) LastReconcile(ctx context.Context) (time.Time, error) {
	var at *time.Time
	if err := e.pool.QueryRow(ctx, `SELECT max(finished_at) FROM `+e.st.reconcileRuns).Scan(&at); err != nil {
		return time.Time{}, fmt.Errorf("last reconcile run: %w", err)
	}
	if at == nil {
		return time.Time{}, nil
	}
	return *at, nil
}

// sortDiscrepancies orders a run's findings: by kind, then saga.
func sortDiscrepancies(ds []Discrepancy) {
	sort.Slice(ds, func(i, j int) bool {
		if ds[i].Kind != ds[j].Kind {
			return ds[i].Kind < ds[j].Kind
		}
		if ds[i].SagaID != ds[j].SagaID {
			return ds[i].SagaID.String() < ds[j].SagaID.String()
		}
		return ds[i].Step < ds[j].Step
	})
}

// ErrReconcileBusy: another run (another replica, or `orchestrator
// reconcile`) holds the reconciler's lock.
var ErrReconcileBusy = errors.New("another reconciliation run is in progress")

// lockReconcile takes the schema's reconciler lock (a session advisory
// lock on a connection of its own) so that one run at a time repairs; the
// returned func releases it.
func (e *Engine) lockReconcile(ctx context.Context) (func(), error) {
	conn, err := e.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("reconcile: lock: %w", err)
	}
	var ok bool
	key := e.st.discrepancies + " reconcile"
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtext($1))`, key).Scan(&ok); err != nil {
		conn.Release()
		return nil, fmt.Errorf("reconcile: lock: %w", err)
	}
	if !ok {
		conn.Release()
		return nil, ErrReconcileBusy
	}
	return func() {
		// A fresh context: the run's may be cancelled, the lock must go.
		uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(uctx, `SELECT pg_advisory_unlock(hashtext($1))`, key); err != nil {
			conn.Conn().Close(uctx) // closing the session drops its locks
		}
		conn.Release()
	}, nil
}

// RunReconciler runs Reconcile every interval until ctx ends (the first
// run after one interval). A run that fails is logged and counted and the
// next one is tried; a run skipped because another replica holds the lock
// is logged at debug.
func (e *Engine) RunReconciler(ctx context.Context, every time.Duration, o ReconcileOptions, m *ReconcileMetrics) error {
	if every <= 0 {
		return fmt.Errorf("reconcile: interval %s must be positive", every)
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		_, err := e.Reconcile(ctx, o, m)
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, ErrReconcileBusy):
			e.cfg.Logger.LogAttrs(ctx, slog.LevelDebug, "reconcile skipped: another run holds the lock")
		case err != nil:
			e.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "reconcile run failed; next run in "+every.String(), slog.String("error", err.Error()))
		}
	}
}
