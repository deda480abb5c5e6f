package saga_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/orderapi"
	"github.com/sagaflow/sagaflow/saga"
)

// timerOf is the saga's row in the timers table (nil: none).
func timerOf(t *testing.T, env *engineEnv, id uuid.UUID) *time.Time {
	t.Helper()
	var due time.Time
	err := env.pool.QueryRow(context.Background(), `SELECT due_at FROM orch.timers WHERE saga_id = $1`, id).Scan(&due)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return &due
}

// The timers table follows every write of a saga: a row at the active
// step's wake-up time from the start, moved at each step, gone when the
// saga ends.
func TestTimersFollowTheSagaWakeUp(t *testing.T) {
	t.Parallel()
	env := setupEngine(t)
	ctx := context.Background()
	in, _, err := env.eng.Start(ctx, saga.StartRequest{Type: orderapi.SagaType, IdempotencyKey: "t1", AggregateID: "o1", Data: order("o1")})
	if err != nil {
		t.Fatal(err)
	}
	outputs := map[string]any{
		orderapi.StepReserveInventory: orderapi.ReserveInventoryResult{ReservationID: "r1"},
		orderapi.StepLockCoupon:       orderapi.LockCouponResult{},
		orderapi.StepChargePayment:    orderapi.ChargePaymentResult{PaymentID: "p1"},
		orderapi.StepCreateShipment:   orderapi.CreateShipmentResult{ShipmentID: "s1"},
		orderapi.StepAwardPoints:      orderapi.AwardPointsResult{Balance: 10},
	}
	for range 5 {
		cur, _ := get(t, env, in.ID)
		want := cur.NextWakeup()
		got := timerOf(t, env, in.ID)
		if want == nil || got == nil || !got.Equal(want.Truncate(time.Microsecond)) {
			t.Fatalf("at step %s: timer row %v, want %v", cur.CurrentStep(), got, want)
		}
		c := lastCommand(t, env)
		env.clock.advance(time.Second)
		mustReply(t, env, c, message.Success, outputs[c.Step])
	}
	if got, _ := get(t, env, in.ID); got.State != saga.Completed {
		t.Fatalf("state %s, want completed", got.State)
	}
	if due := timerOf(t, env, in.ID); due != nil {
		t.Fatalf("a completed saga keeps a timer at %v", due)
	}
}

// A step-to-step transition changes current_step, next_wakeup_at, data,
// steps, version, flag, deadline_at and updated_at. If any index of the
// saga table read one of them (as a key, an expression or a partial-index
// predicate), Postgres could not update the row in place (HOT) and would
// add an entry to every index at every step.
func TestNoSagaIndexReadsAColumnAStepChanges(t *testing.T) {
	t.Parallel()
	env := setupEngine(t)
	rows, err := env.pool.Query(context.Background(), `
SELECT c.relname, a.attname
FROM pg_index i
JOIN pg_class c ON c.oid = i.indexrelid
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum > 0
WHERE i.indrelid = 'orch.sagas'::regclass
  AND a.attname = ANY($1)
  AND (a.attnum = ANY(i.indkey)
       OR pg_get_expr(i.indpred, i.indrelid) ~ ('\m' || a.attname || '\M')
       OR pg_get_expr(i.indexprs, i.indrelid) ~ ('\m' || a.attname || '\M'))`,
		[]string{"current_step", "next_wakeup_at", "data", "steps", "version", "flag", "deadline_at", "updated_at"})
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var idx, col string
		if err := rows.Scan(&idx, &col); err != nil {
			t.Fatal(err)
		}
		t.Errorf("index %s reads %s, which every step changes: step updates cannot be HOT", idx, col)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var ff []string
	if err := env.pool.QueryRow(context.Background(), `SELECT coalesce(reloptions, '{}') FROM pg_class WHERE oid = 'orch.sagas'::regclass`).Scan(&ff); err != nil {
		t.Fatal(err)
	}
	if len(ff) != 1 || ff[0] != "fillfactor=50" {
		t.Fatalf("saga table options %v, want fillfactor=50 (room for HOT versions)", ff)
	}
}
