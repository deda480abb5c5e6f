package orchestrator

import (
	"context"
	"encoding/base64"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/internal/outboxdb"
	"github.com/sagaflow/sagaflow/saga"
)

// Get returns one saga and its journal.
func (e *Engine) Get(ctx context.Context, id uuid.UUID) (saga.Instance, []saga.JournalEntry, error) {
	in, err := e.st.load(ctx, e.pool, id)
	if err != nil {
		return saga.Instance{}, nil, err
	}
	j, err := e.st.readJournal(ctx, e.pool, id)
	return in, j, err
}

// JournalSlice is one page of a saga's journal: Entries oldest first, Total
// the journal's size, Next the Before of the page of older entries (0 when
// there are none).
type JournalSlice struct {
	Entries []saga.JournalEntry
	Total   int
	Next    int64
}

// GetPage returns one saga and the newest limit entries of its journal with
// ids below before (0: the newest), reading only those from Postgres (a
// saga with thousands of late replies costs one page per request).
func (e *Engine) GetPage(ctx context.Context, id uuid.UUID, before int64, limit int) (saga.Instance, JournalSlice, error) {
	if limit < 1 {
		return saga.Instance{}, JournalSlice{}, fmt.Errorf("saga %s: journal page limit %d, want at least 1", id, limit)
	}
	in, err := e.st.load(ctx, e.pool, id)
	if err != nil {
		return saga.Instance{}, JournalSlice{}, err
	}
	newest, total, err := e.st.readJournalPage(ctx, e.pool, id, before, limit+1)
	if err != nil {
		return saga.Instance{}, JournalSlice{}, err
	}
	js := JournalSlice{Total: total}
	if len(newest) > limit {
		newest = newest[:limit]
		js.Next = newest[limit-1].ID
	}
	for i := len(newest) - 1; i >= 0; i-- {
		js.Entries = append(js.Entries, newest[i])
	}
	return in, js, nil
}

// Filter selects sagas for List. Zero fields do not filter. Every filter is
// served by an index (see migrations/sql/orchestrator), so List never reads
// the whole history.
type Filter struct {
	State saga.State
	Type  string
	// Step keeps open sagas (running, compensating, failed) whose active
	// step is Step.
	Step string
	// OlderThan keeps sagas created more than this long ago.
	OlderThan time.Duration
	// Stuck keeps the sagas an operator should look at: failed ones, and
	// non-terminal ones that are flagged (retrying beyond the threshold),
	// past their deadline, or have not moved for StuckAfter.
	Stuck      bool
	StuckAfter time.Duration
	// AggregateID and IdempotencyKey find sagas by their business key
	// (exact match; indexes sagas_aggregate_idx, sagas_idempotency_key_idx,
	// the latter also the key of the idempotent start).
	AggregateID    string
	IdempotencyKey string
	Limit          int
	// Cursor continues a previous page (Page.Next).
	Cursor string
}

// Page is one page of List, newest first.
type Page struct {
	Sagas []saga.Instance `json:"sagas"`
	// Next is the cursor of the following page; empty on the last page.
	Next string `json:"next,omitempty"`
}

// StuckAfterDefault is how long a non-terminal saga may stay unmoved
// before List(Stuck) reports it.
const StuckAfterDefault = time.Minute

func encodeCursor(t time.Time, id uuid.UUID) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(t.UnixNano(), 10) + "|" + id.String()))
}

func decodeCursor(s string) (time.Time, uuid.UUID, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return time.Time{}, uuid.Nil, fmt.Errorf("%w: cursor: %v", ErrInvalidInput, err)
	}
	ts, idStr, ok := strings.Cut(string(b), "|")
	if !ok {
		return time.Time{}, uuid.Nil, fmt.Errorf("%w: cursor is malformed", ErrInvalidInput)
	}
	ns, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return time.Time{}, uuid.Nil, fmt.Errorf("%w: cursor time: %v", ErrInvalidInput, err)
	}
	id, err := uuid.Parse(idStr)
	if err != nil {
		return time.Time{}, uuid.Nil, fmt.Errorf("%w: cursor id: %v", ErrInvalidInput, err)
	}
	return time.Unix(0, ns), id, nil
}

// List limits.
const (
	ListLimitDefault = 50
	ListLimitMax     = 500
)

// listQuery builds List's SQL for f.
func (e *Engine) listQuery(f Filter) (q string, args []any, limit int, err error) {
	if f.Limit <= 0 || f.Limit > ListLimitMax {
		f.Limit = ListLimitDefault
	}
	if f.State != "" && !f.State.Valid() {
		return "", nil, 0, fmt.Errorf("%w: state %q is not one of running, compensating, completed, compensated, failed", ErrInvalidInput, f.State)
	}
	var where []string
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	// The predicates of the partial indexes by state, stated literally so
	// the planner uses them (a bound state proves none of them): the
	// running and compensating sagas are read from sagas_in_flight_idx,
	// the failed ones from sagas_failed_idx, the finished ones from
	// sagas_finished_state_idx. A filter that needs the open sagas of every
	// state (step, stuck) reads the first two (parts: in flight, failed).
	const (
		open     = "state NOT IN ('completed', 'compensated')"
		finished = "state IN ('completed', 'compensated')"
	)
	var parts []string
	if f.State != "" {
		where = append(where, "state = "+arg(string(f.State)))
		switch f.State {
		case saga.Completed, saga.Compensated:
			where = append(where, finished)
			if f.Step != "" || f.Stuck {
				where = append(where, open) // never both: an empty page, as before
			}
		case saga.Failed:
			where = append(where, failedPredicate)
		default:
			where = append(where, inFlightPredicate)
		}
	} else if f.Step != "" || f.Stuck {
		parts = []string{inFlightPredicate, failedPredicate}
	}
	if f.Type != "" {
		where = append(where, "type = "+arg(f.Type))
	}
	if f.AggregateID != "" {
		where = append(where, "aggregate_id = "+arg(f.AggregateID))
	}
	if f.IdempotencyKey != "" {
		where = append(where, "idempotency_key = "+arg(f.IdempotencyKey))
	}
	if f.Step != "" {
		where = append(where, "current_step = "+arg(f.Step))
	}
	now := e.cfg.Now()
	if f.OlderThan > 0 {
		where = append(where, "created_at < "+arg(now.Add(-f.OlderThan)))
	}
	if f.Stuck {
		after := f.StuckAfter
		if after <= 0 {
			after = StuckAfterDefault
		}
		n := arg(now)
		where = append(where, "(state = 'failed' OR flag <> '' OR deadline_at < "+n+" OR updated_at < "+arg(now.Add(-after))+")")
	}
	if f.Cursor != "" {
		t, id, err := decodeCursor(f.Cursor)
		if err != nil {
			return "", nil, 0, err
		}
		where = append(where, "(created_at, id) < ("+arg(t)+", "+arg(id)+")")
	}
	const order = " ORDER BY created_at DESC, id DESC LIMIT "
	if oneStateOnly(f) {
		// The page's ids come from an index-only scan of the state's index
		// (sagas_in_flight_idx, sagas_failed_idx or sagas_finished_state_idx;
		// state and type are in each): the sagas of another state or type
		// are passed over in the index without reading their rows, and no
		// saga in flight is read on the way to the first completed one;
		// only the page's rows are read.
		q = `SELECT ` + sagaColumns + ` FROM ` + e.st.sagas + ` WHERE id IN (SELECT id FROM ` + e.st.sagas +
			` WHERE ` + strings.Join(where, " AND ") + order + arg(f.Limit+1) + `) ORDER BY created_at DESC, id DESC`
		return q, args, f.Limit, nil
	}
	if len(parts) > 0 {
		// A page from each index, newest first, and the newest of those.
		// When the sagas in flight fill a page, no failed saga older than
		// its last one can be on it: the failed sagas are read down to
		// there only (edge), as one index of both would have stopped
		// there, instead of until a page of failed sagas matches.
		limit := arg(f.Limit + 1)
		cond := func(p string) string { return strings.Join(append(where[:len(where):len(where)], p), " AND ") }
		q = `WITH f AS (SELECT ` + sagaColumns + ` FROM ` + e.st.sagas + ` WHERE ` + cond(parts[0]) + order + limit + `),
edge AS (SELECT created_at, id FROM f ORDER BY created_at DESC, id DESC OFFSET ` + arg(f.Limit) + ` LIMIT 1)
SELECT ` + sagaColumns + ` FROM (SELECT ` + sagaColumns + ` FROM f UNION ALL (SELECT ` + sagaColumns + ` FROM ` + e.st.sagas + ` WHERE ` + cond(parts[1]) +
			` AND (created_at, id) > (coalesce((SELECT created_at FROM edge), '-infinity'), coalesce((SELECT id FROM edge), '00000000-0000-0000-0000-000000000000'))` +
			order + limit + `)) AS o` + order + limit
		return q, args, f.Limit, nil
	}
	q = `SELECT ` + sagaColumns + ` FROM ` + e.st.sagas
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += order + arg(f.Limit+1)
	return q, args, f.Limit, nil
}

// oneStateOnly reports whether f lists one state with no filter but
// type, age and cursor: every column it reads is in the state's index.
func oneStateOnly(f Filter) bool {
	return f.State != "" && f.Step == "" && !f.Stuck && f.AggregateID == "" && f.IdempotencyKey == ""
}

// List returns sagas matching f, newest first, with keyset pagination on
// (created_at, id): a page never skips or repeats a saga however many are
// started meanwhile.
func (e *Engine) List(ctx context.Context, f Filter) (Page, error) {
	q, args, limit, err := e.listQuery(f)
	if err != nil {
		return Page{}, err
	}
	rows, err := e.pool.Query(ctx, q, args...)
	if err != nil {
		return Page{}, fmt.Errorf("list sagas: %w", err)
	}
	defer rows.Close()
	var p Page
	for rows.Next() {
		in, err := scanInstance(rows)
		if err != nil {
			return Page{}, fmt.Errorf("list sagas: %w", err)
		}
		p.Sagas = append(p.Sagas, in)
	}
	if err := rows.Err(); err != nil {
		return Page{}, fmt.Errorf("list sagas: %w", err)
	}
	if len(p.Sagas) > limit {
		p.Sagas = p.Sagas[:limit]
		last := p.Sagas[len(p.Sagas)-1]
		p.Next = encodeCursor(last.CreatedAt, last.ID)
	}
	return p, nil
}

// explainList returns Postgres' plan (EXPLAIN, text) of the query List runs
// for f, so a test can check it reads an index.
func (e *Engine) explainList(ctx context.Context, f Filter) (string, error) {
	q, args, _, err := e.listQuery(f)
	if err != nil {
		return "", err
	}
	return e.explain(ctx, q, args...)
}

func (e *Engine) explain(ctx context.Context, q string, args ...any) (string, error) {
	rows, err := e.pool.Query(ctx, "EXPLAIN "+q, args...)
	if err != nil {
		return "", fmt.Errorf("explain %q: %w", q, err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", fmt.Errorf("explain %q: %w", q, err)
	}
	return strings.Join(lines, "\n"), nil
}

// Stats is the pipeline summary of GET /stats.
type Stats struct {
	// Open counts sagas that are not completed or compensated (running,
	// compensating, failed) by type and state. The failed ones are exact;
	// the ones in flight too, unless more than StatsExactLimit are in
	// flight: then OpenEstimated is set and they are the engine's last
	// full count, taken at OpenCountedAt (the gauge refresh makes one every
	// GaugeInterval).
	Open          map[string]map[saga.State]int64 `json:"open"`
	OpenEstimated bool                            `json:"open_estimated"`
	OpenCountedAt time.Time                       `json:"open_counted_at"`
	// Finished counts sagas that reached completed, compensated or failed
	// within the last Window, by type and state. Totals since the start
	// are the Prometheus counter sagaflow_sagas_finished_total. When more
	// than StatsExactLimit finished within the window, FinishedEstimated is
	// set and the counts are the newest StatsExactLimit finished sagas'
	// counts scaled to the window by the time those took to finish.
	Finished          map[string]map[saga.State]int64 `json:"finished"`
	FinishedEstimated bool                            `json:"finished_estimated"`
	Window            time.Duration                   `json:"-"`
	// OldestInFlight is the age of the oldest running or compensating
	// saga; zero when none is.
	OldestInFlight time.Duration `json:"-"`
	// Outbox is the orchestrator outbox: depth, oldest unsent, dead rows.
	Outbox outboxdb.Stats `json:"-"`
	// Backlog is the outbox by topic and dead class, and the oldest
	// compensating and flagged saga by type.
	Backlog Backlog   `json:"-"`
	At      time.Time `json:"at"`
}

// StatsWindowDefault is the window of Stats.Finished; StatsWindowMax the
// longest one Stats accepts.
const (
	StatsWindowDefault = time.Hour
	StatsWindowMax     = 24 * time.Hour
)

const (
	// The sagas in flight are counted on sagas_in_flight_idx (an
	// index-only scan of their entries alone), at most $1 of them; the
	// failed ones are read from failed_counts, kept by triggers on the
	// transitions into and out of failed (migration 020) in the
	// transactions that make them, so the one statement reads both in one
	// snapshot and the counts are exact.
	statsOpenSQL = `SELECT type, state, count(*) FROM (SELECT type, state FROM %[1]s WHERE ` + inFlightPredicate + ` LIMIT $1) f GROUP BY type, state
UNION ALL SELECT type, 'failed', n FROM %[2]s WHERE n <> 0`
	// The newest $2 sagas finished since $1 (sagas_finished_idx, read
	// backwards), by type and state, with the oldest finish among them.
	statsFinishedSQL = `SELECT type, state, count(*), min(finished_at) FROM (SELECT type, state, finished_at FROM %s
WHERE finished_at IS NOT NULL AND finished_at >= $1 ORDER BY finished_at DESC LIMIT $2) f GROUP BY type, state`
	// The first row of sagas_in_flight_idx (created_at, id): the scan
	// stops there.
	statsOldestSQL = `SELECT (SELECT created_at FROM %s WHERE ` + inFlightPredicate + ` ORDER BY created_at LIMIT 1)`
)

// The predicates of the partial indexes over the open sagas, stated
// literally in a query so that the planner uses them: sagas_in_flight_idx
// (running, compensating) and sagas_failed_idx (failed), by creation with
// the state and type in them, and sagas_flagged_idx (open and flagged) by
// type and creation.
const (
	inFlightPredicate = "state IN ('running', 'compensating')"
	failedPredicate   = "state = 'failed'"
	flaggedPredicate  = "flag <> '' AND state NOT IN ('completed', 'compensated')"
	// sagas_compensating_idx (migration 022), by type and creation.
	compensatingPredicate = "state = 'compensating'"
)

// inFlightCount is a full count of the sagas in flight by type and state,
// taken at at.
type inFlightCount struct {
	at     time.Time
	byType map[string]map[saga.State]int64
}

// Stats summarizes sagas and the outbox with index-backed queries only,
// each reading at most StatsExactLimit entries of a saga index (so a read
// costs the same with a hundred or a million sagas in flight): open sagas
// (a partial index), sagas finished within window (an index on
// finished_at), the oldest in-flight saga and the outbox's unsent rows.
// Counts over the limit are estimates, and say so (Stats.OpenEstimated,
// Stats.FinishedEstimated, SLOBreach.AtLeast). A window over
// StatsWindowMax is refused (ErrInvalidInput).
func (e *Engine) Stats(ctx context.Context, window time.Duration) (Stats, error) {
	if window <= 0 {
		window = StatsWindowDefault
	}
	if window > StatsWindowMax {
		return Stats{}, &InputError{Field: "window", Problem: fmt.Sprintf("%s is longer than %s", window, StatsWindowMax)}
	}
	now := e.cfg.Now()
	st := Stats{Window: window, At: now}
	limit := e.cfg.StatsExactLimit
	var finished []countGroup
	var oldestFinish, oldest *time.Time
	// One read-only transaction, one round trip: on a busy machine every
	// round trip is a wake-up of each side.
	b := readBatch()
	b.Queue(fmt.Sprintf(statsOpenSQL, e.st.sagas, e.st.failedCounts), limit+1).Query(func(rows pgx.Rows) error {
		groups, err := scanCounts(rows, nil)
		if err != nil {
			return fmt.Errorf("open sagas: %w", err)
		}
		st.Open = countMap(groups)
		return nil
	})
	b.Queue(fmt.Sprintf(statsFinishedSQL, e.st.sagas), now.Add(-window), limit+1).Query(func(rows pgx.Rows) (err error) {
		if finished, err = scanCounts(rows, &oldestFinish); err != nil {
			return fmt.Errorf("finished sagas: %w", err)
		}
		return nil
	})
	b.Queue(fmt.Sprintf(statsOldestSQL, e.st.sagas)).QueryRow(func(r pgx.Row) error {
		if err := r.Scan(&oldest); err != nil {
			return fmt.Errorf("oldest in-flight saga: %w", err)
		}
		return nil
	})
	outboxdb.For(e.ob.Schema()).QueueStats(b, &st.Outbox)
	e.queueBacklog(b, &st.Backlog, now)
	if err := e.sendRead(ctx, b); err != nil {
		return Stats{}, fmt.Errorf("stats: %w", err)
	}
	if oldest != nil {
		st.OldestInFlight = max(now.Sub(*oldest), 0)
	}
	if err := e.estimateOpen(ctx, now, &st); err != nil {
		return Stats{}, fmt.Errorf("stats: open sagas: %w", err)
	}
	st.Finished = map[string]map[saga.State]int64{}
	var total int64
	for _, g := range finished {
		total += g.n
	}
	scale := 1.0
	if total > int64(limit) && oldestFinish != nil {
		// The newest limit+1 finished sagas, scaled to the window by the
		// time they span: the rate of the last minutes taken for the
		// window's.
		st.FinishedEstimated = true
		if span := now.Sub(*oldestFinish); span > 0 && span < window {
			scale = float64(window) / float64(span)
		}
	}
	for _, g := range finished {
		g.n = int64(math.Round(float64(g.n) * scale))
		addCount(st.Finished, g)
	}
	return st, nil
}

// countGroup is a count of one type and state.
type countGroup struct {
	t string
	s saga.State
	n int64
}

// scanCounts reads rows of (type, state, count) and, if first is not nil,
// a fourth column: the earliest time among them, kept in *first.
func scanCounts(rows pgx.Rows, first **time.Time) ([]countGroup, error) {
	var out []countGroup
	for rows.Next() {
		var g countGroup
		var s string
		var err error
		if first != nil {
			var at time.Time
			if err = rows.Scan(&g.t, &s, &g.n, &at); err == nil && (*first == nil || at.Before(**first)) {
				*first = &at
			}
		} else {
			err = rows.Scan(&g.t, &s, &g.n)
		}
		if err != nil {
			return nil, err
		}
		g.s = saga.State(s)
		out = append(out, g)
	}
	return out, rows.Err()
}

func countMap(groups []countGroup) map[string]map[saga.State]int64 {
	out := map[string]map[saga.State]int64{}
	for _, g := range groups {
		addCount(out, g)
	}
	return out
}

func addCount(m map[string]map[saga.State]int64, g countGroup) {
	if m[g.t] == nil {
		m[g.t] = map[saga.State]int64{}
	}
	m[g.t][g.s] = g.n
}

// estimateOpen replaces the in-flight counts of st.Open when more than
// StatsExactLimit sagas are in flight (the count stopped there): with the
// last full count if it is younger than three gauge intervals (an
// estimate, and said to be); if not, with a full count made now (exact),
// kept for the next reads.
func (e *Engine) estimateOpen(ctx context.Context, now time.Time, st *Stats) error {
	st.OpenCountedAt = now
	var inFlight int64
	for _, byState := range st.Open {
		inFlight += byState[saga.Running] + byState[saga.Compensating]
	}
	if inFlight <= int64(e.cfg.StatsExactLimit) {
		return nil
	}
	last := e.inFlight.Load()
	if stale := func(c *inFlightCount) bool { return c == nil || now.Sub(c.at) > 3*e.cfg.GaugeInterval }; stale(last) {
		// One full count at a time: reads that find the count stale
		// together wait for the first one's count instead of each making
		// their own.
		e.recount.Lock()
		if last = e.inFlight.Load(); stale(last) {
			var err error
			last, err = e.countInFlight(ctx, nil)
			if err != nil {
				e.recount.Unlock()
				return err
			}
		} else {
			st.OpenEstimated = true
		}
		e.recount.Unlock()
	} else {
		st.OpenEstimated = true
	}
	st.OpenCountedAt = last.at
	for t, byState := range st.Open {
		delete(byState, saga.Running)
		delete(byState, saga.Compensating)
		if len(byState) == 0 {
			delete(st.Open, t)
		}
	}
	for t, byState := range last.byType {
		for s, n := range byState {
			addCount(st.Open, countGroup{t, s, n})
		}
	}
	return nil
}

// explainStats returns the plans of the saga queries Stats runs.
func (e *Engine) explainStats(ctx context.Context) ([]string, error) {
	var out []string
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{fmt.Sprintf(statsOpenSQL, e.st.sagas, e.st.failedCounts), []any{e.cfg.StatsExactLimit + 1}},
		{fmt.Sprintf(statsFinishedSQL, e.st.sagas), []any{e.cfg.Now().Add(-StatsWindowDefault), e.cfg.StatsExactLimit + 1}},
		{fmt.Sprintf(statsOldestSQL, e.st.sagas), nil},
	} {
		p, err := e.explain(ctx, q.sql, q.args...)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// InFlight counts non-terminal sagas by state: the running and
// compensating ones on their partial index (sagas_in_flight_idx, which
// includes the state: an index-only scan that reads the table only for
// pages not all-visible), not a bitmap of it nor the table, so the entries
// of finished sagas' old row versions are marked dead as it passes them and
// later calls skip them (the gauge runs every few seconds; a bitmap or
// sequential scan read every version of every recent saga each time:
// docs/perf/figures.md#saga-inflight-index-scan); the failed ones from
// failed_counts, as Stats does. The count by type is kept for Stats.
func (e *Engine) InFlight(ctx context.Context) (map[saga.State]int64, error) {
	var failed int64
	c, err := e.countInFlight(ctx, func(b *pgx.Batch) {
		b.Queue(`SELECT coalesce(sum(n), 0)::bigint FROM ` + e.st.failedCounts).QueryRow(func(r pgx.Row) error { return r.Scan(&failed) })
	})
	if err != nil {
		return nil, err
	}
	out := map[saga.State]int64{}
	for _, byState := range c.byType {
		for s, n := range byState {
			out[s] += n
		}
	}
	if failed != 0 {
		out[saga.Failed] = failed
	}
	return out, nil
}

// countInFlight counts every saga in flight by type and state and keeps
// the count (Engine.inFlight) for Stats; also, if set, queues more reads
// in the same transaction and round trip.
func (e *Engine) countInFlight(ctx context.Context, also func(*pgx.Batch)) (*inFlightCount, error) {
	c := &inFlightCount{at: e.cfg.Now()}
	b := readBatch()
	b.Queue(`SELECT type, state, count(*) FROM ` + e.st.sagas + ` WHERE ` + inFlightPredicate + ` GROUP BY type, state`).Query(func(rows pgx.Rows) error {
		groups, err := scanCounts(rows, nil)
		c.byType = countMap(groups)
		return err
	})
	if also != nil {
		also(b)
	}
	if err := e.sendRead(ctx, b); err != nil {
		return nil, fmt.Errorf("count sagas in flight: %w", err)
	}
	e.inFlight.Store(c)
	return c, nil
}
