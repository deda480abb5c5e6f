package shipping

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

const schema = "shipping"

type fixture = participanttest.Fixture[refstep.Handlers]

func setup(t *testing.T, opts Options) fixture {
	t.Helper()
	return participanttest.NewFixture(t, schema, Migrations, func(schema string) (refstep.Handlers, error) { return refstep.Build(step(schema, opts)) })
}

func cmd(t *testing.T, saga uuid.UUID, order string, attempt int) message.Command {
	return participanttest.Command(t, saga, orderapi.StepCreateShipment, message.Forward, attempt,
		orderapi.CreateShipment{OrderID: order, Customer: "ann", SKU: "sku-a", Qty: 2})
}

func TestAtMostOneShipmentPerOrder(t *testing.T) {
	t.Parallel()
	f := setup(t, Options{})
	a, b := uuid.New(), uuid.New()

	res := participanttest.MustExec(t, f.Pool, f.H.Forward, cmd(t, a, "o1", 1))
	participanttest.WantOutcome(t, res, message.Success, "")
	first := participanttest.Payload[orderapi.CreateShipmentResult](t, res).ShipmentID
	if _, err := uuid.Parse(first); err != nil {
		t.Fatalf("shipment id %q is not a uuid: %v", first, err)
	}
	// The same saga again, and another saga for the same order: same
	// shipment, no new row.
	for _, saga := range []uuid.UUID{a, b} {
		res := participanttest.MustExec(t, f.Pool, f.H.Forward, cmd(t, saga, "o1", 2))
		participanttest.WantOutcome(t, res, message.Success, "")
		if got := participanttest.Payload[orderapi.CreateShipmentResult](t, res).ShipmentID; got != first {
			t.Fatalf("saga %s: shipment id = %q, want the existing %q", saga, got, first)
		}
	}
	if got := participanttest.Read(t, f.Pool, schema, Shipments); len(got) != 1 || got[a] != 1 {
		t.Fatalf("shipments = %v, want one, by %s", got, a)
	}
}

func TestConcurrentSagasOfOneOrderShipOnce(t *testing.T) {
	t.Parallel()
	const sagas = 8
	f := setup(t, Options{})
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		ids  = map[string]int{}
		errs []error
	)
	start := make(chan struct{})
	for range sagas {
		c := cmd(t, uuid.New(), "hot-order", 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res, err := participanttest.Exec(testkit.Context(t, 30*time.Second), f.Pool, f.H.Forward, c)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			if res.Outcome != message.Success {
				errs = append(errs, fmt.Errorf("outcome %s %s", res.Outcome, res.Reason))
				return
			}
			ids[participanttest.Payload[orderapi.CreateShipmentResult](t, res).ShipmentID]++
		}()
	}
	close(start)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("concurrent create: %v", errs)
	}
	if len(ids) != 1 {
		t.Fatalf("sagas were answered shipments %v, want one shipment for all", ids)
	}
	if got := participanttest.Read(t, f.Pool, schema, Shipments); len(got) != 1 {
		t.Fatalf("shipments = %v, want exactly one row", got)
	}
}

func TestFailRateExtremes(t *testing.T) {
	t.Parallel()
	always := setup(t, Options{FailRate: 1, Seed: 7})
	saga := uuid.New()
	for attempt := 1; attempt <= 5; attempt++ {
		participanttest.WantOutcome(t, participanttest.MustExec(t, always.Pool, always.H.Forward, cmd(t, saga, "o1", attempt)), message.Retry, orderapi.ReasonTransient)
	}
	if got := participanttest.Read(t, always.Pool, schema, Shipments); len(got) != 0 {
		t.Fatalf("FailRate 1: shipments = %v, want none", got)
	}
}

// TestHandlerFollowsTheDraw checks the wiring only; package flaky tests
// the draw itself (proportion, determinism, pinned values).
func TestHandlerFollowsTheDraw(t *testing.T) {
	t.Parallel()
	const rate = 0.3
	opts := Options{FailRate: rate, Seed: 42}
	// The handler follows the draw: with a fresh saga, attempts fail exactly
	// when the draw says so, and a later attempt can succeed.
	f := setup(t, opts)
	saga := uuid.New()
	succeeded := false
	for attempt := 1; attempt <= 20 && !succeeded; attempt++ {
		c := cmd(t, saga, "o-retry", attempt)
		res := participanttest.MustExec(t, f.Pool, f.H.Forward, c)
		if want := opts.Fails(c); want != (res.Outcome == message.Retry) {
			t.Fatalf("attempt %d: outcome %s, but the draw says fail=%v", attempt, res.Outcome, want)
		}
		succeeded = res.Outcome == message.Success
	}
	if !succeeded {
		t.Fatal("20 attempts at FailRate 0.3 never succeeded")
	}
	if got := participanttest.Read(t, f.Pool, schema, Shipments); got[saga] != 1 {
		t.Fatalf("shipments = %v, want one for %s", got, saga)
	}
}

func TestInvalidPayloadsAndOptions(t *testing.T) {
	t.Parallel()
	f := setup(t, Options{})
	for name, c := range map[string]struct {
		field   string
		payload any
	}{
		"empty":       {"payload", nil},
		"not json":    {"payload", []byte(`nope`)},
		"no order":    {"order_id", orderapi.CreateShipment{Customer: "ann", SKU: "a", Qty: 1}},
		"no customer": {"customer", orderapi.CreateShipment{OrderID: "o1", SKU: "a", Qty: 1}},
		"no sku":      {"sku", orderapi.CreateShipment{OrderID: "o1", Customer: "ann", Qty: 1}},
		"zero qty":    {"qty", orderapi.CreateShipment{OrderID: "o1", Customer: "ann", SKU: "a"}},
	} {
		t.Run(name, func(t *testing.T) {
			participanttest.WantInvalid(t, f.Pool, f.H.Forward, participanttest.Command(t, uuid.New(), orderapi.StepCreateShipment, message.Forward, 1, c.payload), c.field)
		})
	}
	if got := participanttest.Read(t, f.Pool, schema, Shipments); len(got) != 0 {
		t.Fatalf("shipments after invalid commands = %v, want none", got)
	}

	p, err := participants.New(f.Pool, &participants.Config{Name: orderapi.Shipping})
	if err != nil {
		t.Fatalf("participants.New: %v", err)
	}
	for _, bad := range []float64{-0.1, 1.5} {
		if err := Register(p, Options{FailRate: bad}); err == nil || !strings.Contains(err.Error(), "FailRate") {
			t.Fatalf("Register with FailRate %v: err = %v, want an error naming FailRate", bad, err)
		}
	}
	if err := Register(p, Options{FailRate: 0.2, Seed: 1}); err != nil {
		t.Fatalf("Register: %v", err)
	}
}

func TestCreateBatchShipsEachOrderOnce(t *testing.T) {
	t.Parallel()
	f := setup(t, Options{})
	prior := uuid.New()
	first := participanttest.Payload[orderapi.CreateShipmentResult](t, participanttest.MustExec(t, f.Pool, f.H.Forward, cmd(t, prior, "o1", 1))).ShipmentID

	a, b := uuid.New(), uuid.New()
	res := participanttest.ExecBatch(t, f.Pool, f.H.ForwardMany, cmd(t, a, "o2", 1), cmd(t, b, "o3", 1))
	ids := map[string]bool{first: true}
	for i := range res {
		participanttest.WantOutcome(t, res[i], message.Success, "")
		ids[participanttest.Payload[orderapi.CreateShipmentResult](t, res[i]).ShipmentID] = true
	}
	if len(ids) != 3 {
		t.Fatalf("shipment ids %v, want three different ones", ids)
	}
	// Another saga of a shipped order is left to create (which answers the
	// order's shipment); nothing of the batch is committed.
	res = participanttest.ExecBatch(t, f.Pool, f.H.ForwardMany, cmd(t, uuid.New(), "o4", 1), cmd(t, uuid.New(), "o1", 1))
	if res[0].Outcome != message.Success || res[1].Outcome == message.Success {
		t.Fatalf("batch with a shipped order: outcomes %s, %s; want success, then left to create", res[0].Outcome, res[1].Outcome)
	}
	if got := participanttest.Read(t, f.Pool, schema, Shipments); len(got) != 3 || got[prior] != 1 || got[a] != 1 || got[b] != 1 {
		t.Fatalf("shipments = %v, want one each for the three sagas shipped", got)
	}
	// The fault option fails in the batch what it fails alone.
	ff := setup(t, Options{FailRate: 1})
	res = participanttest.ExecBatch(t, ff.Pool, ff.H.ForwardMany, cmd(t, uuid.New(), "o9", 1))
	participanttest.WantOutcome(t, res[0], message.Retry, orderapi.ReasonTransient)
}
