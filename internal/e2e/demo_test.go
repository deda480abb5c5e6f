// Package e2e holds end-to-end tests: the demo workload with orchestrator and
// participants in separate component groups, and the real binary run as
// separate OS processes (dev-broker, serve, participants) driven over HTTP.
// Both run on real Postgres and the Kafka protocol (in-process kfake, or the
// brokers in KAFKA_BROKERS).
package e2e

import (
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/sagaflow/sagaflow/internal/demo"
	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/internal/workload"
	"github.com/sagaflow/sagaflow/steps/orderapi"
	"github.com/sagaflow/sagaflow/steps/tripapi"
)

// TestDemoWorkloadSeparateGroups runs the demo's mixed workload (orders and
// trips, approvals through the events API): the orchestrator service and
// the reference participants run as component groups with
// their own pools, sharing nothing but Postgres and the broker, and the
// invariants are checked from the participants' own tables.
func TestDemoWorkloadSeparateGroups(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 3*time.Minute)
	dbURL := testkit.Database(t)
	brokers := testkit.Brokers(t)
	log := slog.New(slog.DiscardHandler)
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	sum, err := demo.Run(ctx, demo.Config{
		DatabaseURL: dbURL,
		Brokers:     brokers,
		Mix: workload.Mix{
			Orders: 300, Seed: 7, Trips: 80,
			OutOfStockRate:  workload.OutOfStockRateDefault,
			CouponTakenRate: workload.CouponTakenRateDefault,
			DeclineRate:     workload.DeclineRateDefault,
		},
		ShippingFailRate: 0.2,
		PointsFailRate:   0.2,
		Concurrency:      8,
		Timeout:          2 * time.Minute,
		Logger:           log,
	})
	if err != nil {
		t.Fatalf("demo.Run: %v", err)
	}
	t.Logf("demo: %+v", sum)
	if sum.Orders != 300 {
		t.Errorf("orders = %d, want 300", sum.Orders)
	}
	if sum.NonTerminal != 0 {
		t.Errorf("%d sagas not terminal", sum.NonTerminal)
	}
	if !sum.InvariantsOK || len(sum.Violations) > 0 {
		t.Errorf("invariants violated: %v", sum.Violations)
	}
	if sum.Completed == 0 || sum.Compensated == 0 {
		t.Errorf("completed=%d compensated=%d: want both non-zero with the failure mix on", sum.Completed, sum.Compensated)
	}
	if got := sum.Completed + sum.Compensated + sum.Failed; got != sum.Orders+sum.Trips {
		t.Errorf("completed+compensated+failed = %d, want %d orders + %d trips", got, sum.Orders, sum.Trips)
	}
	// Every end is on the outcome topic exactly once (the demo checks each
	// record against its saga; here the count).
	if sum.Outcomes != sum.Orders+sum.Trips {
		t.Errorf("%d finished records on the outcome topic, want one per saga: %d", sum.Outcomes, sum.Orders+sum.Trips)
	}
	for typ, want := range map[string]int{orderapi.SagaType: 300, tripapi.SagaType: 80} {
		c := sum.Sagas[typ]
		if c == nil || c.Sagas != want || c.Completed == 0 || c.Compensated == 0 {
			t.Errorf("%s sagas: %+v, want %d with both completed and compensated ones", typ, c, want)
		}
	}
}

// TestDemoWorkloadPaymentProvider: the demo with the payment participant
// charging through the fake provider (answer later, external calls): every
// saga terminal, the invariants hold, and the provider made exactly the
// charges the ledger holds, one per completed order.
func TestDemoWorkloadPaymentProvider(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 3*time.Minute)
	sum, err := demo.Run(ctx, demo.Config{
		DatabaseURL: testkit.Database(t),
		Brokers:     testkit.Brokers(t),
		Mix: workload.Mix{
			Orders: 60, Seed: 11,
			OutOfStockRate:  workload.OutOfStockRateDefault,
			CouponTakenRate: workload.CouponTakenRateDefault,
			DeclineRate:     workload.DeclineRateDefault,
		},
		Concurrency:     8,
		Timeout:         2 * time.Minute,
		Logger:          slog.New(slog.DiscardHandler),
		PaymentProvider: true,
	})
	if err != nil {
		t.Fatalf("demo.Run: %v", err)
	}
	if sum.NonTerminal != 0 || !sum.InvariantsOK || len(sum.Violations) > 0 {
		t.Fatalf("demo: %d not terminal, invariants OK %v: %v", sum.NonTerminal, sum.InvariantsOK, sum.Violations)
	}
	if sum.Completed == 0 || sum.ProviderCharges != sum.Completed {
		t.Fatalf("provider charges %d, completed orders %d: want one charge per completed order", sum.ProviderCharges, sum.Completed)
	}
}
