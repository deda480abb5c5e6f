package payment_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/participants"
	"github.com/sagaflow/sagaflow/participants/external"
	"github.com/sagaflow/sagaflow/participants/external/fakeprovider"
	"github.com/sagaflow/sagaflow/participants/participanttest"
	"github.com/sagaflow/sagaflow/participants/payment"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

type providerEnv struct {
	t        *testing.T
	kit      *participanttest.Kit
	provider *fakeprovider.Server
	clock    *clock
	ctx      context.Context
	caller   *external.Caller
}

func newProviderEnv(t *testing.T) *providerEnv {
	t.Helper()
	e := &providerEnv{t: t, provider: fakeprovider.Start(10_000), clock: &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}, ctx: testkit.Context(t, time.Minute)}
	t.Cleanup(e.provider.Close)
	pool := testkit.Pool(t)
	p, err := participants.New(pool, &participants.Config{Name: "payment"})
	if err != nil {
		t.Fatal(err)
	}
	if e.caller, err = payment.RegisterProvider(p, pool, e.options()); err != nil {
		t.Fatal(err)
	}
	must := testkit.MustSets(t)
	testkit.Migrate(t, pool, must(p.Migrations()), must(payment.ProviderMigrations(p.Schema())))
	e.kit = participanttest.Attach(t, pool, p)
	return e
}

func (e *providerEnv) options() payment.ProviderOptions {
	return payment.ProviderOptions{URL: e.provider.URL(), External: external.Config{
		Now: e.clock.Now, CallTimeout: 100 * time.Millisecond, Lease: time.Second, BackoffInitial: time.Second, BackoffMax: time.Second,
	}}
}

func (e *providerEnv) charge(cents int64) participants.Ref {
	e.t.Helper()
	saga := uuid.New()
	cmd := participanttest.Command(e.t, saga, orderapi.StepChargePayment, message.Forward, 1,
		orderapi.ChargePayment{OrderID: "o-" + saga.String()[:8], Customer: "cus", AmountCents: cents})
	participanttest.WantReply(e.t, e.kit.Send(cmd)[0], message.Accepted, "")
	return participants.RefOf(cmd)
}

func (e *providerEnv) recorded(ref participants.Ref) message.QueryAnswer {
	e.t.Helper()
	a := e.kit.Send(participanttest.Command(e.t, ref.SagaID, orderapi.StepChargePayment, message.Query, 1, nil))[0]
	ans, err := message.DecodeQueryAnswer(a.Reply.Payload)
	if err != nil {
		e.t.Fatalf("query answer %+v: %v", a, err)
	}
	return ans
}

func (e *providerEnv) ledger() map[uuid.UUID]int {
	e.t.Helper()
	n, err := payment.Charges(e.ctx, e.kit.Pool, e.kit.P.Schema())
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

func (e *providerEnv) runOnce(ctx context.Context, want int) {
	e.t.Helper()
	n, err := e.caller.RunOnce(ctx)
	if err != nil || n != want {
		e.t.Fatalf("RunOnce: %d calls, %v; want %d", n, err, want)
	}
}

// The provider charges but answers after the call's timeout; the next
// attempt's worker dies with the call at the provider; the one after it
// settles the step: the customer is charged exactly once (the provider's
// own count and the ledger), the payment id is the provider's, and a copy
// of the command gets the same answer.
func TestProviderChargesOnceOverTimeoutAndCrash(t *testing.T) {
	t.Parallel()
	e := newProviderEnv(t)
	ref := e.charge(500)
	e.provider.SetDelay(300 * time.Millisecond)
	e.runOnce(e.ctx, 1) // timed out after the charge
	if got := e.recorded(ref).State; got != message.QueryAccepted {
		t.Fatalf("after a timeout the step is %s, want accepted", got)
	}
	e.clock.Advance(time.Second)
	e.provider.SetDelay(5 * time.Second)
	ctx, crash := context.WithCancel(e.ctx)
	select {
	case <-e.provider.Arrived(): // a signal of an earlier call
	default:
	}
	go func() {
		select {
		case <-e.provider.Arrived():
		case <-ctx.Done():
		}
		crash() // the worker dies with the call at the provider
	}()
	e.runOnce(ctx, 1)
	e.provider.SetDelay(0)
	e.runOnce(e.ctx, 0) // still leased by the dead worker
	e.clock.Advance(2 * time.Second)
	e.runOnce(e.ctx, 1)
	ans := e.recorded(ref)
	var out orderapi.ChargePaymentResult
	if ans.State != message.QueryDone || json.Unmarshal(ans.Output, &out) != nil || out.PaymentID != "ch_1" {
		t.Fatalf("the step is %s %s, want done with the provider's charge ch_1", ans.State, ans.Output)
	}
	if n, c := e.provider.Charged(external.IdempotencyKey(ref)), e.provider.Calls(); n != 1 || c != 3 || e.provider.Charges() != 1 {
		t.Fatalf("charged %d times (%d in all) in %d calls, want once in 3", n, e.provider.Charges(), c)
	}
	if n := e.ledger()[ref.SagaID]; n != 1 {
		t.Fatalf("%d ledger rows, want 1", n)
	}
	copyCmd := participanttest.Command(t, ref.SagaID, orderapi.StepChargePayment, message.Forward, 2, orderapi.ChargePayment{OrderID: "x", Customer: "cus", AmountCents: 500})
	a := e.kit.Send(copyCmd)[0]
	if a.Reply.Outcome != message.Success || json.Unmarshal(a.Reply.Payload, &out) != nil || out.PaymentID != "ch_1" {
		t.Fatalf("a copy of the command: %s %s, want success ch_1", a.Reply.Outcome, a.Reply.Payload)
	}
}

// Over the limit the provider declines: the step fails with
// payment_declined and nothing is charged.
func TestProviderDeclines(t *testing.T) {
	t.Parallel()
	e := newProviderEnv(t)
	ref := e.charge(50_000)
	e.runOnce(e.ctx, 1)
	if got := e.recorded(ref).State; got != message.QueryFailed {
		t.Fatalf("a declined charge: %s, want failed", got)
	}
	if e.provider.Charges() != 0 || len(e.ledger()) != 0 {
		t.Fatalf("%d charges, ledger %v; want none", e.provider.Charges(), e.ledger())
	}
}

// A query of the accepted step (the orchestrator's, once its accepted
// deadline passed) reaches the provider: a charge whose answer was lost
// completes the step; a charge never made fails it (the saga compensates)
// and is never made afterwards.
func TestProviderQueryLooksTheChargeUp(t *testing.T) {
	t.Parallel()
	e := newProviderEnv(t)
	lost := e.charge(600)
	e.provider.SetDelay(300 * time.Millisecond)
	e.runOnce(e.ctx, 1)
	e.provider.SetDelay(0)
	never := e.charge(700)
	e.provider.SetDown(true)
	e.runOnce(e.ctx, 1)
	e.provider.SetDown(false)
	for _, ref := range []participants.Ref{lost, never} {
		if got := e.recorded(ref).State; got != message.QueryAccepted {
			t.Fatalf("query of %s: %s, want accepted", ref, got)
		}
	}
	e.runOnce(e.ctx, 2) // the lookups, due at once
	if got := e.recorded(lost).State; got != message.QueryDone {
		t.Fatalf("the charge whose answer was lost: %s, want done", got)
	}
	if got := e.recorded(never).State; got != message.QueryFailed {
		t.Fatalf("the charge never made: %s, want failed", got)
	}
	e.clock.Advance(time.Hour)
	e.runOnce(e.ctx, 0)
	if e.provider.Charges() != 1 || e.provider.Charged(external.IdempotencyKey(never)) != 0 {
		t.Fatalf("%d charges (the one never made: %d), want 1 and 0", e.provider.Charges(), e.provider.Charged(external.IdempotencyKey(never)))
	}
	if l := e.ledger(); l[lost.SagaID] != 1 || l[never.SagaID] != 0 {
		t.Fatalf("ledger %v, want the lost answer's charge only", l)
	}
}
