package saga

import (
	"context"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Get returns one saga and its journal.
func (e *Engine) Get(ctx context.Context, id uuid.UUID) (Instance, []JournalEntry, error) {
	in, err := e.st.load(ctx, e.pool, id)
	if err != nil {
		return Instance{}, nil, err
	}
	j, err := e.st.readJournal(ctx, e.pool, id)
	return in, j, err
}

// Filter selects sagas for List. Zero fields do not filter.
type Filter struct {
	State State
	Type  string
	Step  string
	// OlderThan keeps sagas created more than this long ago.
	OlderThan time.Duration
	// Stuck keeps failed or flagged sagas, and non-terminal ones that have
	// not moved for StuckAfter.
	Stuck      bool
	StuckAfter time.Duration
	Limit      int
	// Cursor continues a previous page (Page.Next).
	Cursor string
}

// Page is one page of List, newest first.
type Page struct {
	Sagas []Instance `json:"sagas"`
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

// List returns sagas matching f, newest first, with keyset pagination.
func (e *Engine) List(ctx context.Context, f Filter) (Page, error) {
	if f.Limit <= 0 || f.Limit > 500 {
		f.Limit = 50
	}
	if f.State != "" && !f.State.Valid() {
		return Page{}, fmt.Errorf("%w: state %q is not one of running, compensating, completed, compensated, failed", ErrInvalidInput, f.State)
	}
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if f.State != "" {
		where = append(where, "state = "+arg(string(f.State)))
	}
	if f.Type != "" {
		where = append(where, "type = "+arg(f.Type))
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
		where = append(where, "(state = 'failed' OR (state NOT IN ('completed', 'compensated') AND (flag <> '' OR updated_at < "+arg(now.Add(-after))+")))")
	}
	if f.Cursor != "" {
		t, id, err := decodeCursor(f.Cursor)
		if err != nil {
			return Page{}, err
		}
		where = append(where, "(created_at, id) < ("+arg(t)+", "+arg(id)+")")
	}
	q := `SELECT ` + sagaColumns + ` FROM ` + e.st.sagas
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY created_at DESC, id DESC LIMIT " + arg(f.Limit+1)
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
	if len(p.Sagas) > f.Limit {
		p.Sagas = p.Sagas[:f.Limit]
		last := p.Sagas[len(p.Sagas)-1]
		p.Next = encodeCursor(last.CreatedAt, last.ID)
	}
	return p, nil
}

// InFlight counts non-terminal sagas by state.
func (e *Engine) InFlight(ctx context.Context) (map[State]int64, error) {
	rows, err := e.pool.Query(ctx, `SELECT state, count(*) FROM `+e.st.sagas+` WHERE state NOT IN ('completed', 'compensated') GROUP BY state`)
	if err != nil {
		return nil, fmt.Errorf("count sagas in flight: %w", err)
	}
	defer rows.Close()
	out := map[State]int64{}
	for rows.Next() {
		var s string
		var n int64
		if err := rows.Scan(&s, &n); err != nil {
			return nil, err
		}
		out[State(s)] = n
	}
	return out, rows.Err()
}

// Counts returns the number of sagas per type and state.
func (e *Engine) Counts(ctx context.Context) (map[string]map[State]int64, error) {
	rows, err := e.pool.Query(ctx, `SELECT type, state, count(*) FROM `+e.st.sagas+` GROUP BY type, state`)
	if err != nil {
		return nil, fmt.Errorf("count sagas: %w", err)
	}
	defer rows.Close()
	out := map[string]map[State]int64{}
	for rows.Next() {
		var t, s string
		var n int64
		if err := rows.Scan(&t, &s, &n); err != nil {
			return nil, err
		}
		if out[t] == nil {
			out[t] = map[State]int64{}
		}
		out[t][State(s)] = n
	}
	return out, rows.Err()
}
