package orchestrator_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

// startToShipment starts a place-order saga and answers its steps up to
// create-shipment (after the pivot), whose command is then outstanding.
func startToShipment(t *testing.T, env *engineEnv, key string) uuid.UUID {
	t.Helper()
	in, _, err := env.eng.Start(context.Background(), orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: key, AggregateID: key, Data: order(key)})
	if err != nil {
		t.Fatal(err)
	}
	mustReply(t, env, lastCommand(t, env), message.Success, orderapi.ReserveInventoryResult{ReservationID: "r"})
	mustReply(t, env, lastCommand(t, env), message.Success, orderapi.LockCouponResult{})
	mustReply(t, env, lastCommand(t, env), message.Success, orderapi.ChargePaymentResult{PaymentID: "p"})
	if c := lastCommand(t, env); c.Step != orderapi.StepCreateShipment {
		t.Fatalf("outstanding %s, want create-shipment", c.Step)
	}
	return in.ID
}

// flagShipment answers retry to saga id's create-shipment until the saga
// is flagged, as when the carrier closed the account (bounded: the retry
// policy's attempts).
func flagShipment(t *testing.T, env *engineEnv, id uuid.UUID) {
	t.Helper()
	for n := 0; ; n++ {
		in, _ := get(t, env, id)
		if in.Flag != "" {
			return
		}
		if n == 50 {
			t.Fatalf("create-shipment not flagged after %d retries: %+v", n, in.Steps[3])
		}
		mustReply(t, env, lastCommand(t, env), message.Retry, nil)
		env.clock.advance(10 * time.Second)
		if _, err := env.eng.FireDue(context.Background(), 10); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRepairMarkDoneAfterThePivotCompletesAndIsAudited(t *testing.T) {
	t.Parallel()
	env := setupEngine(t)
	ctx := context.Background()
	id := startToShipment(t, env, "o-markdone")
	flagShipment(t, env, id)
	// The same action on a step before the pivot of another saga: 409.
	other, _, err := env.eng.Start(ctx, orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: "o-early", AggregateID: "o-early", Data: order("o-early")})
	if err != nil {
		t.Fatal(err)
	}
	_, err = env.eng.Operate(ctx, other.ID, saga.Operator{Action: saga.ActionMarkDone, Actor: "alice", Reason: "found it", Step: orderapi.StepReserveInventory})
	var refused *saga.RefusedError
	if !errors.As(err, &refused) || !strings.Contains(refused.Why, "before the pivot") || !strings.Contains(refused.Why, "running") {
		t.Fatalf("mark-done before the pivot: err %v, want a refusal naming the state and step", err)
	}

	output := json.RawMessage(`{"shipment_id":"ship-by-hand"}`)
	got, err := env.eng.Operate(ctx, id, saga.Operator{Action: saga.ActionMarkDone, Actor: "alice", Reason: "shipped with another carrier", Ticket: "INC-42", Output: output})
	if err != nil {
		t.Fatalf("mark-done: %v", err)
	}
	if got.State != saga.Running || got.Steps[3].State != saga.StepSucceeded || got.Flag != "" {
		t.Fatalf("after mark-done: saga %s, step %s, flag %q", got.State, got.Steps[3].State, got.Flag)
	}
	mustReply(t, env, lastCommand(t, env), message.Success, orderapi.AwardPointsResult{Balance: 3})
	mustReply(t, env, lastCommand(t, env), message.Success, orderapi.ConfirmStockResult{Sold: 1})
	final, journal := get(t, env, id)
	if final.State != saga.Completed {
		t.Fatalf("state %s, want completed", final.State)
	}
	var data steps.Order
	if err := json.Unmarshal(final.Data, &data); err != nil || data.ShipmentID != "ship-by-hand" {
		t.Fatalf("the operator's output was not merged: %s (%v)", final.Data, err)
	}
	var op *saga.JournalEntry
	for i := range journal {
		if journal[i].Event == "operator mark-done" {
			op = &journal[i]
		}
	}
	if op == nil || op.Actor != "alice" || op.Reason != "shipped with another carrier" || op.Ticket != "INC-42" || op.Step != orderapi.StepCreateShipment {
		t.Fatalf("journal has no mark-done entry with actor, reason, ticket and step: %+v", op)
	}
	audit, err := env.eng.Audit(ctx, id, 10)
	if err != nil || len(audit) != 1 {
		t.Fatalf("audit = %+v, %v; want one entry", audit, err)
	}
	a := audit[0]
	if a.Action != "mark-done" || a.Actor != "alice" || a.Reason != "shipped with another carrier" || a.Ticket != "INC-42" || a.Step != orderapi.StepCreateShipment {
		t.Fatalf("audit entry %+v", a)
	}
	if a.Before.State != saga.Running || a.Before.Flag == "" || a.Before.Steps[3].State != saga.StepRetrying && a.Before.Steps[3].State != saga.StepRunning {
		t.Fatalf("audit before = %+v", a.Before)
	}
	if a.After.Steps[3].State != saga.StepSucceeded || !strings.Contains(string(a.After.Data), "ship-by-hand") || strings.Contains(string(a.Before.Data), "ship-by-hand") {
		t.Fatalf("audit after = %+v (before data %s)", a.After, a.Before.Data)
	}
}

func TestRepairMarkCompensatedEndsCompensated(t *testing.T) {
	t.Parallel()
	env := setupEngine(t)
	ctx := context.Background()
	in, _, err := env.eng.Start(ctx, orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: "o-coupon", AggregateID: "o-coupon", Data: order("o-coupon")})
	if err != nil {
		t.Fatal(err)
	}
	mustReply(t, env, lastCommand(t, env), message.Success, orderapi.ReserveInventoryResult{ReservationID: "r"})
	mustReply(t, env, lastCommand(t, env), message.Success, orderapi.LockCouponResult{})
	mustReply(t, env, lastCommand(t, env), message.Failure, nil) // payment declined
	// The coupon was deleted by hand: its compensation always fails.
	for n := 0; n < 5; n++ {
		c := lastCommand(t, env)
		if c.Step != orderapi.StepLockCoupon || c.Action != message.Compensate {
			t.Fatalf("outstanding %s/%s, want lock-coupon/compensate", c.Step, c.Action)
		}
		mustReply(t, env, c, message.Failure, nil)
		env.clock.advance(10 * time.Second)
		if _, err := env.eng.FireDue(ctx, 10); err != nil {
			t.Fatal(err)
		}
	}
	// force-fail and resume are refused here; mark-done too.
	if _, err := env.eng.Operate(ctx, in.ID, saga.Operator{Action: saga.ActionMarkDone, Actor: "bob", Reason: "x"}); !errors.Is(err, saga.ErrRefused) {
		t.Fatalf("mark-done while compensating: %v, want refused", err)
	}
	got, err := env.eng.Operate(ctx, in.ID, saga.Operator{Action: saga.ActionMarkCompensated, Actor: "bob", Reason: "coupon deleted by hand", Note: "re-issued the coupon by hand", Ticket: "OPS-7"})
	if err != nil {
		t.Fatalf("mark-compensated: %v", err)
	}
	if got.Steps[1].State != saga.StepCompensated || !strings.Contains(got.Steps[1].CompensationNote, "re-issued the coupon by hand") {
		t.Fatalf("lock-coupon %s, note %q", got.Steps[1].State, got.Steps[1].CompensationNote)
	}
	c := lastCommand(t, env)
	if c.Step != orderapi.StepReserveInventory || c.Action != message.Compensate {
		t.Fatalf("next %s/%s, want reserve-inventory/compensate", c.Step, c.Action)
	}
	mustReply(t, env, c, message.Success, nil)
	final, journal := get(t, env, in.ID)
	if final.State != saga.Compensated {
		t.Fatalf("state %s, want compensated", final.State)
	}
	found := false
	for _, j := range journal {
		if j.Event == "operator mark-compensated" && j.Actor == "bob" && j.Ticket == "OPS-7" && j.Step == orderapi.StepLockCoupon && j.From == saga.Compensating {
			found = true
		}
	}
	if !found {
		t.Fatalf("no mark-compensated journal entry: %+v", journal)
	}
	if audit, err := env.eng.Audit(ctx, in.ID, 10); err != nil || len(audit) != 1 || audit[0].Before.Steps[1].State == saga.StepCompensated || audit[0].After.Steps[1].State != saga.StepCompensated {
		t.Fatalf("audit %+v, %v", audit, err)
	}
}

func TestRepairForceFailStopsSendingAndResumeGoesOn(t *testing.T) {
	t.Parallel()
	env := setupEngine(t)
	ctx := context.Background()
	id := startToShipment(t, env, "o-force")
	got, err := env.eng.Operate(ctx, id, saga.Operator{Action: saga.ActionForceFail, Actor: "carol", Reason: "carrier outage", Ticket: "INC-9"})
	if err != nil || got.State != saga.Failed {
		t.Fatalf("force-fail: %v, state %s", err, got.State)
	}
	var timers int
	if err := env.pool.QueryRow(ctx, `SELECT count(*) FROM orch.timers WHERE saga_id = $1`, id).Scan(&timers); err != nil || timers != 0 {
		t.Fatalf("force-failed saga keeps %d timers (%v)", timers, err)
	}
	before := len(pendingCommands(t, env))
	env.clock.advance(time.Hour)
	if _, err := env.eng.FireDue(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if n := len(pendingCommands(t, env)); n != before {
		t.Fatalf("a force-failed saga sent %d commands", n-before)
	}
	got, err = env.eng.Operate(ctx, id, saga.Operator{Action: saga.ActionResume, Actor: "carol", Reason: "carrier back", Step: orderapi.StepCreateShipment})
	if err != nil || got.State != saga.Running {
		t.Fatalf("resume: %v, state %s", err, got.State)
	}
	c := lastCommand(t, env)
	if c.Step != orderapi.StepCreateShipment || c.Action != message.Forward || c.Attempt != 2 {
		t.Fatalf("resume sent %s/%s attempt %d", c.Step, c.Action, c.Attempt)
	}
	mustReply(t, env, c, message.Success, orderapi.CreateShipmentResult{ShipmentID: "s"})
	mustReply(t, env, lastCommand(t, env), message.Success, orderapi.AwardPointsResult{Balance: 1})
	mustReply(t, env, lastCommand(t, env), message.Success, orderapi.ConfirmStockResult{Sold: 1})
	if final, _ := get(t, env, id); final.State != saga.Completed {
		t.Fatalf("state %s, want completed", final.State)
	}
	if audit, err := env.eng.Audit(ctx, id, 10); err != nil || len(audit) != 2 || audit[0].Action != "force-fail" || audit[1].Action != "resume" || audit[1].Before.State != saga.Failed {
		t.Fatalf("audit %+v, %v", audit, err)
	}
}
