package faults_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/participants"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

// forwardsBySaga groups the forward sends of step by saga, in send order.
func forwardsBySaga(ss []sent, step string, action message.Action) map[uuid.UUID][]sent {
	out := map[uuid.UUID][]sent{}
	for _, s := range ss {
		if s.cmd.Step == step && s.cmd.Action == action {
			out[s.cmd.SagaID] = append(out[s.cmd.SagaID], s)
		}
	}
	return out
}

// A pre-pivot step whose participant is down times out (outcome unknown)
// and, with its deadline set to its timeout, is given up at the first
// timeout: the saga compensates that step too and the steps before it. When the participant comes back, the late forward and the
// compensation meet at its barrier: no coupon stays locked, nothing is
// applied twice, every saga ends compensated.
func TestTimeoutBeforePivotCompensatesThatStepToo(t *testing.T) {
	t.Parallel()
	const n = 6
	e := newEnv(t, envOpts{orders: n, seed: 41, override: func(r *saga.Registry) error {
		return r.Override(orderapi.SagaType, orderapi.StepLockCoupon, saga.StepOverride{Timeout: 250 * time.Millisecond, Deadline: 250 * time.Millisecond,
			Retry: saga.RetryPolicy{InitialInterval: 40 * time.Millisecond, MaxInterval: 80 * time.Millisecond, MaxAttempts: 3}})
	}})
	ctx := testkit.Context(t, 2*time.Minute)
	e.run("orchestrator", e.service(orchestrator.DefaultRun).Run)
	e.runParticipants(e.participants(), orderapi.Coupon)
	e.startAll(ctx)
	topic := e.prefix + orderapi.Coupon + ".commands"
	var reached, comps map[uuid.UUID][]sent
	testkit.Eventually(t, settle, "every saga at the coupon step timed out and compensates it", func() (bool, error) {
		ss := e.sentOn(topic)
		reached = forwardsBySaga(ss, orderapi.StepLockCoupon, message.Forward)
		comps = forwardsBySaga(ss, orderapi.StepLockCoupon, message.Compensate)
		open := e.count(`SELECT count(*) FROM ` + e.schemas.Orchestrator + `.sagas WHERE state = 'running'`)
		return len(reached) > 0 && len(comps) == len(reached) && open == 0, nil
	})
	for id, fw := range reached {
		if len(fw) != 1 {
			t.Fatalf("saga %s: lock-coupon sent %d times; a pre-pivot timeout is not re-sent", id, len(fw))
		}
		if len(comps[id]) == 0 {
			t.Fatalf("saga %s: the timed-out step itself was not compensated", id)
		}
		in, journal, err := e.engine.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if in.State != saga.Compensating {
			t.Fatalf("saga %s is %s after its pre-pivot step timed out, want compensating (coupon still down)", id, in.State)
		}
		timeouts := 0
		started := stepOf(in, orderapi.StepLockCoupon).StartedAt
		for _, j := range journal {
			if j.Event == saga.JournalTimeout && j.Step == orderapi.StepLockCoupon && j.Action == string(message.Forward) {
				timeouts++
				// Engine clock on both sides (outbox times are
				// transaction start times).
				if started == nil || j.At.Sub(*started) < 250*time.Millisecond {
					t.Fatalf("saga %s: timeout journaled at %s, step started at %v: sooner than the 250ms timeout", id, j.At, started)
				}
			}
		}
		if timeouts != 1 {
			t.Fatalf("saga %s: %d lock-coupon forward timeouts journaled, want 1", id, timeouts)
		}
	}
	// The participant comes back and finds forwards and compensations.
	e.runParticipants(e.participants(), orderapi.Inventory, orderapi.Payment, orderapi.Shipping, orderapi.Points)
	e.waitTerminal(settle)
	rep := e.checkInvariants(false)
	if rep.Compensated != n {
		t.Fatalf("report %+v: want all %d compensated", rep, n)
	}
	if held := e.count(`SELECT count(*) FROM ` + e.schemas.Coupon + `.barrier f WHERE action = 'forward' AND outcome = 'success'
		AND NOT EXISTS (SELECT 1 FROM ` + e.schemas.Coupon + `.barrier c WHERE c.saga_id = f.saga_id AND c.action = 'compensate' AND c.outcome = 'success')`); held != 0 {
		t.Fatalf("%d coupon locks executed late and never undone", held)
	}
}

// The pivot's participant is down: the pivot is re-sent (idempotently)
// after each timeout, with growing waits, until its deadline, then the saga
// is failed for an operator and NOT compensated: no compensation is sent for the steps
// before it. When the participant comes back it executes the charge at most
// once and its late answers are journaled and ignored.
func TestTimeoutAtPivotFailsWithoutCompensating(t *testing.T) {
	t.Parallel()
	// Timeouts are unknown outcomes: the pivot is re-sent (each wait is the
	// timeout plus a growing backoff) until its deadline, then the saga is
	// failed for an operator, never compensated.
	const n = 6
	const deadline = 1500 * time.Millisecond
	e := newEnv(t, envOpts{orders: n, seed: 42, override: func(r *saga.Registry) error {
		return r.Override(orderapi.SagaType, orderapi.StepChargePayment, saga.StepOverride{Timeout: 200 * time.Millisecond, Deadline: deadline,
			Retry: saga.RetryPolicy{InitialInterval: 30 * time.Millisecond, MaxInterval: 60 * time.Millisecond, MaxAttempts: 3}})
	}})
	ctx := testkit.Context(t, 2*time.Minute)
	e.run("orchestrator", e.service(orchestrator.DefaultRun).Run)
	e.runParticipants(e.participants(), orderapi.Payment)
	e.startAll(ctx)
	e.waitTerminal(settle)
	payTopic := e.prefix + orderapi.Payment + ".commands"
	charged := forwardsBySaga(e.sentOn(payTopic), orderapi.StepChargePayment, message.Forward)
	if len(charged) == 0 {
		t.Fatal("no saga reached the pivot")
	}
	var compensations []sent
	for _, p := range []string{orderapi.Inventory, orderapi.Coupon} {
		for _, s := range e.sentOn(e.prefix + p + ".commands") {
			if s.cmd.Action == message.Compensate {
				if _, atPivot := charged[s.cmd.SagaID]; atPivot {
					compensations = append(compensations, s)
				}
			}
		}
	}
	if len(compensations) != 0 {
		t.Fatalf("%d compensations sent for sagas whose pivot outcome was unknown, want none (first: %+v)", len(compensations), compensations[0].cmd)
	}
	total := 0
	for id, fw := range charged {
		total += len(fw)
		// 200 ms per wait plus 30-60 ms of backoff: between 2 and 7 sends
		// fit in the 1.5 s deadline; timeouts never count as attempts.
		if len(fw) < 2 || len(fw) > 7 {
			t.Fatalf("saga %s: pivot sent %d times before its %s deadline, want 2 to 7", id, len(fw), deadline)
		}
		for k, s := range fw {
			if s.cmd.Attempt != k+1 {
				t.Fatalf("saga %s: send %d carries attempt %d", id, k+1, s.cmd.Attempt)
			}
		}
		in, _, err := e.engine.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if in.State != saga.Failed {
			t.Fatalf("saga %s is %s after its pivot got no answer, want failed", id, in.State)
		}
	}
	// The payment participant comes back: one charge per saga at most, the
	// late answers change nothing.
	late := e.metric("sagaflow_late_replies_total")
	e.runParticipants(e.participants(), orderapi.Inventory, orderapi.Coupon, orderapi.Shipping, orderapi.Points)
	testkit.Eventually(t, settle, "every pivot copy reached the payment participant", func() (bool, error) {
		return e.count(`SELECT count(*) FROM `+e.schemas.Payment+`.inbox`) >= total, nil
	})
	testkit.Eventually(t, settle, "late pivot answers journaled", func() (bool, error) {
		return e.metric("sagaflow_late_replies_total") >= late+float64(len(charged)), nil
	})
	if got := e.count(`SELECT count(*) FROM `+e.schemas.Orchestrator+`.sagas WHERE state = 'failed' AND id = ANY($1)`, keys(charged)); got != len(charged) {
		t.Fatalf("%d of %d sagas still failed after the late pivot answers", got, len(charged))
	}
	if max := e.count(`SELECT coalesce(max(c), 0) FROM (SELECT count(*) c FROM ` + e.schemas.Payment + `.barrier WHERE action = 'forward' GROUP BY saga_id) x`); max > 1 {
		t.Fatalf("a saga was charged %d times", max)
	}
	e.checkInvariants(true)
}

func keys[V any](m map[uuid.UUID]V) []uuid.UUID {
	out := make([]uuid.UUID, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// A post-pivot step whose participant keeps answering retry is re-sent with
// growing, capped backoff (each gap at least the policy's backoff for that
// attempt), the saga is flagged after Retry.MaxAttempts (status and
// sagaflow_sagas_flagged_total) while it keeps retrying, and it completes
// when the participant recovers.
func TestRetryAfterPivotBacksOffFlagsAndCompletes(t *testing.T) {
	t.Parallel()
	const n, flagAfter = 6, 4
	policy := saga.RetryPolicy{InitialInterval: 40 * time.Millisecond, MaxInterval: 300 * time.Millisecond, Multiplier: 2, MaxAttempts: flagAfter}
	e := newEnv(t, envOpts{orders: n, seed: 43, override: func(r *saga.Registry) error {
		return r.Override(orderapi.SagaType, orderapi.StepCreateShipment, saga.StepOverride{Retry: policy})
	}})
	ctx := testkit.Context(t, 2*time.Minute)
	eff := e.stepDef(orderapi.StepCreateShipment).Retry
	e.run("orchestrator", e.service(orchestrator.DefaultRun).Run)
	e.runParticipants(e.participants(), orderapi.Shipping)
	var answered atomic.Int64
	down := e.run("shipping answering retry", e.flaky(orderapi.Shipping, orderapi.StepCreateShipment, busy(&answered), nil).Run)
	e.startAll(ctx)
	const want = flagAfter + 4 // attempts to watch: past the flag and past the cap
	topic := e.prefix + orderapi.Shipping + ".commands"
	var byID map[uuid.UUID][]sent
	testkit.Eventually(t, settle, "every saga past the pivot retried its shipment and flagged", func() (bool, error) {
		byID = forwardsBySaga(e.sentOn(topic), orderapi.StepCreateShipment, message.Forward)
		open := e.count(`SELECT count(*) FROM `+e.schemas.Orchestrator+`.sagas WHERE state = 'running' AND current_step <> $1`, orderapi.StepCreateShipment)
		flagged := e.count(`SELECT count(*) FROM `+e.schemas.Orchestrator+`.sagas WHERE state = 'running' AND current_step = $1 AND flag <> ''`, orderapi.StepCreateShipment)
		if open != 0 || len(byID) == 0 || flagged != len(byID) {
			return false, nil
		}
		for _, fw := range byID {
			if len(fw) < want {
				return false, nil
			}
		}
		return true, nil
	})
	for id, fw := range byID {
		for k := 1; k < want; k++ {
			gap := fw[k].cmd.SentAt.Sub(fw[k-1].cmd.SentAt)
			min := saga.Backoff(eff, id, orderapi.StepCreateShipment, k)
			if gap < min {
				t.Fatalf("saga %s: attempt %d came %s after attempt %d, sooner than its backoff %s", id, k+1, gap, k, min)
			}
			if min > eff.MaxInterval {
				t.Fatalf("saga %s: backoff %s of attempt %d is over the cap %s", id, min, k, eff.MaxInterval)
			}
		}
		// Growing: the backoff before the 4th send is at least twice that
		// before the 2nd (jitter takes at most half), and the late ones sit
		// at the cap.
		if b1, b3 := saga.Backoff(eff, id, orderapi.StepCreateShipment, 1), saga.Backoff(eff, id, orderapi.StepCreateShipment, 3); b3 < b1*2 {
			t.Fatalf("saga %s: backoff does not grow: attempt 1 %s, attempt 3 %s", id, b1, b3)
		}
		in, _, err := e.engine.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if in.State != saga.Running || in.Flag == "" || stepOf(in, orderapi.StepCreateShipment).Attempts < want {
			t.Fatalf("saga %s: %s flag %q attempts %d, want running, flagged, >= %d attempts", id, in.State, in.Flag, stepOf(in, orderapi.StepCreateShipment).Attempts, want)
		}
	}
	if got := e.metric("sagaflow_sagas_flagged_total"); got < float64(len(byID)) {
		t.Fatalf("sagaflow_sagas_flagged_total = %v, want >= %d", got, len(byID))
	}
	// Recovery: the real shipping participant takes over and every saga
	// completes (nothing was recorded by the retry answers).
	down.stop(t)
	e.runParticipants(e.participants(), orderapi.Inventory, orderapi.Coupon, orderapi.Payment, orderapi.Points)
	e.waitTerminal(settle)
	rep := e.checkInvariants(false)
	if rep.Completed != len(byID) {
		t.Fatalf("report %+v: want the %d sagas that passed the pivot completed", rep, len(byID))
	}
	if answered.Load() < int64(want*len(byID)) {
		t.Fatalf("the flaky participant answered %d commands, want >= %d", answered.Load(), want*len(byID))
	}
}

// A compensation that keeps answering retry is re-sent with backoff until it
// succeeds; after CompRetry.MaxAttempts the saga is flagged while it keeps
// retrying, compensations stay in reverse order (nothing before that step
// is compensated meanwhile), and the saga ends compensated once the
// participant recovers. The coupon stand-in "locks" without an effect and
// answers retry to every unlock; a payment stand-in declines every charge
// so that every saga past the coupon compensates.
func TestCompensationRetriedUntilItSucceedsAndFlagged(t *testing.T) {
	t.Parallel()
	const n = 5
	e := newEnv(t, envOpts{orders: n, seed: 44, override: func(r *saga.Registry) error {
		return r.Override(orderapi.SagaType, orderapi.StepLockCoupon, saga.StepOverride{
			Retry: saga.RetryPolicy{InitialInterval: 20 * time.Millisecond, MaxInterval: 80 * time.Millisecond}})
	}})
	ctx := testkit.Context(t, 2*time.Minute)
	comp := e.stepDef(orderapi.StepLockCoupon).CompRetry
	flagAfter := comp.MaxAttempts
	e.run("orchestrator", e.service(orchestrator.DefaultRun).Run)
	e.runParticipants(e.participants(), orderapi.Coupon, orderapi.Payment)
	var unlocks atomic.Int64
	lockNoEffect := func(context.Context, pgx.Tx, message.Command) (participants.Result, error) {
		return participants.Success(orderapi.LockCouponResult{}), nil
	}
	decline := func(context.Context, pgx.Tx, message.Command) (participants.Result, error) {
		return participants.Fail("declined (test)"), nil
	}
	down := e.run("coupon answering retry to unlocks", e.flaky(orderapi.Coupon, orderapi.StepLockCoupon, lockNoEffect, busy(&unlocks)).Run)
	e.run("payment declining", e.flaky(orderapi.Payment, orderapi.StepChargePayment, decline, nil).Run)
	e.startAll(ctx)
	var atCoupon int
	testkit.Eventually(t, settle, "every saga past the coupon compensating it, flagged", func() (bool, error) {
		atCoupon = 0
		for _, in := range e.instances() {
			s := stepOf(in, orderapi.StepLockCoupon)
			switch {
			case in.State == saga.Running:
				return false, nil
			case s.Attempts == 0:
				continue // out of stock: compensated before the coupon
			case in.State != saga.Compensating || in.Flag == "" || s.CompAttempts <= flagAfter:
				return false, nil
			}
			atCoupon++
		}
		return atCoupon > 0, nil
	})
	comps := forwardsBySaga(e.sentOn(e.prefix+orderapi.Coupon+".commands"), orderapi.StepLockCoupon, message.Compensate)
	if len(comps) != atCoupon {
		t.Fatalf("compensations sent for %d sagas, want %d", len(comps), atCoupon)
	}
	for id, cs := range comps {
		if len(cs) <= flagAfter {
			t.Fatalf("saga %s: %d compensation sends, want more than %d", id, len(cs), flagAfter)
		}
		for k := 1; k < len(cs); k++ {
			if gap, min := cs[k].cmd.SentAt.Sub(cs[k-1].cmd.SentAt), saga.Backoff(comp, id, orderapi.StepLockCoupon+"/compensate", k); gap < min {
				t.Fatalf("saga %s: compensation %d sent %s after the previous, sooner than its backoff %s", id, k+1, gap, min)
			}
		}
		// Reverse order, one at a time: reserve-inventory waits.
		in, _, err := e.engine.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if s := stepOf(in, orderapi.StepReserveInventory); s.CompAttempts != 0 {
			t.Fatalf("saga %s: reserve-inventory compensated (%d sends) before lock-coupon's compensation succeeded", id, s.CompAttempts)
		}
	}
	if got := e.metric("sagaflow_sagas_flagged_total"); got < float64(atCoupon) {
		t.Fatalf("sagaflow_sagas_flagged_total = %v, want >= %d", got, atCoupon)
	}
	if unlocks.Load() <= int64(flagAfter*atCoupon) {
		t.Fatalf("the coupon stand-in answered %d unlocks, want more than %d", unlocks.Load(), flagAfter*atCoupon)
	}
	// Recovery: the real coupon participant answers the next unlock.
	down.stop(t)
	e.runParticipants(e.participants(), orderapi.Inventory, orderapi.Payment, orderapi.Shipping, orderapi.Points)
	e.waitTerminal(settle)
	rep := e.checkInvariants(false)
	if rep.Compensated != n {
		t.Fatalf("report %+v: want all %d compensated", rep, n)
	}
}
