package orchestrator_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps/orderapi"
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

// The timers table never lets a saga wake late: while it runs there is a
// timer row no later than its wake-up (writes only move it earlier), and
// the row is gone when the saga ends.
func TestTimersNeverLaterThanTheWakeUp(t *testing.T) {
	t.Parallel()
	env := setupEngine(t)
	ctx := context.Background()
	in, _, err := env.eng.Start(ctx, orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: "t1", AggregateID: "o1", Data: order("o1")})
	if err != nil {
		t.Fatal(err)
	}
	for range len(stepOutputs) {
		cur, _ := get(t, env, in.ID)
		want := cur.NextWakeup()
		got := timerOf(t, env, in.ID)
		if want == nil || got == nil || got.After(want.Truncate(time.Microsecond)) {
			t.Fatalf("at step %s: timer row %v, saga wakes at %v", cur.CurrentStep(), got, want)
		}
		c := lastCommand(t, env)
		env.clock.advance(time.Second)
		mustReply(t, env, c, message.Success, stepOutputs[c.Step])
	}
	if got, _ := get(t, env, in.ID); got.State != saga.Completed {
		t.Fatalf("state %s, want completed", got.State)
	}
	if due := timerOf(t, env, in.ID); due != nil {
		t.Fatalf("a completed saga keeps a timer at %v", due)
	}
}

// A timer that fires early (its row kept the first step's timeout while the
// saga moved on) changes nothing in the saga and is moved to the saga's
// real wake-up, so it is not claimed again and again.
func TestEarlyTimerIsMovedToTheWakeUp(t *testing.T) {
	t.Parallel()
	env := setupEngine(t)
	ctx := context.Background()
	in, _, err := env.eng.Start(ctx, orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: "t2", AggregateID: "o2", Data: order("o2")})
	if err != nil {
		t.Fatal(err)
	}
	first := timerOf(t, env, in.ID)
	env.clock.advance(time.Second)
	c := lastCommand(t, env)
	mustReply(t, env, c, message.Success, stepOutputs[c.Step])
	moved, _ := get(t, env, in.ID)
	wake := moved.NextWakeup()
	if first == nil || wake == nil || !wake.After(*first) {
		t.Fatalf("timer %v, wake-up after the first step %v: want a later wake-up", first, wake)
	}
	// Between the stale timer and the real wake-up.
	env.clock.advance(first.Sub(env.clock.now()) + time.Millisecond)
	n, err := env.eng.FireDue(ctx, 10)
	if err != nil || n != 1 {
		t.Fatalf("FireDue: %d fired, %v; want the early timer", n, err)
	}
	after, _ := get(t, env, in.ID)
	if after.Version != moved.Version {
		t.Fatalf("an early timer moved the saga: version %d -> %d", moved.Version, after.Version)
	}
	if got := timerOf(t, env, in.ID); got == nil || !got.Equal(wake.Truncate(time.Microsecond)) {
		t.Fatalf("timer after the early fire %v, want the wake-up %v", got, wake)
	}
	if n, err := env.eng.FireDue(ctx, 10); err != nil || n != 0 {
		t.Fatalf("FireDue again: %d fired, %v; want none", n, err)
	}
}

// A step whose wake-up is not earlier than the one it replaces leaves the
// saga's timer row alone: not moved, and not locked either (an upsert's
// conflict check would lock it and log that; its xmin and xmax stay). A
// step whose wake-up is earlier moves the row to it.
func TestStepLeavesALaterTimerAlone(t *testing.T) {
	t.Parallel()
	env := setupEngine(t)
	ctx := context.Background()
	in, _, err := env.eng.Start(ctx, orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: "t3", AggregateID: "o3", Data: order("o3")})
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		due        time.Time
		xmin, xmax string
	}
	read := func() row {
		t.Helper()
		var r row
		if err := env.pool.QueryRow(ctx, `SELECT due_at, xmin::text, xmax::text FROM orch.timers WHERE saga_id = $1`, in.ID).Scan(&r.due, &r.xmin, &r.xmax); err != nil {
			t.Fatalf("timer row of saga %s: %v", in.ID, err)
		}
		return r
	}
	first := read()

	env.clock.advance(time.Second)
	c := lastCommand(t, env)
	mustReply(t, env, c, message.Success, stepOutputs[c.Step])
	cur, _ := get(t, env, in.ID)
	if w := cur.NextWakeup(); w == nil || !w.After(first.due) {
		t.Fatalf("wake-up after step %s: %v, want later than the timer %v", c.Step, w, first.due)
	}
	if got := read(); got != first {
		t.Fatalf("a later wake-up touched the timer row: %+v, was %+v", got, first)
	}

	// The clock goes back an hour: the next step's timeout falls before
	// the timer row.
	env.clock.advance(-time.Hour)
	c = lastCommand(t, env)
	mustReply(t, env, c, message.Success, stepOutputs[c.Step])
	cur, _ = get(t, env, in.ID)
	w := cur.NextWakeup()
	if w == nil || !w.Before(first.due) {
		t.Fatalf("wake-up after step %s: %v, want earlier than the timer %v", c.Step, w, first.due)
	}
	if got := read(); !got.due.Equal(w.Truncate(time.Microsecond)) || got.xmin == first.xmin {
		t.Fatalf("an earlier wake-up %v left the timer row %+v (was %+v)", w, got, first)
	}
}

// A start writes the saga row and its timer row and locks nothing else:
// a foreign key from the timer to the saga made every start check it,
// locking the new saga row (FOR KEY SHARE) and logging the lock, which
// shows in the row's xmax.
func TestStartLocksNoSagaRow(t *testing.T) {
	t.Parallel()
	env := setupEngine(t)
	ctx := context.Background()
	in, _, err := env.eng.Start(ctx, orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: "t4", AggregateID: "o4", Data: order("o4")})
	if err != nil {
		t.Fatal(err)
	}
	if timerOf(t, env, in.ID) == nil {
		t.Fatalf("saga %s started without a timer row", in.ID)
	}
	var xmax string
	if err := env.pool.QueryRow(ctx, `SELECT xmax::text FROM orch.sagas WHERE id = $1`, in.ID).Scan(&xmax); err != nil {
		t.Fatal(err)
	}
	if xmax != "0" {
		t.Fatalf("the start locked its saga row (xmax %s)", xmax)
	}
}

var stepOutputs = map[string]any{
	orderapi.StepReserveInventory: orderapi.ReserveInventoryResult{ReservationID: "r1"},
	orderapi.StepLockCoupon:       orderapi.LockCouponResult{},
	orderapi.StepChargePayment:    orderapi.ChargePaymentResult{PaymentID: "p1"},
	orderapi.StepCreateShipment:   orderapi.CreateShipmentResult{ShipmentID: "s1"},
	orderapi.StepAwardPoints:      orderapi.AwardPointsResult{Balance: 10},
	orderapi.StepConfirmStock:     orderapi.ConfirmStockResult{Sold: 1},
}

// A step-to-step transition changes current_step, next_wakeup_at, data,
// steps, version, flag, deadline_at and updated_at. If any index of the
// saga table read one of them (as a key, an expression or a partial-index
// predicate), Postgres could not update the row in place (HOT) and would
// add an entry to every index at every step.
//
// One exception: the open flagged sagas' index (sagas_flagged_idx, the
// backlog's oldest flagged saga) reads flag in its predicate. Every update
// writes the flag, but Postgres decides HOT on the values that changed,
// and the flag changes only when a saga is flagged (once, a retry past its
// threshold, a force-fail) or an operator clears it: a step that leaves it
// as it was stays HOT.
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
		if idx == "sagas_flagged_idx" && col == "flag" {
			continue
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
