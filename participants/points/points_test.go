package points

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/participants"
	"github.com/sagaflow/sagaflow/participants/internal/refstep"
	"github.com/sagaflow/sagaflow/participants/participanttest"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

const schema = "points"

type fixture = participanttest.Fixture[refstep.Handlers]

func setup(t *testing.T, opts Options) fixture {
	t.Helper()
	return participanttest.NewFixture(t, schema, Migrations, func(schema string) (refstep.Handlers, error) { return refstep.Build(step(schema, opts)) })
}

func cmd(t *testing.T, saga uuid.UUID, order, customer string, points int64, attempt int) message.Command {
	return participanttest.Command(t, saga, orderapi.StepAwardPoints, message.Forward, attempt,
		orderapi.AwardPoints{OrderID: order, Customer: customer, Points: points})
}

func award(t *testing.T, f fixture, c message.Command) int64 {
	t.Helper()
	res := participanttest.MustExec(t, f.Pool, f.H.Forward, c)
	participanttest.WantOutcome(t, res, message.Success, "")
	return participanttest.Payload[orderapi.AwardPointsResult](t, res).Balance
}

func TestAwardOncePerOrderAndAddUp(t *testing.T) {
	t.Parallel()
	f := setup(t, Options{})
	a, b, c := uuid.New(), uuid.New(), uuid.New()

	if got := award(t, f, cmd(t, a, "o1", "ann", 100, 1)); got != 100 {
		t.Fatalf("balance after o1 = %d, want 100", got)
	}
	// The same saga again, and another saga for the same order, add nothing.
	if got := award(t, f, cmd(t, a, "o1", "ann", 100, 2)); got != 100 {
		t.Fatalf("balance after repeating o1 = %d, want 100", got)
	}
	if got := award(t, f, cmd(t, b, "o1", "ann", 100, 1)); got != 100 {
		t.Fatalf("balance after another saga of o1 = %d, want 100", got)
	}
	// A new order adds to the balance.
	if got := award(t, f, cmd(t, c, "o2", "ann", 25, 1)); got != 125 {
		t.Fatalf("balance after o2 = %d, want 125", got)
	}
	if got := participanttest.Read(t, f.Pool, schema, Entries); len(got) != 2 || got[a] != 1 || got[c] != 1 {
		t.Fatalf("entries = %v, want one for %s and one for %s", got, a, c)
	}
	if got := participanttest.Read(t, f.Pool, schema, Balances); len(got) != 1 || got["ann"] != 125 {
		t.Fatalf("balances = %v, want ann=125", got)
	}
}

func TestConcurrentAwardsCountEachOrderOnce(t *testing.T) {
	t.Parallel()
	const orders, copies = 6, 3
	f := setup(t, Options{})
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	start := make(chan struct{})
	for o := range orders {
		for range copies {
			c := cmd(t, uuid.New(), fmt.Sprintf("o%d", o), "bob", 10, 1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				res, err := participanttest.Exec(testkit.Context(t, 30*time.Second), f.Pool, f.H.Forward, c)
				if err == nil && res.Outcome != message.Success {
					err = fmt.Errorf("outcome %s %s", res.Outcome, res.Reason)
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}()
		}
	}
	close(start)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("concurrent awards: %v", errs)
	}
	if got := participanttest.Read(t, f.Pool, schema, Entries); len(got) != orders {
		t.Fatalf("%d entries, want one per order (%d)", len(got), orders)
	}
	if got := participanttest.Read(t, f.Pool, schema, Balances)["bob"]; got != orders*10 {
		t.Fatalf("balance = %d, want %d", got, orders*10)
	}
}

func TestFailRate(t *testing.T) {
	t.Parallel()
	always := setup(t, Options{FailRate: 1, Seed: 3})
	saga := uuid.New()
	for attempt := 1; attempt <= 5; attempt++ {
		participanttest.WantOutcome(t, participanttest.MustExec(t, always.Pool, always.H.Forward, cmd(t, saga, "o1", "ann", 5, attempt)), message.Retry, orderapi.ReasonTransient)
	}
	if got := participanttest.Read(t, always.Pool, schema, Entries); len(got) != 0 {
		t.Fatalf("FailRate 1: entries = %v, want none", got)
	}
	if got := participanttest.Read(t, always.Pool, schema, Balances); len(got) != 0 {
		t.Fatalf("FailRate 1: balances = %v, want none", got)
	}
}

func TestInvalidPayloadsAndOptions(t *testing.T) {
	t.Parallel()
	f := setup(t, Options{})
	for name, c := range map[string]struct {
		field   string
		payload any
	}{
		"empty":           {"payload", nil},
		"not json":        {"payload", []byte(`{"points":"many"}`)},
		"no order":        {"order_id", orderapi.AwardPoints{Customer: "ann", Points: 1}},
		"no customer":     {"customer", orderapi.AwardPoints{OrderID: "o1", Points: 1}},
		"negative points": {"points", orderapi.AwardPoints{OrderID: "o1", Customer: "ann", Points: -1}},
	} {
		t.Run(name, func(t *testing.T) {
			participanttest.WantInvalid(t, f.Pool, f.H.Forward, participanttest.Command(t, uuid.New(), orderapi.StepAwardPoints, message.Forward, 1, c.payload), c.field)
		})
	}
	if got := participanttest.Read(t, f.Pool, schema, Entries); len(got) != 0 {
		t.Fatalf("entries after invalid commands = %v, want none", got)
	}

	p, err := participants.New(f.Pool, &participants.Config{Name: orderapi.Points})
	if err != nil {
		t.Fatalf("participants.New: %v", err)
	}
	if err := Register(p, Options{FailRate: 2}); err == nil || !strings.Contains(err.Error(), "FailRate") {
		t.Fatalf("Register with FailRate 2: err = %v, want an error naming FailRate", err)
	}
	if err := Register(p, Options{}); err != nil {
		t.Fatalf("Register: %v", err)
	}
}

func TestAwardBatchAnswersWhatAwardWouldInOrder(t *testing.T) {
	t.Parallel()
	f := setup(t, Options{})
	if got := award(t, f, cmd(t, uuid.New(), "o0", "ann", 10, 1)); got != 10 {
		t.Fatalf("balance before the batch = %d, want 10", got)
	}
	a1, b1, a2 := uuid.New(), uuid.New(), uuid.New()
	res := participanttest.ExecBatch(t, f.Pool, f.H.ForwardMany,
		cmd(t, a1, "o1", "ann", 100, 1), cmd(t, b1, "o2", "bob", 7, 1), cmd(t, a2, "o3", "ann", 25, 1))
	for i, want := range []int64{110, 7, 135} {
		participanttest.WantOutcome(t, res[i], message.Success, "")
		if got := participanttest.Payload[orderapi.AwardPointsResult](t, res[i]).Balance; got != want {
			t.Fatalf("result %d: balance %d, want %d (the balance one by one)", i, got, want)
		}
	}
	if got := participanttest.Read(t, f.Pool, schema, Balances); len(got) != 2 || got["ann"] != 135 || got["bob"] != 7 {
		t.Fatalf("balances = %v, want ann=135 bob=7", got)
	}

	// An order that has its entry is left to award; so is a batch holding
	// one saga twice (an error: the SDK declines it).
	res = participanttest.ExecBatch(t, f.Pool, f.H.ForwardMany, cmd(t, uuid.New(), "o4", "ann", 1, 1), cmd(t, uuid.New(), "o1", "ann", 100, 1))
	if res[0].Outcome != message.Success || res[1].Outcome == message.Success {
		t.Fatalf("batch with an existing order: outcomes %s, %s; want success, then left to award", res[0].Outcome, res[1].Outcome)
	}
	if got := participanttest.Read(t, f.Pool, schema, Balances)["ann"]; got != 135 {
		t.Fatalf("ann after the declined batch = %d, want 135 (not committed)", got)
	}
	tx, err := f.Pool.Begin(testkit.Context(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(testkit.Context(t, 5*time.Second)) }()
	twice := uuid.New()
	if _, err := f.H.ForwardMany(testkit.Context(t, 30*time.Second), tx, []message.Command{cmd(t, twice, "o5", "ann", 1, 1), cmd(t, twice, "o5", "ann", 1, 2)}); err == nil {
		t.Fatal("batch with one saga twice = nil error, want it declined")
	}
}
