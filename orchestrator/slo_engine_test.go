package orchestrator_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

// A place-order with a one-minute window: a saga finished within it counts
// as met, one that took longer as missed.
func TestSLOCountsFinishedSagas(t *testing.T) {
	t.Parallel()
	env := setupEngineWith(t, func(c *orchestrator.EngineConfig) {
		c.SLO = orchestrator.SLO{orderapi.SagaType: time.Minute}
	})
	finish := func(key string, late time.Duration) {
		t.Helper()
		id := startToShipment(t, env, key)
		env.clock.advance(late)
		mustReply(t, env, lastCommand(t, env), message.Success, orderapi.CreateShipmentResult{ShipmentID: "s"})
		mustReply(t, env, lastCommand(t, env), message.Success, orderapi.AwardPointsResult{Balance: 1})
		mustReply(t, env, lastCommand(t, env), message.Success, orderapi.ConfirmStockResult{Sold: 1})
		if in, _ := get(t, env, id); in.State != saga.Completed {
			t.Fatalf("saga %s is %s, want completed", key, in.State)
		}
	}
	finish("o-fast", 10*time.Second)
	finish("o-slow", 2*time.Minute)
	finish("o-slow-2", 3*time.Minute)
	for _, want := range []struct {
		result string
		n      float64
	}{{orchestrator.SLOMet, 1}, {orchestrator.SLOMissed, 2}} {
		got, err := testutil.GatherAndCount(env.reg, "sagaflow_sagas_slo_total")
		if err != nil || got != 2 {
			t.Fatalf("sagaflow_sagas_slo_total has %d series (%v), want met and missed", got, err)
		}
		mfs, err := env.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var v float64 = -1
		for _, mf := range mfs {
			if mf.GetName() != "sagaflow_sagas_slo_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "result" && l.GetValue() == want.result {
						v = m.GetCounter().GetValue()
					}
				}
			}
		}
		if v != want.n {
			t.Errorf("sagaflow_sagas_slo_total{result=%q} = %v, want %v", want.result, v, want.n)
		}
	}
}
