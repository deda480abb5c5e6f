package saga_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps"
)

// ExampleDefinition_Build builds the reference place-order definition and
// prints its steps, kinds, participants and pivot; then shows Build
// refusing a step after the pivot that has a compensation.
func ExampleDefinition_Build() {
	def, err := steps.PlaceOrderDefinition().Build()
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s v%d, pivot %q\n", def.Name, def.Version, def.Steps[def.Pivot].Name)
	for _, s := range def.Steps {
		fmt.Printf("  %-17s %-11s -> %s.commands (timeout %s, compensable %t)\n",
			s.Name, s.Kind, s.Participant, s.Timeout, s.HasCompensation())
	}

	type booking struct{ Room string }
	cmd := func(b booking) (any, error) { return b, nil }
	_, err = saga.Definition[booking]{
		Name: "book-room",
		Steps: []saga.Step[booking]{
			{Name: "charge", Participant: "payment", Kind: saga.Pivot, Command: cmd},
			{Name: "email", Participant: "mailer", Kind: saga.Retryable, Command: cmd, Compensation: cmd, Timeout: time.Second},
		},
	}.Build()
	fmt.Println(errors.Is(err, saga.ErrInvalidDefinition))
	fmt.Println(err)
	// Output:
	// place-order v1, pivot "charge-payment"
	//   reserve-inventory compensable -> inventory.commands (timeout 10s, compensable true)
	//   lock-coupon       compensable -> coupon.commands (timeout 10s, compensable true)
	//   charge-payment    pivot       -> payment.commands (timeout 10s, compensable false)
	//   create-shipment   retryable   -> shipping.commands (timeout 10s, compensable false)
	//   award-points      retryable   -> points.commands (timeout 10s, compensable false)
	// true
	// saga definition "book-room", step "email": runs after the pivot and must not have a Compensation
}
