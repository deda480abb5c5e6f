package saga_test

import (
	"errors"
	"fmt"
	"strings"
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
	// place-order v2, pivot "charge-payment"
	//   reserve-inventory compensable -> inventory.commands (timeout 10s, compensable true)
	//   lock-coupon       compensable -> coupon.commands (timeout 10s, compensable true)
	//   charge-payment    pivot       -> payment.commands (timeout 10s, compensable false)
	//   create-shipment   retryable   -> shipping.commands (timeout 10s, compensable false)
	//   award-points      retryable   -> points.commands (timeout 10s, compensable false)
	//   confirm-stock     retryable   -> inventory.commands (timeout 10s, compensable false)
	// true
	// saga definition "book-room", step "email": runs after the pivot and must not have a Compensation
}

// ExampleParallel prints the units of the reference book-trip definition
// (parallel groups, a conditional wait for an event, the pivot), then shows
// Build refusing the pivot inside a group, naming the saga and the group.
func ExampleParallel() {
	def, err := steps.BookTripDefinition().Build()
	if err != nil {
		panic(err)
	}
	for _, u := range def.Units {
		var names []string
		for _, s := range def.Steps[u.Start:u.End] {
			n := s.Name
			if s.Conditional {
				n += " (when)"
			}
			if s.Kind == saga.Wait {
				n += fmt.Sprintf(" waits for %q, on deadline %s", s.Event, s.OnDeadline)
			}
			names = append(names, n)
		}
		if u.Group != "" {
			fmt.Printf("group %s: %s\n", u.Group, strings.Join(names, ", "))
		} else {
			fmt.Println(names[0])
		}
	}

	type trip struct{}
	cmd := func(trip) (any, error) { return struct{}{}, nil }
	_, err = saga.Definition[trip]{
		Name: "bad-trip",
		Steps: saga.Parallel("reserve", nil,
			saga.Step[trip]{Name: "reserve", Participant: "hotels", Kind: saga.Compensable, Command: cmd, Compensation: cmd},
			saga.Step[trip]{Name: "charge", Participant: "payment", Kind: saga.Pivot, Command: cmd},
		),
	}.Build()
	fmt.Println(err)
	// Output:
	// group reserve: reserve-flight, reserve-hotel, reserve-car (when)
	// await-approval (when) waits for "approval", on deadline compensate
	// charge-payment
	// group confirm: confirm-flight, confirm-hotel, confirm-car (when)
	// saga definition "bad-trip", group "reserve", step "charge": is the pivot: the point of no return is never inside a parallel group
}
