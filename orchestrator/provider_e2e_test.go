package orchestrator_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/participants/external"
	"github.com/sagaflow/sagaflow/participants/external/fakeprovider"
	"github.com/sagaflow/sagaflow/participants/inventory"
	"github.com/sagaflow/sagaflow/participants/payment"
	"github.com/sagaflow/sagaflow/participants/reference"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

// TestPaymentThroughProviderChargesOnce: place-order through the real
// pipeline with the payment participant charging through the fake
// provider (payment.RegisterProvider). The pivot's step timeout is 1 s;
// the provider charges on the first call but answers after the call's
// timeout, so the charge is made again with the same idempotency key:
// the pivot is answered accepted and never re-sent, the saga completes,
// and the customer is charged exactly once by the provider's own count
// and the ledger.
func TestPaymentThroughProviderChargesOnce(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	brokers := testkit.Brokers(t)
	prefix := "pp" + strings.ToLower(testkit.RandomSuffix(6)) + "."
	replyTopic := prefix + "saga.replies"
	provider := fakeprovider.Start(100_000)
	t.Cleanup(provider.Close)
	provider.SlowFirst(1, 2*time.Second)
	reg := saga.NewRegistry()
	if err := steps.Register(reg); err != nil {
		t.Fatal(err)
	}
	if err := reg.Override(orderapi.SagaType, orderapi.StepChargePayment, saga.StepOverride{Timeout: time.Second}); err != nil {
		t.Fatal(err)
	}
	svc, err := orchestrator.New(pool, reg, &orchestrator.Config{
		Brokers: brokers, Partitions: 1, GroupID: prefix + "orchestrator",
		Engine: orchestrator.EngineConfig{TopicPrefix: prefix, ReplyTopic: replyTopic, TimerInterval: 50 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	parts, err := reference.New(pool, reference.Options{Brokers: brokers, TopicPrefix: prefix, ReplyTopics: []string{replyTopic}, Partitions: 1,
		PaymentProvider: payment.ProviderOptions{URL: provider.URL(), External: external.Config{
			CallTimeout: 300 * time.Millisecond, BackoffInitial: 100 * time.Millisecond, PollInterval: 20 * time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testkit.Context(t, 2*time.Minute)
	if err := svc.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	if err := parts.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	if err := inventory.Seed(ctx, pool, reference.Options{}.Schema(orderapi.Inventory), map[string]int{"sku-apple": 10}); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	errc := make(chan error, 2)
	go func() { errc <- svc.Run(runCtx) }()
	go func() { errc <- parts.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		for range 2 {
			if err := <-errc; err != nil {
				t.Errorf("run: %v", err)
			}
		}
	})
	in, _, err := svc.Engine().Start(ctx, orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: "o-1", AggregateID: "o-1",
		Data: map[string]any{"order_id": "o-1", "customer": "c", "sku": "sku-apple", "qty": 1, "amount_cents": 1500}})
	if err != nil {
		t.Fatal(err)
	}
	var final saga.Instance
	var journal []saga.JournalEntry
	testkit.Eventually(t, 90*time.Second, "the order completed", func() (bool, error) {
		final, journal, err = svc.Engine().Get(ctx, in.ID)
		return err == nil && final.State == saga.Completed, err
	})
	pivot := final.Steps[2]
	if pivot.Name != orderapi.StepChargePayment || pivot.Attempts != 1 {
		t.Fatalf("pivot %s sent %d times, want once (accepted, never re-sent)", pivot.Name, pivot.Attempts)
	}
	var events []string
	for _, j := range journal {
		if j.Step == orderapi.StepChargePayment && !j.Ignored {
			events = append(events, j.Event)
		}
	}
	if len(events) != 2 || events[0] != saga.JournalStepAccepted || events[1] != saga.JournalStepSucceeded {
		t.Fatalf("charge-payment journal %v, want accepted then succeeded", events)
	}
	if provider.Charges() != 1 || provider.Calls() < 2 {
		t.Fatalf("the provider charged %d times in %d calls, want once in at least 2 (the first answer lost)", provider.Charges(), provider.Calls())
	}
	charges, err := payment.Charges(ctx, pool, reference.Options{}.Schema(orderapi.Payment))
	if err != nil || charges[in.ID] != 1 || len(charges) != 1 {
		t.Fatalf("ledger %v (%v), want one charge for the saga", charges, err)
	}
}
