package holds

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/participants"
)

// States of a hold.
const (
	// Held: the units belong to the saga until it confirms or releases them.
	Held = "held"
	// Confirmed: the units are committed (sold, booked) for good.
	Confirmed = "confirmed"
	// Released: the saga gave the units back (its compensation).
	Released = "released"
)

// Hold is one semantic lock: Quantity units of Resource held by saga
// SagaID for its step Step since Since.
type Hold struct {
	SagaID   uuid.UUID  `json:"saga_id"`
	Step     string     `json:"step"`
	Resource string     `json:"resource"`
	Quantity int64      `json:"quantity"`
	State    string     `json:"state"`
	Since    time.Time  `json:"since"`
	Settled  *time.Time `json:"settled_at,omitempty"`
}

// Table is the holds table of one participant schema. The zero value is
// not usable: use For.
type Table struct {
	name string // quoted, schema-qualified
}

// For returns the holds table of schema (the participant's schema, where
// the SDK's migrations created it).
func For(schema string) Table {
	return Table{name: pgx.Identifier{schema, "holds"}.Sanitize()}
}

const columns = `saga_id, step, resource, quantity, state, since, settled_at`

// Take holds quantity units of resource for saga's step, in db (the
// handler's transaction). It is idempotent: when the saga's step already
// holds resource (a redelivered command), nothing changes and the
// existing hold is returned with taken false, whatever its state (a
// released hold stays released: the caller decides what a forward after
// its compensation means). The caller is the one that checks and moves
// the units themselves (a stock counter, a seat): Take records who holds
// them.
func (t Table) Take(ctx context.Context, db participants.DB, saga uuid.UUID, step, resource string, quantity int64) (h Hold, taken bool, err error) {
	if err := checkTake(step, resource, quantity); err != nil {
		return Hold{}, false, fmt.Errorf("holds: take for saga %s: %w", saga, err)
	}
	row := db.QueryRow(ctx, `WITH ins AS (
  INSERT INTO `+t.name+` (saga_id, step, resource, quantity) VALUES ($1, $2, $3, $4)
  ON CONFLICT (saga_id, step, resource) DO NOTHING
  RETURNING `+columns+`, true AS taken)
SELECT * FROM ins
UNION ALL
SELECT `+columns+`, false FROM `+t.name+`
WHERE saga_id = $1 AND step = $2 AND resource = $3 AND NOT EXISTS (SELECT 1 FROM ins)`,
		saga, step, resource, quantity)
	h, taken, err = scanTaken(row)
	if errors.Is(err, pgx.ErrNoRows) {
		// A concurrent copy inserted the hold after this statement's
		// snapshot was taken: read it now that it is committed.
		h, taken, err = scanTaken(db.QueryRow(ctx, `SELECT `+columns+`, false FROM `+t.name+`
WHERE saga_id = $1 AND step = $2 AND resource = $3`, saga, step, resource))
	}
	if err != nil {
		return Hold{}, false, fmt.Errorf("holds: take %d of %q for saga %s step %q: %w", quantity, resource, saga, step, err)
	}
	return h, taken, nil
}

// Request is one hold of a TakeMany.
type Request struct {
	SagaID   uuid.UUID
	Step     string
	Resource string
	Quantity int64
}

// TakeMany takes several holds in one statement (a batch handler's
// set-based form of Take) and returns the ones taken now; a request whose
// hold already exists is left as it is and not returned.
func (t Table) TakeMany(ctx context.Context, db participants.DB, reqs []Request) ([]Hold, error) {
	n := len(reqs)
	sagas, steps, resources, qtys := make([]uuid.UUID, n), make([]string, n), make([]string, n), make([]int64, n)
	for i, r := range reqs {
		if err := checkTake(r.Step, r.Resource, r.Quantity); err != nil {
			return nil, fmt.Errorf("holds: take many: request %d (saga %s): %w", i, r.SagaID, err)
		}
		sagas[i], steps[i], resources[i], qtys[i] = r.SagaID, r.Step, r.Resource, r.Quantity
	}
	rows, err := db.Query(ctx, `INSERT INTO `+t.name+` (saga_id, step, resource, quantity)
SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::bigint[])
ON CONFLICT (saga_id, step, resource) DO NOTHING
RETURNING `+columns, sagas, steps, resources, qtys)
	if err != nil {
		return nil, fmt.Errorf("holds: take %d holds: %w", n, err)
	}
	out, err := collect(rows)
	if err != nil {
		return nil, fmt.Errorf("holds: take %d holds: %w", n, err)
	}
	return out, nil
}

// Confirm turns the holds saga's step still holds into confirmed ones and
// returns those (the units the caller now commits: reserved to sold).
// Idempotent: a hold already confirmed is not returned again, so a
// redelivered confirm commits nothing twice. A released hold stays
// released.
func (t Table) Confirm(ctx context.Context, db participants.DB, saga uuid.UUID, step string) ([]Hold, error) {
	return t.settle(ctx, db, saga, step, Confirmed)
}

// Release gives back the holds saga's step still holds and returns those
// (the units the caller now returns to the pool). Idempotent like
// Confirm; a confirmed hold is never released.
func (t Table) Release(ctx context.Context, db participants.DB, saga uuid.UUID, step string) ([]Hold, error) {
	return t.settle(ctx, db, saga, step, Released)
}

func (t Table) settle(ctx context.Context, db participants.DB, saga uuid.UUID, step, to string) ([]Hold, error) {
	rows, err := db.Query(ctx, `UPDATE `+t.name+` SET state = $3, settled_at = now()
WHERE saga_id = $1 AND step = $2 AND state = 'held'
RETURNING `+columns, saga, step, to)
	if err != nil {
		return nil, fmt.Errorf("holds: %s the holds of saga %s step %q: %w", verb(to), saga, step, err)
	}
	out, err := collect(rows)
	if err != nil {
		return nil, fmt.Errorf("holds: %s the holds of saga %s step %q: %w", verb(to), saga, step, err)
	}
	return out, nil
}

// BySaga returns every hold of saga, in any state, oldest first.
func (t Table) BySaga(ctx context.Context, db participants.DB, saga uuid.UUID) ([]Hold, error) {
	return t.List(ctx, db, Filter{Saga: saga})
}

// ByResource returns every hold of resource, in any state, oldest first.
func (t Table) ByResource(ctx context.Context, db participants.DB, resource string) ([]Hold, error) {
	return t.List(ctx, db, Filter{Resource: resource})
}

// Filter selects holds for List; zero fields select everything.
type Filter struct {
	Saga     uuid.UUID // uuid.Nil: any saga
	Resource string    // "": any resource
	State    string    // "": any state
	Limit    int       // <= 0: no limit
}

// List returns the holds f selects, oldest first.
func (t Table) List(ctx context.Context, db participants.DB, f Filter) ([]Hold, error) {
	if f.State != "" && f.State != Held && f.State != Confirmed && f.State != Released {
		return nil, fmt.Errorf("holds: list: state %q, want %q, %q or %q", f.State, Held, Confirmed, Released)
	}
	var saga *uuid.UUID
	if f.Saga != uuid.Nil {
		saga = &f.Saga
	}
	var limit *int
	if f.Limit > 0 {
		limit = &f.Limit
	}
	rows, err := db.Query(ctx, `SELECT `+columns+` FROM `+t.name+`
WHERE ($1::uuid IS NULL OR saga_id = $1)
  AND ($2 = '' OR resource = $2)
  AND ($3 = '' OR state = $3)
ORDER BY since, saga_id, step, resource
LIMIT $4`, saga, f.Resource, f.State, limit)
	if err != nil {
		return nil, fmt.Errorf("holds: list %+v: %w", f, err)
	}
	out, err := collect(rows)
	if err != nil {
		return nil, fmt.Errorf("holds: list %+v: %w", f, err)
	}
	return out, nil
}

func checkTake(step, resource string, quantity int64) error {
	switch {
	case step == "":
		return errors.New("step is empty")
	case resource == "":
		return errors.New("resource is empty")
	case quantity <= 0:
		return fmt.Errorf("quantity is %d, want > 0", quantity)
	}
	return nil
}

func verb(to string) string {
	if to == Confirmed {
		return "confirm"
	}
	return "release"
}

func scanTaken(row pgx.Row) (Hold, bool, error) {
	var (
		h     Hold
		taken bool
	)
	err := row.Scan(&h.SagaID, &h.Step, &h.Resource, &h.Quantity, &h.State, &h.Since, &h.Settled, &taken)
	return h, taken, err
}

func collect(rows pgx.Rows) ([]Hold, error) {
	out := []Hold{}
	var h Hold
	_, err := pgx.ForEachRow(rows, []any{&h.SagaID, &h.Step, &h.Resource, &h.Quantity, &h.State, &h.Since, &h.Settled}, func() error {
		out = append(out, h)
		return nil
	})
	return out, err
}
