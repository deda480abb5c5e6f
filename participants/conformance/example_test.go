package conformance_test

import (
	"testing"

	"github.com/sagaflow/sagaflow/participants/conformance"
)

// A participant's own test runs the kit against the participant's binary:
// the kit starts it with the SAGAFLOW_* environment (brokers, database,
// name, reply topic, keys), drives its conformance step, and reports every
// duty it breaks as a test error.
func ExampleRun() {
	var t *testing.T // the test's own
	conformance.Run(t, conformance.Config{
		Participant: "hotel",
		Command:     "go run ./cmd/hotel-participant",
	})
}
