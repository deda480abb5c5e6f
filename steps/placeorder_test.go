package steps_test

import (
	"testing"

	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

// New place-order sagas get version 2 (confirm-stock last); version 1
// stays registered so that sagas started before it finish on their steps.
func TestRegisterKeepsPlaceOrderV1ForSagasInFlight(t *testing.T) {
	t.Parallel()
	r := saga.NewRegistry()
	if err := steps.Register(r); err != nil {
		t.Fatal(err)
	}
	latest, ok := r.Latest(orderapi.SagaType)
	if !ok || latest.Version != 2 || len(latest.Steps) != 6 || latest.Steps[5].Name != orderapi.StepConfirmStock || latest.Steps[5].Kind != saga.Retryable {
		t.Fatalf("latest place-order = %+v; want v2 ending in retryable confirm-stock", latest)
	}
	v1, ok := r.Lookup(orderapi.SagaType, 1)
	if !ok || len(v1.Steps) != 5 || v1.Steps[4].Name != orderapi.StepAwardPoints {
		t.Fatalf("place-order v1 = %+v (%v); want its five steps, ending in award-points", v1, ok)
	}
	for i := range v1.Steps {
		if v1.Steps[i].Name != latest.Steps[i].Name || v1.Steps[i].Kind != latest.Steps[i].Kind {
			t.Fatalf("v1 step %d = %s %s, v2 has %s %s; want v2 to add a step only", i, v1.Steps[i].Name, v1.Steps[i].Kind, latest.Steps[i].Name, latest.Steps[i].Kind)
		}
	}
}
