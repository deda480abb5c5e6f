package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/internal/workload"
	"github.com/sagaflow/sagaflow/migrations"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/participants/reference"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps"
	"github.com/sagaflow/sagaflow/steps/orderapi"
	"github.com/sagaflow/sagaflow/steps/tripapi"
)

// TestCheckFindsViolations writes, by hand, the traces of each violation
// the harness looks for and checks that check counts every one: a saga
// left running (stuck), a step compensated after the pivot succeeded, a
// command its participant never recorded (lost), a compensation that undid
// an effect that never happened (double effect) and a reply applied twice.
func TestCheckFindsViolations(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	pool := testkit.Pool(t)
	ref, err := reference.New(pool, reference.Options{Trips: true})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Migrate(t, pool, testkit.MustSets(t)(migrations.Orchestrator(orchestrator.SchemaDefault)), testkit.MustSets(t)(ref.Migrations()))
	h := &harness{cfg: Config{QuiesceTimeout: time.Second}, pool: pool}

	mkSteps := func(states ...saga.StepStatus) []byte {
		names := []string{orderapi.StepReserveInventory, orderapi.StepLockCoupon, orderapi.StepChargePayment, orderapi.StepCreateShipment, orderapi.StepAwardPoints, orderapi.StepConfirmStock}
		var ss []saga.StepState
		for i, st := range states {
			ss = append(ss, saga.StepState{Name: names[i], State: st})
		}
		b, err := json.Marshal(ss)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	addSaga := func(state string, st []byte) uuid.UUID {
		id := uuid.New()
		if _, err := pool.Exec(ctx, `INSERT INTO sagaflow.sagas (id, type, definition_version, aggregate_id, idempotency_key, state, data, steps, version, created_at, updated_at)
VALUES ($1, 'place-order', 1, $2, $2, $3, '{}', $4, 1, now(), now())`, id, id.String(), state, st); err != nil {
			t.Fatal(err)
		}
		return id
	}
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	ok, pend := saga.StepSucceeded, saga.StepPending

	// Clean: a compensated saga whose reservation was undone properly.
	clean := addSaga("compensated", mkSteps(saga.StepCompensated, saga.StepFailed, pend, pend, pend))
	exec(`INSERT INTO inventory.barrier (saga_id, step, action, outcome) VALUES ($1, 'reserve-inventory', 'forward', 'success'), ($1, 'reserve-inventory', 'compensate', 'success')`, clean)
	exec(`INSERT INTO coupon.barrier (saga_id, step, action, outcome) VALUES ($1, 'lock-coupon', 'forward', 'failure')`, clean)

	// Stuck.
	addSaga("running", mkSteps(ok, saga.StepRunning, pend, pend, pend))
	// Compensated after the pivot.
	afterPivot := addSaga("completed", mkSteps(ok, ok, ok, ok, ok))
	exec(`INSERT INTO inventory.barrier (saga_id, step, action, outcome) VALUES ($1, 'reserve-inventory', 'forward', 'success'), ($1, 'reserve-inventory', 'compensate', 'success')`, afterPivot)
	// Lost: a command sent, no barrier row.
	lost := addSaga("compensated", mkSteps(saga.StepCompensated, pend, pend, pend, pend))
	cmd, _ := json.Marshal(map[string]string{"saga_id": lost.String(), "step": orderapi.StepReserveInventory, "action": "compensate"})
	exec(`INSERT INTO sagaflow.outbox (topic, key, value, sent_at) VALUES ('inventory.commands', 'k', $1, now())`, cmd)
	// Double effect: a compensation with effect for a forward that failed.
	dbl := addSaga("compensated", mkSteps(saga.StepFailed, pend, pend, pend, pend))
	exec(`INSERT INTO inventory.barrier (saga_id, step, action, outcome) VALUES ($1, 'reserve-inventory', 'forward', 'failure'), ($1, 'reserve-inventory', 'compensate', 'success')`, dbl)
	// Ended with stock still held (the hold of a compensated saga).
	exec(`INSERT INTO inventory.holds (saga_id, step, resource, quantity) VALUES ($1, 'reserve-inventory', 'sku-a', 1)`, clean)
	// A reply applied twice.
	mid := uuid.New()
	exec(`INSERT INTO sagaflow.journal (saga_id, at, event, step, action, message_id) VALUES ($1, now(), 'step succeeded', 'reserve-inventory', 'forward', $2), ($1, now(), 'step succeeded', 'reserve-inventory', 'forward', $2)`, clean, mid)

	var res Result
	if err := h.check(context.Background(), workload.Plan{Orders: make([]steps.Order, 5)}, &res); err != nil {
		t.Fatal(err)
	}
	if res.Stuck != 1 || res.CompensatedAfterPivot != 1 || res.Lost != 1 || res.DoubleEffects != 1 || res.DoubleTransitions != 1 {
		t.Errorf("stuck %d, compensated after pivot %d, lost %d, double effects %d, double transitions %d; want 1 each\n%v",
			res.Stuck, res.CompensatedAfterPivot, res.Lost, res.DoubleEffects, res.DoubleTransitions, res.Violations)
	}
	if !strings.Contains(strings.Join(res.Violations, "\n"), fmt.Sprintf("saga %s is compensated but its hold of 1 sku-a (step reserve-inventory", clean)) {
		t.Errorf("no violation for the hold a compensated saga still holds:\n%s", strings.Join(res.Violations, "\n"))
	}
	if res.OK() {
		t.Error("OK() with violations")
	}
}

// TestCheckFindsTripViolations writes the traces of book-trip sagas by
// hand: a clean trip turned back (flight reserved then released by its
// compensation), a flight released with no compensation recorded, a hotel
// compensated but still reserved, and a compensation of a reservation
// after the trip was charged. check counts the last three and names them.
func TestCheckFindsTripViolations(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	pool := testkit.Pool(t)
	ref, err := reference.New(pool, reference.Options{Trips: true})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Migrate(t, pool, testkit.MustSets(t)(migrations.Orchestrator(orchestrator.SchemaDefault)), testkit.MustSets(t)(ref.Migrations()))
	h := &harness{cfg: Config{QuiesceTimeout: time.Second}, pool: pool}
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	for _, p := range reference.TripNames {
		exec(`INSERT INTO ` + p + `.items (item, capacity) VALUES ('x', 10)`)
	}
	addTrip := func(state string) uuid.UUID {
		id := uuid.New()
		exec(`INSERT INTO sagaflow.sagas (id, type, definition_version, aggregate_id, idempotency_key, state, data, steps, version, created_at, updated_at)
VALUES ($1, 'book-trip', 1, $2, $2, $3, '{}', '[]', 1, now(), now())`, id, id.String(), state)
		return id
	}
	reserve := func(part string, id uuid.UUID, state string) {
		exec(`INSERT INTO `+part+`.reservations (saga_id, reservation_id, trip_id, customer, item, state) VALUES ($1, $2, $3, 'c', 'x', $4)`, id, part+id.String(), "trip-"+id.String(), state)
	}
	barrier := func(part string, id uuid.UUID, step, action string) {
		exec(`INSERT INTO `+part+`.barrier (saga_id, step, action, outcome) VALUES ($1, $2, $3, 'success')`, id, step, action)
	}

	clean := addTrip("compensated")
	reserve(tripapi.Flights, clean, "released")
	barrier(tripapi.Flights, clean, tripapi.StepReserveFlight, "forward")
	barrier(tripapi.Flights, clean, tripapi.StepReserveFlight, "compensate")

	unrecorded := addTrip("compensated")
	reserve(tripapi.Flights, unrecorded, "released")
	barrier(tripapi.Flights, unrecorded, tripapi.StepReserveFlight, "forward")

	stillHeld := addTrip("compensated")
	reserve(tripapi.Hotels, stillHeld, "reserved")
	barrier(tripapi.Hotels, stillHeld, tripapi.StepReserveHotel, "forward")
	barrier(tripapi.Hotels, stillHeld, tripapi.StepReserveHotel, "compensate")

	charged := addTrip("completed")
	barrier(tripapi.Cars, charged, tripapi.StepReserveCar, "forward")
	barrier(tripapi.Cars, charged, tripapi.StepReserveCar, "compensate")
	exec(`INSERT INTO payment.ledger (saga_id, order_id, customer, amount_cents, kind) VALUES ($1, 't', 'c', 100, 'charge')`, charged)

	var res Result
	if err := h.check(ctx, workload.Plan{Trips: make([]steps.Trip, 4)}, &res); err != nil {
		t.Fatal(err)
	}
	if res.DoubleEffects != 2 || res.CompensatedAfterPivot != 1 {
		t.Errorf("double effects %d (want 2), compensated after pivot %d (want 1)\n%v", res.DoubleEffects, res.CompensatedAfterPivot, res.Violations)
	}
	for _, want := range []string{
		"saga " + unrecorded.String() + ": flights reservation released without a recorded compensation",
		"saga " + stillHeld.String() + ": hotels reservation compensated but still reserved",
		"saga " + charged.String() + ": pivot succeeded but reserve-car received a compensation",
	} {
		if !slices.Contains(res.Violations, want) {
			t.Errorf("no violation %q in\n%v", want, res.Violations)
		}
	}
	for _, v := range res.Violations {
		if strings.Contains(v, clean.String()) {
			t.Errorf("violation for the clean trip: %s", v)
		}
	}
	if c := res.ByType[tripapi.SagaType]; c == nil || c.Sagas != 4 {
		t.Errorf("by type %+v, want 4 book-trip sagas", res.ByType)
	}
}
