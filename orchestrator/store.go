package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"github.com/sagaflow/sagaflow/internal/pgid"
	"github.com/sagaflow/sagaflow/saga"
	"math"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// querier is what the store needs from a pool, a connection or a
// transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// store owns the SQL of the orchestrator's saga and journal tables.
type store struct {
	sagas, journal, timers string
	// failedCounts: the failed sagas by type, kept by triggers on sagas
	// (migration 020).
	failedCounts string
	// The reconciler's tables, and the engine's outbox (dead commands).
	discrepancies, reconcileRuns, outbox string
	// The operator audit (repair.go) and the four-eyes proposals
	// (proposal.go).
	audit, proposals string

	loadSQL, loadByKeySQL, journalSQL, dueSQL, readJournalSQL string
	loadManySQL, updateManySQL, insertManySQL, insertNewSQL   string
	updateCheckedSQL                                          string
	setTimerSQL, deleteTimerSQL                               string
	journalPageSQL, journalCountSQL                           string
}

const sagaColumns = `id, type, definition_version, aggregate_id, idempotency_key, state, current_step, data, steps, version, flag, deadline_at, created_at, updated_at, finished_at, secret, traceparent, tracestate`

func newStore(schema string) *store {
	s := &store{
		sagas:   pgx.Identifier{schema, "sagas"}.Sanitize(),
		journal: pgx.Identifier{schema, "journal"}.Sanitize(),
		timers:  pgx.Identifier{schema, "timers"}.Sanitize(),

		failedCounts: pgx.Identifier{schema, "failed_counts"}.Sanitize(),

		discrepancies: pgx.Identifier{schema, "reconcile_discrepancies"}.Sanitize(),
		reconcileRuns: pgx.Identifier{schema, "reconcile_runs"}.Sanitize(),
		outbox:        pgx.Identifier{schema, "outbox"}.Sanitize(),
		audit:         pgx.Identifier{schema, "operator_audit"}.Sanitize(),
		proposals:     pgx.Identifier{schema, "operator_proposals"}.Sanitize(),
	}
	// Every write of a saga row also writes its timer row, in the same
	// statement: inserted when the saga gets a wake-up time, moved only
	// EARLIER, deleted when it has none. A timer row is never later than
	// the saga's wake-up, so nothing fires late; it may be earlier (each
	// step sets a later timeout, and a step update that does not touch the
	// timer row writes one index entry fewer per table), and a timer that
	// fires early finds nothing due and is moved to the real wake-up
	// (resyncTimer). The saga row keeps next_wakeup_at unindexed, so a
	// step-to-step update is HOT. An update passes the wake-up of the
	// version it replaces (u.prev_wakeup): when that was set and the new
	// one is not earlier, the timer row (no later than the old wake-up) is
	// not touched at all, not even locked by the upsert's conflict check.
	insertTimers := `tim AS (INSERT INTO ` + s.timers + ` (saga_id, due_at)
  SELECT id, next_wakeup_at FROM ins WHERE next_wakeup_at IS NOT NULL)`
	syncTimers := `del AS (DELETE FROM ` + s.timers + ` AS t USING upd WHERE t.saga_id = upd.id AND upd.next_wakeup_at IS NULL),
tim AS (INSERT INTO ` + s.timers + ` AS t (saga_id, due_at)
  SELECT id, next_wakeup_at FROM upd WHERE next_wakeup_at IS NOT NULL AND (prev_wakeup IS NULL OR next_wakeup_at < prev_wakeup)
  ON CONFLICT (saga_id) DO UPDATE SET due_at = EXCLUDED.due_at WHERE EXCLUDED.due_at < t.due_at)`
	s.insertManySQL = `WITH ins AS (INSERT INTO ` + s.sagas + ` (` + sagaColumns + `, next_wakeup_at)
SELECT * FROM unnest($1::uuid[], $2::text[], $3::int[], $4::text[], $5::text[], $6::text[], $7::text[], $8::jsonb[], $9::jsonb[],
  $10::bigint[], $11::text[], $12::timestamptz[], $13::timestamptz[], $14::timestamptz[], $15::timestamptz[], $16::bytea[], $17::text[], $18::text[], $19::timestamptz[])
ON CONFLICT (type, idempotency_key) DO NOTHING
RETURNING id, next_wakeup_at),
` + insertTimers + `
SELECT id FROM ins`
	// insertNewSQL is insertManySQL for sagas that must all be new: an
	// existing idempotency key fails the statement (unique_violation), so
	// a pipelined COMMIT after it never runs.
	s.insertNewSQL = strings.Replace(s.insertManySQL, "ON CONFLICT (type, idempotency_key) DO NOTHING\n", "", 1)
	s.loadSQL = `SELECT ` + sagaColumns + ` FROM ` + s.sagas + ` WHERE id = $1`
	s.loadManySQL = `SELECT ` + sagaColumns + ` FROM ` + s.sagas + ` WHERE id = ANY($1)`
	// "s.id = ANY($1)" repeats the join's condition as an index condition
	// on sagas: without it the planner, with statistics of a smaller
	// table, joined a large batch by scanning the whole table
	// (docs/perf/figures.md#saga-reply-plans).
	s.updateManySQL = `WITH upd AS (UPDATE ` + s.sagas + ` AS s SET state = u.state, current_step = u.current_step, data = u.data, steps = u.steps,
  version = u.version, flag = u.flag, deadline_at = u.deadline_at, next_wakeup_at = u.next_wakeup_at,
  updated_at = u.updated_at, finished_at = u.finished_at
FROM unnest($1::uuid[], $2::bigint[], $3::text[], $4::text[], $5::jsonb[], $6::jsonb[], $7::bigint[], $8::text[],
  $9::timestamptz[], $10::timestamptz[], $11::timestamptz[], $12::timestamptz[], $13::timestamptz[])
  AS u(id, prev, state, current_step, data, steps, version, flag, deadline_at, next_wakeup_at, updated_at, finished_at, prev_wakeup)
WHERE s.id = ANY($1::uuid[]) AND s.id = u.id AND s.version = u.prev
RETURNING s.id, s.next_wakeup_at, u.prev_wakeup),
` + syncTimers + `
SELECT id FROM upd`
	// updateCheckedSQL is updateManySQL that fails (40001) unless every
	// saga was updated ($14 of them): for an update whose result is read
	// only after the COMMIT sent with it (migration 011).
	s.updateCheckedSQL = strings.Replace(s.updateManySQL, "SELECT id FROM upd",
		"SELECT "+pgx.Identifier{schema, "require_updated"}.Sanitize()+"(count(*), $14) FROM upd", 1)
	s.loadByKeySQL = `SELECT ` + sagaColumns + ` FROM ` + s.sagas + ` WHERE type = $1 AND idempotency_key = $2`
	s.journalSQL = `INSERT INTO ` + s.journal + ` (saga_id, at, event, from_state, to_state, step, action, message_id, actor, reason, ignored, ticket)
SELECT * FROM unnest($1::uuid[], $2::timestamptz[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::uuid[], $9::text[], $10::text[], $11::bool[], $12::text[])`
	// The saga rows are locked, not the timer rows: every writer locks a
	// saga row before its timer row, so the two paths cannot deadlock.
	s.dueSQL = `SELECT s.id FROM ` + s.timers + ` AS t JOIN ` + s.sagas + ` AS s ON s.id = t.saga_id
WHERE t.due_at <= $1 ORDER BY t.due_at LIMIT $2 FOR UPDATE OF s SKIP LOCKED`
	s.setTimerSQL = `INSERT INTO ` + s.timers + ` AS t (saga_id, due_at) VALUES ($1, $2)
ON CONFLICT (saga_id) DO UPDATE SET due_at = EXCLUDED.due_at`
	s.deleteTimerSQL = `DELETE FROM ` + s.timers + ` WHERE saga_id = $1`
	s.readJournalSQL = `SELECT id, saga_id, at, event, from_state, to_state, step, action, message_id, actor, reason, ignored, ticket
FROM ` + s.journal + ` WHERE saga_id = $1 ORDER BY id`
	// Newest first from an id down, on the primary key (saga_id, id).
	s.journalPageSQL = `SELECT id, saga_id, at, event, from_state, to_state, step, action, message_id, actor, reason, ignored, ticket
FROM ` + s.journal + ` WHERE saga_id = $1 AND id < $2 ORDER BY id DESC LIMIT $3`
	s.journalCountSQL = `SELECT count(*) FROM ` + s.journal + ` WHERE saga_id = $1`
	return s
}

func currentStepName(in *saga.Instance) string {
	if in.Cursor >= 0 && in.Cursor < len(in.Steps) {
		return in.Steps[in.Cursor].Name
	}
	return ""
}

// insertMany stores new instances in one statement and returns the ids it
// inserted; an instance whose (type, idempotency key) exists is skipped.
func (s *store) insertMany(ctx context.Context, db querier, ins []*saga.Instance) (map[uuid.UUID]bool, error) {
	b := &pgx.Batch{}
	out := make(map[uuid.UUID]bool, len(ins))
	if err := s.queueInsertMany(b, ins, out); err != nil {
		return nil, err
	}
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return nil, err
	}
	return out, nil
}

// queueInsertMany adds insertMany's statement to b; inserted receives the
// ids it inserted.
func (s *store) queueInsertMany(b *pgx.Batch, ins []*saga.Instance, inserted map[uuid.UUID]bool) error {
	return s.queueInsert(b, s.insertManySQL, ins, inserted)
}

// queueInsert adds the insert of ins with sql (insertManySQL or
// insertNewSQL) to b.
func (s *store) queueInsert(b *pgx.Batch, sql string, ins []*saga.Instance, inserted map[uuid.UUID]bool) error {
	n := len(ins)
	ids := make([]uuid.UUID, n)
	types, aggs, keys, states, currents, flags := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	defVersions := make([]int32, n)
	datas, stepss := make([][]byte, n), make([][]byte, n)
	versions := make([]int64, n)
	deadlines, created, updated, finished, wakeups := make([]*time.Time, n), make([]time.Time, n), make([]time.Time, n), make([]*time.Time, n), make([]*time.Time, n)
	secrets := make([][]byte, n)
	tps, tss := make([]string, n), make([]string, n)
	for i, in := range ins {
		secrets[i], tps[i], tss[i] = in.Secret, in.TraceParent, in.TraceState
		js, err := appendSteps(nil, in.Steps)
		if err != nil {
			return err
		}
		ids[i], types[i], defVersions[i], aggs[i], keys[i] = in.ID, in.Type, int32(in.DefVersion), in.AggregateID, in.IdempotencyKey
		states[i], currents[i], datas[i], stepss[i], versions[i], flags[i] = string(in.State), currentStepName(in), in.Data, js, in.Version, in.Flag
		deadlines[i], created[i], updated[i], finished[i], wakeups[i] = in.DeadlineAt, in.CreatedAt, in.UpdatedAt, in.FinishedAt, in.NextWakeup()
	}
	b.Queue(sql, pgid.UUIDs(ids), types, defVersions, aggs, keys, states, currents, datas, stepss,
		versions, flags, deadlines, created, updated, finished, secrets, tps, tss, wakeups).Query(collectIDs(inserted, fmt.Sprintf("insert %d sagas", n)))
	return nil
}

// resyncTimer sets the timer row of saga id to wake exactly (none: no row).
// The timer path calls it after firing, since other writes only move a
// timer earlier.
func (s *store) resyncTimer(ctx context.Context, db querier, id uuid.UUID, wake *time.Time) error {
	var err error
	if wake == nil {
		_, err = db.Exec(ctx, s.deleteTimerSQL, id)
	} else {
		_, err = db.Exec(ctx, s.setTimerSQL, id, *wake)
	}
	if err != nil {
		return fmt.Errorf("resync timer of saga %s: %w", id, err)
	}
	return nil
}

// collectIDs reads rows of one uuid column into into.
func collectIDs(into map[uuid.UUID]bool, what string) func(pgx.Rows) error {
	return func(rows pgx.Rows) error {
		for rows.Next() {
			var id pgtype.UUID
			if err := rows.Scan(&id); err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			into[uuid.UUID(id.Bytes)] = true
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	}
}

func scanInstance(row pgx.Row) (saga.Instance, error) {
	var in saga.Instance
	var state, current string
	// Both JSON columns are scanned as bytes: into a json.RawMessage pgx
	// would run encoding/json over the document (validating what Postgres
	// already validated), and the step list has its own reader.
	var data, steps []byte
	err := row.Scan(&in.ID, &in.Type, &in.DefVersion, &in.AggregateID, &in.IdempotencyKey, &state, &current,
		&data, &steps, &in.Version, &in.Flag, &in.DeadlineAt, &in.CreatedAt, &in.UpdatedAt, &in.FinishedAt, &in.Secret,
		&in.TraceParent, &in.TraceState)
	if err != nil {
		return saga.Instance{}, err
	}
	in.Data = data
	in.State = saga.State(state)
	if in.Steps, err = decodeSteps(steps); err != nil {
		return saga.Instance{}, fmt.Errorf("saga %s: decode steps: %w", in.ID, err)
	}
	in.Cursor = cursorOf(in.Steps, current)
	return in, nil
}

// cursorOf is the index of the step named current (the row's current_step
// column), -1 for none: how a loaded saga finds its cursor.
func cursorOf(steps []saga.StepState, current string) int {
	cursor := -1
	for i := range steps {
		if steps[i].Name == current {
			cursor = i
		}
	}
	return cursor
}

func (s *store) load(ctx context.Context, db querier, id uuid.UUID) (saga.Instance, error) {
	in, err := scanInstance(db.QueryRow(ctx, s.loadSQL, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return saga.Instance{}, fmt.Errorf("saga %s: %w", id, saga.ErrNotFound)
	}
	if err != nil {
		return saga.Instance{}, fmt.Errorf("load saga %s: %w", id, err)
	}
	return in, nil
}

// loadMany loads the sagas of ids in one query; missing ids are absent
// from the map.
func (s *store) loadMany(ctx context.Context, db querier, ids []uuid.UUID) (map[uuid.UUID]saga.Instance, error) {
	rows, err := db.Query(ctx, s.loadManySQL, pgid.UUIDs(ids))
	if err != nil {
		return nil, fmt.Errorf("load %d sagas: %w", len(ids), err)
	}
	defer rows.Close()
	out := make(map[uuid.UUID]saga.Instance, len(ids))
	for rows.Next() {
		in, err := scanInstance(rows)
		if err != nil {
			return nil, fmt.Errorf("load %d sagas: %w", len(ids), err)
		}
		out[in.ID] = in
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("load %d sagas: %w", len(ids), err)
	}
	return out, nil
}

// prior is what an update needs of the version of a saga it replaces: the
// version (the update's condition) and the wake-up time (whether the timer
// row must move).
type prior struct {
	version int64
	wakeup  *time.Time
}

// priorOf is the prior of in, the version an update replaces.
func priorOf(in *saga.Instance) prior {
	return prior{version: in.Version, wakeup: in.NextWakeup()}
}

// queueUpdateMany adds to b the update of each next[i] if its stored
// version is still prev[i]'s, in one statement; done receives the ids it
// wrote (an id missing was moved by someone else first).
func (s *store) queueUpdateMany(b *pgx.Batch, next []*saga.Instance, prev []prior, done map[uuid.UUID]bool) error {
	args, err := s.updateArgs(next, prev)
	if err != nil {
		return err
	}
	b.Queue(s.updateManySQL, args...).Query(collectIDs(done, fmt.Sprintf("update %d sagas", len(next))))
	return nil
}

// queueUpdateChecked adds to b the update of each next[i] if its stored
// version is still prev[i]'s, failing the statement (40001) unless all
// were.
func (s *store) queueUpdateChecked(b *pgx.Batch, next []*saga.Instance, prev []prior) error {
	args, err := s.updateArgs(next, prev)
	if err != nil {
		return err
	}
	b.Queue(s.updateCheckedSQL, append(args, len(next))...)
	return nil
}

// updateArgs are the arguments of updateManySQL.
func (s *store) updateArgs(next []*saga.Instance, prev []prior) ([]any, error) {
	n := len(next)
	ids := make([]uuid.UUID, n)
	prevVersions, prevWakeups := make([]int64, n), make([]*time.Time, n)
	for i, p := range prev {
		prevVersions[i], prevWakeups[i] = p.version, p.wakeup
	}
	states, currents, flags := make([]string, n), make([]string, n), make([]string, n)
	datas, stepss := make([][]byte, n), make([][]byte, n)
	versions := make([]int64, n)
	deadlines, wakeups, updated, finished := make([]*time.Time, n), make([]*time.Time, n), make([]time.Time, n), make([]*time.Time, n)
	for i, in := range next {
		js, err := appendSteps(nil, in.Steps)
		if err != nil {
			return nil, err
		}
		ids[i], states[i], currents[i], flags[i] = in.ID, string(in.State), currentStepName(in), in.Flag
		datas[i], stepss[i], versions[i] = in.Data, js, in.Version
		deadlines[i], wakeups[i], updated[i], finished[i] = in.DeadlineAt, in.NextWakeup(), in.UpdatedAt, in.FinishedAt
	}
	return []any{pgid.UUIDs(ids), prevVersions, states, currents, datas, stepss, versions, flags, deadlines, wakeups, updated, finished, prevWakeups}, nil
}

func (s *store) loadByKey(ctx context.Context, db querier, sagaType, key string) (saga.Instance, error) {
	in, err := scanInstance(db.QueryRow(ctx, s.loadByKeySQL, sagaType, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return saga.Instance{}, fmt.Errorf("saga %s/%s: %w", sagaType, key, saga.ErrNotFound)
	}
	if err != nil {
		return saga.Instance{}, fmt.Errorf("load saga %s/%s: %w", sagaType, key, err)
	}
	return in, nil
}

// update writes next if the stored version is still prev's; false when
// someone else moved the saga first.
func (s *store) update(ctx context.Context, db querier, next *saga.Instance, prev prior) (bool, error) {
	b := &pgx.Batch{}
	done := make(map[uuid.UUID]bool, 1)
	if err := s.queueUpdateMany(b, []*saga.Instance{next}, []prior{prev}, done); err != nil {
		return false, err
	}
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return false, fmt.Errorf("update saga %s at version %d: %w", next.ID, prev.version, err)
	}
	return done[next.ID], nil
}

// queueJournal adds the insert of entries to b.
func (s *store) queueJournal(b *pgx.Batch, entries []saga.JournalEntry) {
	if len(entries) == 0 {
		return
	}
	n := len(entries)
	ids, ats := make([]uuid.UUID, n), make([]time.Time, n)
	events, froms, tos, steps, actions, actors, reasons := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	msgs := make([]pgtype.UUID, n)
	ignored := make([]bool, n)
	tickets := make([]string, n)
	for i, e := range entries {
		tickets[i] = e.Ticket
		ids[i], ats[i], events[i], froms[i], tos[i] = e.SagaID, e.At, e.Event, string(e.From), string(e.To)
		steps[i], actions[i], actors[i], reasons[i], ignored[i] = e.Step, e.Action, e.Actor, e.Reason, e.Ignored
		if e.MessageID != nil {
			msgs[i] = pgtype.UUID{Bytes: *e.MessageID, Valid: true}
		}
	}
	b.Queue(s.journalSQL, pgid.UUIDs(ids), ats, events, froms, tos, steps, actions, msgs, actors, reasons, ignored, tickets)
}

func (s *store) readJournal(ctx context.Context, db querier, id uuid.UUID) ([]saga.JournalEntry, error) {
	rows, err := db.Query(ctx, s.readJournalSQL, id)
	if err != nil {
		return nil, fmt.Errorf("read journal of saga %s: %w", id, err)
	}
	return scanJournal(rows, id)
}

// readJournalPage reads up to limit entries of id's journal with ids below
// before (0: from the newest), newest first, and the journal's size.
func (s *store) readJournalPage(ctx context.Context, db querier, id uuid.UUID, before int64, limit int) ([]saga.JournalEntry, int, error) {
	if before <= 0 {
		before = math.MaxInt64
	}
	var entries []saga.JournalEntry
	var total int
	b := &pgx.Batch{}
	b.Queue(s.journalPageSQL, id, before, limit).Query(func(rows pgx.Rows) error {
		var err error
		entries, err = scanJournal(rows, id)
		return err
	})
	b.Queue(s.journalCountSQL, id).QueryRow(func(row pgx.Row) error { return row.Scan(&total) })
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return nil, 0, fmt.Errorf("read a journal page of saga %s: %w", id, err)
	}
	return entries, total, nil
}

func scanJournal(rows pgx.Rows, id uuid.UUID) ([]saga.JournalEntry, error) {
	defer rows.Close()
	var out []saga.JournalEntry
	for rows.Next() {
		var e saga.JournalEntry
		var from, to string
		if err := rows.Scan(&e.ID, &e.SagaID, &e.At, &e.Event, &from, &to, &e.Step, &e.Action, &e.MessageID, &e.Actor, &e.Reason, &e.Ignored, &e.Ticket); err != nil {
			return nil, fmt.Errorf("read journal of saga %s: %w", id, err)
		}
		e.From, e.To = saga.State(from), saga.State(to)
		out = append(out, e)
	}
	return out, rows.Err()
}

func (s *store) due(ctx context.Context, db querier, now time.Time, limit int) ([]uuid.UUID, error) {
	rows, err := db.Query(ctx, s.dueSQL, now, limit)
	if err != nil {
		return nil, fmt.Errorf("claim due timers: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
}
