package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/internal/workload"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/participants"
	"github.com/sagaflow/sagaflow/participants/cars"
	"github.com/sagaflow/sagaflow/participants/conformance"
	"github.com/sagaflow/sagaflow/participants/flights"
	"github.com/sagaflow/sagaflow/participants/hotels"
	"github.com/sagaflow/sagaflow/participants/inventory"
	"github.com/sagaflow/sagaflow/participants/payment"
	"github.com/sagaflow/sagaflow/participants/points"
	"github.com/sagaflow/sagaflow/participants/shipping"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps/orderapi"
	"github.com/sagaflow/sagaflow/steps/tripapi"
)

const maxViolations = 100

func (r *Result) violate(format string, args ...any) {
	switch {
	case len(r.Violations) < maxViolations:
		r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
	case len(r.Violations) == maxViolations:
		r.Violations = append(r.Violations, "... more violations not listed")
	}
}

func ident(parts ...string) string { return pgx.Identifier(parts).Sanitize() }

func (h *harness) allSchemas() []string {
	s := schemas()
	return []string{s.Orchestrator, s.Inventory, s.Coupon, s.Payment, s.Shipping, s.Points, s.Flights, s.Hotels, s.Cars}
}

// pending counts non-terminal sagas and live unsent outbox rows.
func (h *harness) pending(ctx context.Context) (sagas, unsent int64, err error) {
	if err = h.pool.QueryRow(ctx, `SELECT count(*) FROM `+ident(orchestrator.SchemaDefault, "sagas")+
		` WHERE state IN ('running', 'compensating')`).Scan(&sagas); err != nil {
		return 0, 0, fmt.Errorf("chaos: count open sagas: %w", err)
	}
	for _, s := range h.allSchemas() {
		var n int64
		if err = h.pool.QueryRow(ctx, `SELECT count(*) FROM `+ident(s, "outbox")+
			` WHERE sent_at IS NULL AND dead_at IS NULL`).Scan(&n); err != nil {
			return 0, 0, fmt.Errorf("chaos: count unsent rows of %s.outbox: %w", s, err)
		}
		unsent += n
	}
	return sagas, unsent, nil
}

// quiesce waits until every saga is terminal and every outbox drained on
// three polls in a row, or ctx ends.
func (h *harness) quiesce(ctx context.Context) error {
	calm := 0
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		s, u, err := h.pending(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		if s == 0 && u == 0 {
			calm++
			if calm >= 3 {
				return nil
			}
		} else {
			calm = 0
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

type barrierRow struct {
	outcome, reason string
	closed          bool
}

func barrierKey(id uuid.UUID, step, action string) string {
	return id.String() + "|" + step + "|" + action
}

// check reads the databases and fills res's outcome and violation counts.
func (h *harness) check(ctx context.Context, plan workload.Plan, res *Result) error {
	// Every check reads one snapshot: processes may still be running when
	// quiescence timed out, and reading the participants' tables and the
	// barrier at different instants would report effects as unrecorded.
	tx, err := h.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("chaos: begin snapshot: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	return h.checkIn(ctx, tx, plan, res)
}

func (h *harness) checkIn(ctx context.Context, db pgx.Tx, plan workload.Plan, res *Result) error {
	sc := schemas()
	rep, err := workload.CheckPlan(ctx, db, sc, plan, false)
	if err != nil {
		return err
	}
	res.Completed, res.Compensated, res.Failed = rep.Completed, rep.Compensated, rep.Failed
	res.Stuck = rep.NonTerminal
	res.ByType = rep.ByType
	for _, v := range rep.Violations {
		res.violate("%s", v)
	}
	if want := len(plan.Orders) + len(plan.Trips); rep.Sagas != want {
		res.Lost += want - rep.Sagas
		res.violate("%d orders and %d trips started but %d sagas exist", len(plan.Orders), len(plan.Trips), rep.Sagas)
	}
	if h.provider != nil {
		var ledger int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM `+ident(sc.Payment, "ledger")+` WHERE kind = 'charge'`).Scan(&ledger); err != nil {
			return fmt.Errorf("chaos: count the ledger's charges: %w", err)
		}
		res.ProviderCharges = h.provider.Charges()
		if res.ProviderCharges != ledger {
			res.violate("the payment provider made %d charges, the ledger holds %d (a customer charged twice, or a charge lost)", res.ProviderCharges, ledger)
		}
	}

	// Outboxes: unsent or parked rows.
	for _, s := range h.allSchemas() {
		var unsent, dead int64
		if err := db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE sent_at IS NULL AND dead_at IS NULL),
count(*) FILTER (WHERE dead_at IS NOT NULL) FROM `+ident(s, "outbox")).Scan(&unsent, &dead); err != nil {
			return fmt.Errorf("chaos: read %s.outbox: %w", s, err)
		}
		if unsent+dead > 0 {
			res.Undrained += unsent + dead
			res.violate("outbox %s not drained: %d unsent, %d dead", s, unsent, dead)
		}
	}

	// Sagas and their steps.
	type sagaRow struct {
		state string
		steps []saga.StepState
	}
	sagas := map[uuid.UUID]sagaRow{}
	rows, err := db.Query(ctx, `SELECT id, state, steps FROM `+ident(sc.Orchestrator, "sagas"))
	if err != nil {
		return fmt.Errorf("chaos: read sagas: %w", err)
	}
	for rows.Next() {
		var id uuid.UUID
		var st string
		var raw []byte
		if err := rows.Scan(&id, &st, &raw); err != nil {
			rows.Close()
			return err
		}
		var steps []saga.StepState
		if err := json.Unmarshal(raw, &steps); err != nil {
			rows.Close()
			return fmt.Errorf("chaos: saga %s: decode steps: %w", id, err)
		}
		sagas[id] = sagaRow{state: st, steps: steps}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}

	// Barrier rows of every participant, by (saga, step, action).
	barrier := map[string]barrierRow{}
	for _, p := range []string{sc.Inventory, sc.Coupon, sc.Payment, sc.Shipping, sc.Points, sc.Flights, sc.Hotels, sc.Cars} {
		rows, err := db.Query(ctx, `SELECT saga_id, step, action, outcome, reason, closed FROM `+ident(p, "barrier"))
		if err != nil {
			return fmt.Errorf("chaos: read %s.barrier: %w", p, err)
		}
		for rows.Next() {
			var id uuid.UUID
			var step, action string
			var b barrierRow
			if err := rows.Scan(&id, &step, &action, &b.outcome, &b.reason, &b.closed); err != nil {
				rows.Close()
				return err
			}
			barrier[barrierKey(id, step, action)] = b
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}

	// Commands the orchestrator sent.
	type sent struct {
		saga         uuid.UUID
		step, action string
	}
	var cmds []sent
	rows, err = db.Query(ctx, `SELECT (convert_from(value, 'UTF8')::jsonb)->>'saga_id', (convert_from(value, 'UTF8')::jsonb)->>'step',
(convert_from(value, 'UTF8')::jsonb)->>'action' FROM `+ident(sc.Orchestrator, "outbox")+` WHERE topic LIKE '%.commands'`)
	if err != nil {
		return fmt.Errorf("chaos: read orchestrator outbox: %w", err)
	}
	for rows.Next() {
		var id, step, action string
		if err := rows.Scan(&id, &step, &action); err != nil {
			rows.Close()
			return err
		}
		u, err := uuid.Parse(id)
		if err != nil {
			rows.Close()
			return fmt.Errorf("chaos: orchestrator outbox: saga id %q: %w", id, err)
		}
		cmds = append(cmds, sent{u, step, action})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}

	charges, err := payment.Charges(ctx, db, sc.Payment)
	if err != nil {
		return err
	}
	shipments, err := shipping.Shipments(ctx, db, sc.Shipping)
	if err != nil {
		return err
	}
	entries, err := points.Entries(ctx, db, sc.Points)
	if err != nil {
		return err
	}
	reservations, err := inventory.Reservations(ctx, db, sc.Inventory)
	if err != nil {
		return err
	}
	bookings, err := tripReservations(ctx, db, sc)
	if err != nil {
		return err
	}

	lost := map[uuid.UUID]bool{}
	double := map[uuid.UUID]bool{}
	afterPivot := map[uuid.UUID]bool{}
	// Every step of both sagas (their names are distinct but for the
	// pivot, charge-payment, which both send to payment).
	stepNames := []string{orderapi.StepReserveInventory, orderapi.StepLockCoupon, orderapi.StepChargePayment, orderapi.StepCreateShipment, orderapi.StepAwardPoints, orderapi.StepConfirmStock,
		tripapi.StepReserveFlight, tripapi.StepReserveHotel, tripapi.StepReserveCar, tripapi.StepConfirmFlight, tripapi.StepConfirmHotel, tripapi.StepConfirmCar}
	for id, s := range sagas {
		terminal := saga.State(s.state).Terminal()
		pivotDone := charges[id] > 0
		for _, st := range s.steps {
			switch st.State {
			case saga.StepRunning, saga.StepRetrying, saga.StepUnknown, saga.StepQuerying, saga.StepAccepted, saga.StepCompensating, saga.StepCompRetrying:
				if terminal && s.state != string(saga.Failed) {
					lost[id] = true
					res.violate("saga %s is %s but step %s is still %s (no outcome recorded)", id, s.state, st.Name, st.State)
				}
			}
			if st.Name == orderapi.StepChargePayment && st.State == saga.StepSucceeded {
				pivotDone = true
			}
		}
		if pivotDone {
			for _, st := range s.steps {
				switch st.State {
				case saga.StepCompensating, saga.StepCompRetrying, saga.StepCompensated:
					afterPivot[id] = true
					res.violate("saga %s: pivot succeeded but step %s is %s", id, st.Name, st.State)
				}
			}
			for _, name := range stepNames {
				if _, ok := barrier[barrierKey(id, name, "compensate")]; ok {
					afterPivot[id] = true
					res.violate("saga %s: pivot succeeded but %s received a compensation", id, name)
				}
			}
		}
		// Effects at most once, compensations only for effects.
		for what, n := range map[string]int{"charge": charges[id], "shipment": shipments[id], "points entry": entries[id]} {
			if n > 1 {
				double[id] = true
				res.violate("saga %s has %d %ss", id, n, what)
			}
		}
		for _, name := range stepNames {
			c, ok := barrier[barrierKey(id, name, "compensate")]
			if !ok || c.outcome != "success" || c.reason == participants.ReasonEmpty {
				continue
			}
			if f := barrier[barrierKey(id, name, "forward")]; f.outcome != "success" || f.closed {
				double[id] = true
				res.violate("saga %s: %s compensated (effect undone) but its forward is %q closed=%v", id, name, f.outcome, f.closed)
			}
		}
		r, hasRes := reservations[id]
		c, hasComp := barrier[barrierKey(id, orderapi.StepReserveInventory, "compensate")]
		undone := hasComp && c.outcome == "success" && c.reason != participants.ReasonEmpty
		switch {
		case hasRes && r.State == inventory.StateReserved && undone:
			double[id] = true
			res.violate("saga %s: reservation compensated but still reserved", id)
		case hasRes && r.State == inventory.StateReleased && !undone:
			double[id] = true
			res.violate("saga %s: reservation %s without a recorded compensation", id, r.State)
		case hasRes && r.State == inventory.StateSold && barrier[barrierKey(id, orderapi.StepConfirmStock, "forward")].outcome != "success":
			double[id] = true
			res.violate("saga %s: reservation sold without a recorded %s", id, orderapi.StepConfirmStock)
		}
		for _, b := range bookings {
			if v := b.check(id, barrier); v != "" {
				double[id] = true
				res.violate("%s", v)
			}
		}
	}
	for _, c := range cmds {
		s, ok := sagas[c.saga]
		if !ok {
			lost[c.saga] = true
			res.violate("command %s/%s for unknown saga %s", c.step, c.action, c.saga)
			continue
		}
		if c.action == "compensate" && afterPivot[c.saga] {
			continue // counted already
		}
		if c.action == "compensate" && charges[c.saga] > 0 {
			afterPivot[c.saga] = true
			res.violate("saga %s: pivot succeeded but the orchestrator sent a compensation of %s", c.saga, c.step)
		}
		if s.state == string(saga.Failed) {
			continue
		}
		if _, ok := barrier[barrierKey(c.saga, c.step, c.action)]; !ok {
			lost[c.saga] = true
			res.violate("saga %s (%s): command %s/%s sent but its participant recorded no outcome", c.saga, s.state, c.step, c.action)
		}
	}
	res.Lost += len(lost)
	res.DoubleEffects = len(double)
	res.CompensatedAfterPivot = len(afterPivot)

	if err := db.QueryRow(ctx, `SELECT count(*) FROM `+ident(sc.Orchestrator, "journal")+` WHERE event = $1`, saga.JournalLate).Scan(&res.LateReplies); err != nil {
		return fmt.Errorf("chaos: count late replies: %w", err)
	}
	var dt int64
	if err := db.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM `+ident(sc.Orchestrator, "journal")+`
WHERE message_id IS NOT NULL AND NOT ignored GROUP BY saga_id, message_id, event, step, action HAVING count(*) > 1) d`).Scan(&dt); err != nil {
		return fmt.Errorf("chaos: count double transitions: %w", err)
	}
	if dt > 0 {
		res.DoubleTransitions = int(dt)
		res.violate("%d replies applied more than once (journal)", dt)
	}
	if res.Stuck > 0 {
		res.violate("%d sagas not terminal after %s", res.Stuck, h.cfg.QuiesceTimeout)
	}
	return nil
}

// booking is one trip participant's reservations (state by saga) and the
// step that makes and releases them.
type booking struct {
	participant, step string
	states            map[uuid.UUID]string
}

// tripReservations reads the flights, hotels and cars reservations.
func tripReservations(ctx context.Context, db pgx.Tx, sc workload.Schemas) ([]booking, error) {
	out := []booking{
		{participant: tripapi.Flights, step: tripapi.StepReserveFlight},
		{participant: tripapi.Hotels, step: tripapi.StepReserveHotel},
		{participant: tripapi.Cars, step: tripapi.StepReserveCar},
	}
	read := map[string]func(context.Context, participants.DB, string) (map[uuid.UUID]string, error){
		tripapi.Flights: flights.States, tripapi.Hotels: hotels.States, tripapi.Cars: cars.States,
	}
	schema := map[string]string{tripapi.Flights: sc.Flights, tripapi.Hotels: sc.Hotels, tripapi.Cars: sc.Cars}
	for i := range out {
		st, err := read[out[i].participant](ctx, db, schema[out[i].participant])
		if err != nil {
			return nil, fmt.Errorf("chaos: read %s reservations: %w", out[i].participant, err)
		}
		out[i].states = st
	}
	return out, nil
}

// check compares saga id's reservation with its reserve step's barrier: a
// released reservation needs a compensation that undid it, a held one
// none. It returns the violation, or "".
func (b booking) check(id uuid.UUID, barrier map[string]barrierRow) string {
	st, ok := b.states[id]
	if !ok {
		return ""
	}
	c, hasComp := barrier[barrierKey(id, b.step, "compensate")]
	undone := hasComp && c.outcome == "success" && c.reason != participants.ReasonEmpty
	switch {
	case st != "released" && undone:
		return fmt.Sprintf("saga %s: %s reservation compensated but still %s", id, b.participant, st)
	case st == "released" && !undone:
		return fmt.Sprintf("saga %s: %s reservation released without a recorded compensation", id, b.participant)
	}
	return ""
}

// outcomeWait bounds the wait for the outcome records of the sagas that
// ended (the outboxes are drained by then: they are on the broker).
const outcomeWait = time.Minute

// checkOutcomes reads the outcome topic from its start and checks that
// every saga that ended is on it exactly once (workload.CheckOutcomes).
func (h *harness) checkOutcomes(ctx context.Context, res *Result) error {
	r, err := conformance.ReadOutcomes(ctx, h.brokers, orchestrator.OutcomeTopicDefault)
	if err != nil {
		return fmt.Errorf("chaos: read the outcome topic: %w", err)
	}
	defer r.Close()
	ended := res.Completed + res.Compensated + res.Failed
	got, werr := r.Wait(ctx, outcomeWait, func(o map[uuid.UUID][]message.SagaOutcome) bool {
		return workload.FinishedOutcomes(o) >= ended
	})
	if werr != nil && ctx.Err() != nil {
		return werr
	}
	if werr != nil {
		res.violate("outcome topic: %v", werr)
	}
	bad, err := workload.CheckOutcomes(ctx, h.pool, orchestrator.SchemaDefault, got)
	if err != nil {
		return err
	}
	for _, v := range bad {
		res.violate("%s", v)
	}
	res.Outcomes = workload.FinishedOutcomes(got)
	return nil
}
