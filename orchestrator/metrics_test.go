package orchestrator_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sagaflow/sagaflow/orchestrator"
)

// A second NewMetrics on one registry must record into the registered
// collectors (the demo and a test may both create them), and InitTypes
// makes the per-type series visible at zero.
func TestMetricsShareRegistrationAndInitTypes(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	if _, err := orchestrator.NewMetrics(reg, "sagaflow"); err != nil {
		t.Fatal(err)
	}
	m2, err := orchestrator.NewMetrics(reg, "sagaflow")
	if err != nil {
		t.Fatalf("second NewMetrics on the same registry: %v", err)
	}
	m2.InitTypes("place-order")
	want := `
# HELP sagaflow_illegal_transitions_total Events the transition table does not allow, journaled and ignored, by saga type.
# TYPE sagaflow_illegal_transitions_total counter
sagaflow_illegal_transitions_total{type="place-order"} 0
# HELP sagaflow_sagas_finished_total Sagas that reached a terminal state (completed, compensated, failed), by type and state.
# TYPE sagaflow_sagas_finished_total counter
sagaflow_sagas_finished_total{state="compensated",type="place-order"} 0
sagaflow_sagas_finished_total{state="completed",type="place-order"} 0
sagaflow_sagas_finished_total{state="failed",type="place-order"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sagaflow_illegal_transitions_total", "sagaflow_sagas_finished_total"); err != nil {
		t.Errorf("series created through the second Metrics are not exported: %v", err)
	}
	other := prometheus.NewRegistry()
	other.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "sagaflow", Name: "sagas_started_total", Help: "x"}))
	if _, err := orchestrator.NewMetrics(other, "sagaflow"); err == nil {
		t.Error("NewMetrics accepted a registry where sagas_started_total is another kind of collector")
	}
}
