package workload

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/participants"
	"github.com/sagaflow/sagaflow/participants/coupon"
	"github.com/sagaflow/sagaflow/participants/holds"
	"github.com/sagaflow/sagaflow/participants/inventory"
	"github.com/sagaflow/sagaflow/participants/payment"
	"github.com/sagaflow/sagaflow/participants/points"
	"github.com/sagaflow/sagaflow/participants/shipping"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

// Report is what Check found.
type Report struct {
	Sagas       int `json:"sagas"`
	Completed   int `json:"completed"`
	Compensated int `json:"compensated"`
	Failed      int `json:"failed"`
	NonTerminal int `json:"non_terminal"`
	// ByType counts the sagas of each type (place-order, book-trip).
	ByType     map[string]*Counts `json:"by_type"`
	Violations []string           `json:"violations"`
}

// Counts are the sagas of one type by end state.
type Counts struct {
	Sagas       int `json:"sagas"`
	Completed   int `json:"completed"`
	Compensated int `json:"compensated"`
	Failed      int `json:"failed"`
	NonTerminal int `json:"non_terminal"`
}

// sagaRow is one saga as the checks read it.
type sagaRow struct {
	typ, state, aggregate string
	// where a saga not terminal stands, for its violation: its current
	// step (name, state, attempts, last error), flag and next wake-up.
	where string
}

// OK reports whether no invariant was violated.
func (r Report) OK() bool { return len(r.Violations) == 0 }

const maxViolations = 50

// Check reads every saga of the orchestrator schema and the reference
// participants' tables through db (pass a REPEATABLE READ transaction to
// read them all at one instant while processes still run), and checks:
//   - no saga is left non-terminal (and none failed, unless allowFailed);
//   - stock is conserved: available + reserved + sold equals the initial
//     stock of every item, the items' reserved and sold units are the
//     reservations' totals, and a saga that ended holds no reservation
//     (a completed saga's is sold, a compensated one's released);
//   - no hold (package participants/holds) outlives its saga: a completed
//     saga's holds are confirmed, a compensated one's released, and a
//     SKU's holds agree with its reserved and sold units;
//   - no coupon is locked by a saga that did not complete;
//   - one charge per completed saga, none for a compensated one;
//   - exactly one shipment and one points entry per completed place-order
//     saga, none for a compensated one nor for any other saga type;
//   - the trip invariants of checkTrips for book-trip sagas (no trip is
//     taken as refused: CheckPlan knows which are).
func Check(ctx context.Context, db participants.DB, s Schemas, initialStock map[string]int, allowFailed bool) (Report, error) {
	return CheckPlan(ctx, db, s, Plan{Stock: initialStock}, allowFailed)
}

// CheckPlan is Check with the plan's initial stock and its refused trips
// (which must end compensated with nothing reserved and nothing charged).
func CheckPlan(ctx context.Context, db participants.DB, s Schemas, plan Plan, allowFailed bool) (Report, error) {
	initialStock := plan.Stock
	var rep Report
	bad := func(format string, args ...any) {
		if len(rep.Violations) < maxViolations {
			rep.Violations = append(rep.Violations, fmt.Sprintf(format, args...))
		} else if len(rep.Violations) == maxViolations {
			rep.Violations = append(rep.Violations, "... more violations not listed")
		}
	}
	sagas, err := readSagas(ctx, db, s.Orchestrator)
	if err != nil {
		return rep, err
	}
	states := make(map[uuid.UUID]string, len(sagas))
	rep.Sagas = len(sagas)
	rep.ByType = map[string]*Counts{}
	for id, sg := range sagas {
		states[id] = sg.state
		c := rep.ByType[sg.typ]
		if c == nil {
			c = &Counts{}
			rep.ByType[sg.typ] = c
		}
		c.Sagas++
		switch sg.state {
		case "completed":
			rep.Completed++
			c.Completed++
		case "compensated":
			rep.Compensated++
			c.Compensated++
		case "failed":
			rep.Failed++
			c.Failed++
			if !allowFailed {
				bad("saga %s (%s) is failed (needs an operator)", id, sg.typ)
			}
		default:
			rep.NonTerminal++
			c.NonTerminal++
			bad("saga %s (%s) is still %s %s", id, sg.typ, sg.state, sg.where)
		}
	}

	stock, err := inventory.Stock(ctx, db, s.Inventory)
	if err != nil {
		return rep, fmt.Errorf("check: read stock: %w", err)
	}
	skus := make([]string, 0, len(initialStock))
	for sku := range initialStock {
		skus = append(skus, sku)
	}
	sort.Strings(skus)
	for _, sku := range skus {
		it := stock[sku]
		if got := it.Available + it.Reserved + it.Sold; got != initialStock[sku] {
			bad("stock of %s not conserved: available %d + reserved %d + sold %d = %d, initial %d", sku, it.Available, it.Reserved, it.Sold, got, initialStock[sku])
		}
	}
	res, err := inventory.Reservations(ctx, db, s.Inventory)
	if err != nil {
		return rep, fmt.Errorf("check: read reservations: %w", err)
	}
	reservedBySKU, soldBySKU := map[string]int{}, map[string]int{}
	for id, r := range res {
		switch st := states[id]; r.State {
		case inventory.StateReserved:
			reservedBySKU[r.SKU] += r.Qty
			if st == "completed" || st == "compensated" {
				bad("saga %s is %s but its reservation of %d %s is still reserved (neither sold nor released)", id, st, r.Qty, r.SKU)
			}
		case inventory.StateSold:
			soldBySKU[r.SKU] += r.Qty
			if st != "completed" && st != "failed" {
				bad("saga %s is %q but its reservation of %d %s is sold", id, st, r.Qty, r.SKU)
			}
		}
	}
	for _, sku := range skus {
		if it := stock[sku]; it.Reserved != reservedBySKU[sku] || it.Sold != soldBySKU[sku] {
			bad("item %s: reserved %d and sold %d but reservations reserved total %d and sold total %d", sku, it.Reserved, it.Sold, reservedBySKU[sku], soldBySKU[sku])
		}
	}
	if err := checkHolds(ctx, db, s.Inventory, states, stock, bad); err != nil {
		return rep, err
	}

	locks, err := coupon.Locks(ctx, db, s.Coupon)
	if err != nil {
		return rep, fmt.Errorf("check: read coupons: %w", err)
	}
	for code, id := range locks {
		if id == uuid.Nil {
			continue
		}
		if st := states[id]; st != "completed" && st != "failed" {
			bad("coupon %s is locked by saga %s which is %q", code, id, st)
		}
	}

	perSaga := []struct {
		what string
		read func(context.Context, participants.DB, string) (map[uuid.UUID]int, error)
		sch  string
		// only: the saga type that has these; other types have none.
		only string
	}{
		{"charge", func(ctx context.Context, p participants.DB, sc string) (map[uuid.UUID]int, error) {
			return payment.Charges(ctx, p, sc)
		}, s.Payment, ""},
		{"shipment", func(ctx context.Context, p participants.DB, sc string) (map[uuid.UUID]int, error) {
			return shipping.Shipments(ctx, p, sc)
		}, s.Shipping, orderapi.SagaType},
		{"points entry", func(ctx context.Context, p participants.DB, sc string) (map[uuid.UUID]int, error) {
			return points.Entries(ctx, p, sc)
		}, s.Points, orderapi.SagaType},
	}
	var charges map[uuid.UUID]int
	for _, ps := range perSaga {
		counts, err := ps.read(ctx, db, ps.sch)
		if err != nil {
			return rep, fmt.Errorf("check: read %ss: %w", ps.what, err)
		}
		if charges == nil {
			charges = counts
		}
		for id, st := range states {
			n := counts[id]
			switch {
			case ps.only != "" && sagas[id].typ != ps.only && n != 0:
				bad("%s saga %s has %d %ss, want 0", sagas[id].typ, id, n, ps.what)
			case ps.only != "" && sagas[id].typ != ps.only:
			case st == "completed" && n != 1:
				bad("completed saga %s has %d %ss, want exactly 1", id, n, ps.what)
			case st == "compensated" && n != 0:
				bad("compensated saga %s has %d %ss, want 0", id, n, ps.what)
			case n > 1:
				bad("saga %s (%s) has %d %ss, want at most 1", id, st, n, ps.what)
			}
		}
		for id, n := range counts {
			if _, ok := states[id]; !ok && n > 0 {
				bad("%d %ss for saga %s that the orchestrator does not know", n, ps.what, id)
			}
		}
	}
	if err := checkTrips(ctx, db, s, sagas, charges, plan.Refused, bad); err != nil {
		return rep, err
	}
	return rep, nil
}

// readSagas reads every saga's type, state and aggregate id.
func readSagas(ctx context.Context, db participants.DB, schema string) (map[uuid.UUID]sagaRow, error) {
	rows, err := db.Query(ctx, `SELECT s.id, s.type, s.state, s.aggregate_id,
  CASE WHEN s.state IN ('completed', 'compensated') THEN '' ELSE format('at step %s (%s, %s attempts, %s compensations, last error %L), flag %L, next wake-up %s, updated %s',
    coalesce(nullif(s.current_step, ''), '-'), coalesce(c.e->>'state', '-'), coalesce(c.e->>'attempts', '0'), coalesce(c.e->>'compensation_attempts', '0'),
    coalesce(c.e->>'last_error', ''), s.flag, coalesce(to_char(s.next_wakeup_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'), 'none'),
    to_char(s.updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')) END
FROM `+quote(schema)+`.sagas s
LEFT JOIN LATERAL (SELECT e FROM jsonb_array_elements(s.steps) AS x(e) WHERE x.e->>'name' = s.current_step LIMIT 1) c ON true`)
	if err != nil {
		return nil, fmt.Errorf("check: read sagas: %w", err)
	}
	defer rows.Close()
	out := map[uuid.UUID]sagaRow{}
	for rows.Next() {
		var id uuid.UUID
		var r sagaRow
		if err := rows.Scan(&id, &r.typ, &r.state, &r.aggregate, &r.where); err != nil {
			return nil, fmt.Errorf("check: read sagas: %w", err)
		}
		out[id] = r
	}
	return out, rows.Err()
}

// checkHolds reports every hold of the inventory schema that outlived its
// saga: a completed saga's hold must be confirmed, a compensated one's
// released (a failed saga's waits for an operator). The holds of a SKU
// must also agree with its stock: held ones total its reserved units,
// confirmed ones its sold units.
func checkHolds(ctx context.Context, db participants.DB, schema string, states map[uuid.UUID]string, stock map[string]inventory.Item, bad func(string, ...any)) error {
	hs, err := holds.For(schema).List(ctx, db, holds.Filter{})
	if err != nil {
		return fmt.Errorf("check: read holds: %w", err)
	}
	want := map[string]string{"completed": holds.Confirmed, "compensated": holds.Released}
	held, confirmed := map[string]int{}, map[string]int{}
	for _, h := range hs {
		switch h.State {
		case holds.Held:
			held[h.Resource] += int(h.Quantity)
		case holds.Confirmed:
			confirmed[h.Resource] += int(h.Quantity)
		}
		st, known := states[h.SagaID]
		switch w, ended := want[st]; {
		case !known:
			bad("hold of %d %s (step %s) by saga %s that the orchestrator does not know", h.Quantity, h.Resource, h.Step, h.SagaID)
		case ended && h.State != w:
			bad("saga %s is %s but its hold of %d %s (step %s, since %s) is %s, want %s", h.SagaID, st, h.Quantity, h.Resource, h.Step, h.Since.UTC().Format(time.RFC3339), h.State, w)
		}
	}
	skus := make([]string, 0, len(stock))
	for sku := range stock {
		skus = append(skus, sku)
	}
	sort.Strings(skus)
	for _, sku := range skus {
		if it := stock[sku]; it.Reserved != held[sku] || it.Sold != confirmed[sku] {
			bad("item %s: reserved %d and sold %d but its holds hold %d and confirmed %d", sku, it.Reserved, it.Sold, held[sku], confirmed[sku])
		}
	}
	return nil
}
