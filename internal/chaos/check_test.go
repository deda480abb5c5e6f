package chaos

import (
	"context"
	"encoding/json"
	"fmt"
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
	ref, err := reference.New(pool, reference.Options{})
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
