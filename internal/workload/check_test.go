package workload_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/internal/workload"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/migrations"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/participants"
	"github.com/sagaflow/sagaflow/participants/inventory"
	"github.com/sagaflow/sagaflow/participants/participanttest"
	"github.com/sagaflow/sagaflow/participants/reference"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

// TestCheckFindsReservationsThatOutliveTheirSaga runs the real inventory
// handlers for sagas in every end state and checks that Check reports
// exactly the sagas that ended with stock still held.
func TestCheckFindsReservationsThatOutliveTheirSaga(t *testing.T) {
	t.Parallel()
	k := participanttest.New(t, orderapi.Inventory, inventory.Migrations, func(p *participants.Participant) error {
		return inventory.Register(p, inventory.Options{})
	})
	ref, err := reference.New(k.Pool, reference.Options{})
	if err != nil {
		t.Fatal(err)
	}
	must := testkit.MustSets(t)
	testkit.Migrate(t, k.Pool, must(migrations.Orchestrator(orchestrator.SchemaDefault)), must(ref.Migrations()))
	ctx := testkit.Context(t, 30*time.Second)
	stock := map[string]int{"sku-a": 10}
	if err := inventory.Seed(ctx, k.Pool, k.Schema(), stock); err != nil {
		t.Fatal(err)
	}

	send := func(id uuid.UUID, step string, action message.Action, payload any) {
		t.Helper()
		a := k.Send(participanttest.Command(t, id, step, action, 1, payload))
		participanttest.WantReply(t, a[0], message.Success, "")
	}
	reserve := func(id uuid.UUID) {
		send(id, orderapi.StepReserveInventory, message.Forward, orderapi.ReserveInventory{OrderID: "o-" + id.String(), SKU: "sku-a", Qty: 1})
	}
	release := func(id uuid.UUID) {
		send(id, orderapi.StepReserveInventory, message.Compensate, orderapi.ReserveInventory{OrderID: "o-" + id.String(), SKU: "sku-a", Qty: 1})
	}
	confirm := func(id uuid.UUID) {
		send(id, orderapi.StepConfirmStock, message.Forward, orderapi.ConfirmStock{OrderID: "o-" + id.String()})
	}
	cases := []struct {
		name, state string
		run         []func(uuid.UUID)
		violations  int // the lines naming the saga and its stock
	}{
		{"completed and sold", "completed", []func(uuid.UUID){reserve, confirm}, 0},
		{"compensated and released", "compensated", []func(uuid.UUID){reserve, release}, 0},
		{"failed, held for an operator", "failed", []func(uuid.UUID){reserve}, 0},
		{"completed, never confirmed", "completed", []func(uuid.UUID){reserve}, 2},    // reservation and hold
		{"compensated, never released", "compensated", []func(uuid.UUID){reserve}, 2}, // reservation and hold
	}
	ids := make([]uuid.UUID, len(cases))
	for i, c := range cases {
		ids[i] = uuid.New()
		if _, err := k.Pool.Exec(ctx, `INSERT INTO sagaflow.sagas (id, type, definition_version, aggregate_id, idempotency_key, state, data, steps, version, created_at, updated_at)
VALUES ($1, 'place-order', 1, $2, $2, $3, '{}', '[]', 1, now(), now())`, ids[i], ids[i].String(), c.state); err != nil {
			t.Fatal(err)
		}
		for _, step := range c.run {
			step(ids[i])
		}
	}

	schemas := workload.Schemas{
		Orchestrator: orchestrator.SchemaDefault, Inventory: k.Schema(), Coupon: orderapi.Coupon,
		Payment: orderapi.Payment, Shipping: orderapi.Shipping, Points: orderapi.Points,
	}
	rep, err := workload.Check(ctx, k.Pool, schemas, stock, true)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range cases {
		var lines []string
		for _, v := range rep.Violations {
			if strings.Contains(v, ids[i].String()) && (strings.Contains(v, "reservation") || strings.Contains(v, "hold")) {
				lines = append(lines, v)
			}
		}
		held := 0
		for _, l := range lines {
			if strings.Contains(l, "hold of 1 sku-a (step "+orderapi.StepReserveInventory) && strings.Contains(l, "is held") {
				held++
			}
		}
		if len(lines) != c.violations || (c.violations > 0 && held != 1) {
			t.Errorf("%s: violations naming the saga:\n%s\nwant %d, one of them its held hold", c.name, strings.Join(lines, "\n"), c.violations)
		}
	}
	// A hold the stock does not account for (units held but not moved to
	// reserved) is reported per SKU.
	if _, err := k.Pool.Exec(ctx, `INSERT INTO inventory.holds (saga_id, step, resource, quantity) VALUES ($1, 'hand-held', 'sku-a', 4)`, ids[2]); err != nil {
		t.Fatal(err)
	}
	again, err := workload.Check(ctx, k.Pool, schemas, stock, true)
	if err != nil {
		t.Fatal(err)
	}
	if want := "item sku-a: reserved 3 and sold 1 but its holds hold 7 and confirmed 1"; !strings.Contains(strings.Join(again.Violations, "\n"), want) {
		t.Errorf("violations lack %q:\n%s", want, strings.Join(again.Violations, "\n"))
	}
	// The other checks still run (no charge was made in this test).
	if want := fmt.Sprintf("completed saga %s has 0 charges", ids[0]); !strings.Contains(strings.Join(rep.Violations, "\n"), want) {
		t.Errorf("violations do not include %q (the other checks still run):\n%s", want, strings.Join(rep.Violations, "\n"))
	}
	// A saga not terminal is reported with where it stands: its current
	// step's state, attempts and last error, its flag and next wake-up.
	stuck := uuid.New()
	if _, err := k.Pool.Exec(ctx, `INSERT INTO sagaflow.sagas (id, type, definition_version, aggregate_id, idempotency_key, state, current_step, flag, data, steps, version, created_at, updated_at, next_wakeup_at)
VALUES ($1, 'place-order', 1, $2, $2, 'running', 'create-shipment', 'still retrying', '{}',
  '[{"name": "reserve-inventory", "state": "succeeded", "attempts": 1}, {"name": "create-shipment", "state": "retrying", "attempts": 7, "compensation_attempts": 0, "last_error": "retry: busy"}]',
  9, now(), now(), '2026-12-04 18:00:00+00')`, stuck, stuck.String()); err != nil {
		t.Fatal(err)
	}
	third, err := workload.Check(ctx, k.Pool, schemas, stock, true)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("saga %s (place-order) is still running at step create-shipment (retrying, 7 attempts, 0 compensations, last error 'retry: busy'), flag 'still retrying', next wake-up 2026-12-04T18:00:00.000Z, updated ", stuck)
	if all := strings.Join(third.Violations, "\n"); !strings.Contains(all, want) || third.NonTerminal != 1 {
		t.Errorf("%d not terminal; violations lack %q:\n%s", third.NonTerminal, want, all)
	}
}
