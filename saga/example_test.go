package saga_test

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/saga"
)

// Example defines a 3-step transfer saga (debit before the pivot, credit as
// the pivot, a notification after it), drives it through Decide, and shows
// that Build rejects a definition that breaks the pivot rules.
func Example() {
	type transfer struct {
		From, To string
		Cents    int64
	}
	debit := func(t transfer) (any, error) { return map[string]any{"account": t.From, "cents": t.Cents}, nil }
	credit := func(t transfer) (any, error) { return map[string]any{"account": t.To, "cents": t.Cents}, nil }

	def, err := saga.Definition[transfer]{
		Name: "transfer",
		Steps: []saga.Step[transfer]{
			{Name: "debit", Participant: "ledger", Kind: saga.Compensable, Command: debit, Compensation: debit, Timeout: 5 * time.Second},
			{Name: "credit", Participant: "ledger", Kind: saga.Pivot, Command: credit},
			{Name: "notify", Participant: "mailer", Kind: saga.Retryable, Command: credit},
		},
	}.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s v%d, pivot %q\n", def.Name, def.Version, def.Steps[def.Pivot].Name)

	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	data, _ := json.Marshal(transfer{From: "alice", To: "bob", Cents: 500})
	in := saga.NewInstance(def, uuid.MustParse("00000000-0000-0000-0000-000000000001"), "tx-1", "tx-1", data, now)
	d, _ := saga.Decide(def, in, saga.Event{Kind: saga.EventStart, At: now})
	cmd := d.Send[0].Command
	fmt.Printf("sent %s %s/%s attempt %d: %s\n", d.Send[0].Participant, cmd.Step, cmd.Action, cmd.Attempt, cmd.Payload)

	// The debit fails: nothing was done before it, so the saga is compensated.
	reply := &message.Reply{MessageID: uuid.New(), InReplyTo: cmd.MessageID, SagaID: cmd.SagaID, Step: cmd.Step, Action: cmd.Action, Outcome: message.Failure, Reason: "insufficient funds"}
	d, _ = saga.Decide(def, d.Next, saga.Event{Kind: saga.EventReply, At: now.Add(time.Second), Reply: reply})
	fmt.Printf("%s -> %s (%s: %s)\n", d.Journal[0].From, d.Next.State, d.Journal[0].Event, d.Journal[0].Reason)

	// A compensable step after the pivot is refused when the definition is built.
	_, err = saga.Definition[transfer]{
		Name: "transfer",
		Steps: []saga.Step[transfer]{
			{Name: "credit", Participant: "ledger", Kind: saga.Pivot, Command: credit},
			{Name: "debit", Participant: "ledger", Kind: saga.Compensable, Command: debit, Compensation: debit},
		},
	}.Build()
	fmt.Println(err)
	// Output:
	// transfer v1, pivot "credit"
	// sent ledger debit/forward attempt 1: {"account":"alice","cents":500}
	// running -> compensated (step failed: insufficient funds)
	// saga definition "transfer", step "debit": is compensable but runs after the pivot "credit": steps after the pivot must be retryable
}
