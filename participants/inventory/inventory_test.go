package inventory

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/participants"
	"github.com/sagaflow/sagaflow/participants/holds"
	"github.com/sagaflow/sagaflow/participants/internal/refstep"
	"github.com/sagaflow/sagaflow/participants/participanttest"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

const schema = "inventory"

type fixture = participanttest.Fixture[refstep.Handlers]

func setup(t *testing.T, stock map[string]int) fixture {
	t.Helper()
	f := participanttest.NewFixture(t, schema, Migrations, func(schema string) (refstep.Handlers, error) { return refstep.Build(step(schema)) })
	if err := Seed(testkit.Context(t, 30*time.Second), f.Pool, schema, stock); err != nil {
		t.Fatalf("seed: %v", err)
	}
	return f
}

func cmd(t *testing.T, saga uuid.UUID, action message.Action, sku string, qty int) message.Command {
	return participanttest.Command(t, saga, orderapi.StepReserveInventory, action, 1,
		orderapi.ReserveInventory{OrderID: "order-" + saga.String()[:8], SKU: sku, Qty: qty})
}

func TestReserveAndReleaseConserveStock(t *testing.T) {
	t.Parallel()
	f := setup(t, map[string]int{"sku-a": 5})
	saga := uuid.New()

	res := participanttest.MustExec(t, f.Pool, f.H.Forward, cmd(t, saga, message.Forward, "sku-a", 3))
	participanttest.WantOutcome(t, res, message.Success, "")
	if got := participanttest.Payload[orderapi.ReserveInventoryResult](t, res).ReservationID; got != saga.String() {
		t.Fatalf("reservation id = %q, want the saga id %s", got, saga)
	}
	if got, want := participanttest.Read(t, f.Pool, schema, Stock)["sku-a"], (Item{Available: 2, Reserved: 3}); got != want {
		t.Fatalf("after reserve: stock = %+v, want %+v", got, want)
	}
	if r := participanttest.Read(t, f.Pool, schema, Reservations)[saga]; r.State != StateReserved || r.Qty != 3 || r.SKU != "sku-a" {
		t.Fatalf("after reserve: reservation = %+v, want 3 x sku-a reserved", r)
	}

	// A second forward for the same saga (defence in depth beside the
	// barrier) answers the same result and does not reserve again.
	res = participanttest.MustExec(t, f.Pool, f.H.Forward, cmd(t, saga, message.Forward, "sku-a", 3))
	participanttest.WantOutcome(t, res, message.Success, "")
	if got, want := participanttest.Read(t, f.Pool, schema, Stock)["sku-a"], (Item{Available: 2, Reserved: 3}); got != want {
		t.Fatalf("after duplicate reserve: stock = %+v, want %+v", got, want)
	}

	res = participanttest.MustExec(t, f.Pool, f.H.Compensate, cmd(t, saga, message.Compensate, "sku-a", 3))
	participanttest.WantOutcome(t, res, message.Success, "")
	if got, want := participanttest.Read(t, f.Pool, schema, Stock)["sku-a"], (Item{Available: 5}); got != want {
		t.Fatalf("after release: stock = %+v, want %+v", got, want)
	}
	if r := participanttest.Read(t, f.Pool, schema, Reservations)[saga]; r.State != StateReleased {
		t.Fatalf("after release: reservation state = %q, want %q", r.State, StateReleased)
	}

	// Releasing twice gives back nothing more.
	res = participanttest.MustExec(t, f.Pool, f.H.Compensate, cmd(t, saga, message.Compensate, "sku-a", 3))
	participanttest.WantOutcome(t, res, message.Success, "")
	if got, want := participanttest.Read(t, f.Pool, schema, Stock)["sku-a"], (Item{Available: 5}); got != want {
		t.Fatalf("after second release: stock = %+v, want %+v", got, want)
	}
	// A forward after the release is refused and changes nothing.
	res = participanttest.MustExec(t, f.Pool, f.H.Forward, cmd(t, saga, message.Forward, "sku-a", 3))
	if res.Outcome != message.Failure {
		t.Fatalf("forward after release: outcome = %s, want failure", res.Outcome)
	}
	if got, want := participanttest.Read(t, f.Pool, schema, Stock)["sku-a"], (Item{Available: 5}); got != want {
		t.Fatalf("after forward-after-release: stock = %+v, want %+v", got, want)
	}
}

func TestReserveFailuresChangeNothing(t *testing.T) {
	t.Parallel()
	f := setup(t, map[string]int{"sku-a": 2})

	saga := uuid.New()
	res := participanttest.MustExec(t, f.Pool, f.H.Forward, cmd(t, saga, message.Forward, "sku-a", 3))
	participanttest.WantOutcome(t, res, message.Failure, orderapi.ReasonInsufficientStock)

	unknown := uuid.New()
	res = participanttest.MustExec(t, f.Pool, f.H.Forward, cmd(t, unknown, message.Forward, "no-such-sku", 1))
	participanttest.WantOutcome(t, res, message.Failure, orderapi.ReasonUnknownSKU)

	if got, want := participanttest.Read(t, f.Pool, schema, Stock), (map[string]Item{"sku-a": {Available: 2}}); len(got) != 1 || got["sku-a"] != want["sku-a"] {
		t.Fatalf("stock = %+v, want %+v", got, want)
	}
	if r := participanttest.Read(t, f.Pool, schema, Reservations); len(r) != 0 {
		t.Fatalf("reservations = %+v, want none", r)
	}

	// Compensating a saga that reserved nothing is an empty compensation.
	res = participanttest.MustExec(t, f.Pool, f.H.Compensate, cmd(t, saga, message.Compensate, "sku-a", 3))
	participanttest.WantOutcome(t, res, message.Success, "")
	if got := participanttest.Read(t, f.Pool, schema, Stock)["sku-a"]; got != (Item{Available: 2}) {
		t.Fatalf("after empty compensation: stock = %+v, want 2 available", got)
	}
}

func TestConcurrentReservationsNeverOversell(t *testing.T) {
	t.Parallel()
	const stock, sagas = 10, 20
	f := setup(t, map[string]int{"hot": stock})

	results := make(chan participants.Result, sagas)
	errs := make(chan error, sagas)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range sagas {
		c := cmd(t, uuid.New(), message.Forward, "hot", 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res, err := participanttest.Exec(testkit.Context(t, 30*time.Second), f.Pool, f.H.Forward, c)
			if err != nil {
				errs <- err
				return
			}
			results <- res
		}()
	}
	close(start)
	wg.Wait()
	close(results)
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent reserve: %v", err)
	}
	ok, short := 0, 0
	for res := range results {
		switch {
		case res.Outcome == message.Success:
			ok++
		case res.Outcome == message.Failure && res.Reason == orderapi.ReasonInsufficientStock:
			short++
		default:
			t.Fatalf("unexpected result %+v", res)
		}
	}
	if ok != stock || short != sagas-stock {
		t.Fatalf("%d succeeded and %d ran short, want %d and %d", ok, short, stock, sagas-stock)
	}
	if got, want := participanttest.Read(t, f.Pool, schema, Stock)["hot"], (Item{Available: 0, Reserved: stock}); got != want {
		t.Fatalf("stock = %+v, want %+v", got, want)
	}
	held := 0
	for _, r := range participanttest.Read(t, f.Pool, schema, Reservations) {
		if r.State == StateReserved {
			held += r.Qty
		}
	}
	if held != stock {
		t.Fatalf("reservations hold %d units, want %d", held, stock)
	}
}

func TestInvalidPayloads(t *testing.T) {
	t.Parallel()
	f := setup(t, map[string]int{"sku-a": 1})
	saga := uuid.New()
	cases := []struct {
		name, field string
		payload     any
	}{
		{"empty payload", "payload", nil},
		{"not json", "payload", []byte(`{"qty":`)},
		{"wrong type", "payload", []byte(`{"order_id":"o1","sku":"a","qty":"one"}`)},
		{"no order", "order_id", orderapi.ReserveInventory{SKU: "sku-a", Qty: 1}},
		{"no sku", "sku", orderapi.ReserveInventory{OrderID: "o1", Qty: 1}},
		{"zero qty", "qty", orderapi.ReserveInventory{OrderID: "o1", SKU: "sku-a"}},
		{"negative qty", "qty", orderapi.ReserveInventory{OrderID: "o1", SKU: "sku-a", Qty: -2}},
	}
	for _, c := range cases {
		for _, action := range []message.Action{message.Forward, message.Compensate} {
			fn := f.H.Forward
			if action == message.Compensate {
				fn = f.H.Compensate
			}
			t.Run(c.name+"/"+string(action), func(t *testing.T) {
				participanttest.WantInvalid(t, f.Pool, fn, participanttest.Command(t, saga, orderapi.StepReserveInventory, action, 1, c.payload), c.field)
			})
		}
	}
	if got := participanttest.Read(t, f.Pool, schema, Stock)["sku-a"]; got != (Item{Available: 1}) {
		t.Fatalf("stock after invalid commands = %+v, want 1 available", got)
	}
}

func TestSeedResetsAndValidates(t *testing.T) {
	t.Parallel()
	f := setup(t, map[string]int{"a": 3, "b": 4})
	participanttest.MustExec(t, f.Pool, f.H.Forward, cmd(t, uuid.New(), message.Forward, "a", 2))
	ctx := testkit.Context(t, 30*time.Second)
	if err := Seed(ctx, f.Pool, schema, map[string]int{"a": 7}); err != nil {
		t.Fatalf("reseed: %v", err)
	}
	s := participanttest.Read(t, f.Pool, schema, Stock)
	if s["a"] != (Item{Available: 7}) || s["b"] != (Item{Available: 4}) {
		t.Fatalf("stock after reseed = %+v, want a=7 b=4 available", s)
	}
	err := Seed(ctx, f.Pool, schema, map[string]int{"c": -1})
	if err == nil || !strings.Contains(err.Error(), `"c"`) {
		t.Fatalf("seed with negative stock: err = %v, want an error naming the sku", err)
	}
}

func TestRegister(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	p, err := participants.New(pool, &participants.Config{Name: orderapi.Inventory})
	if err != nil {
		t.Fatalf("participants.New: %v", err)
	}
	if err := Register(p, Options{}); err != nil {
		t.Fatalf("Register: %v", err)
	}
	if err := Register(p, Options{}); err == nil {
		t.Fatal("second Register on the same participant: err = nil, want duplicate step error")
	}
	if err := Register(nil, Options{}); err == nil {
		t.Fatal("Register(nil): err = nil, want an error")
	}
}

func TestReserveBatchTakesEachSKUsTotalOnce(t *testing.T) {
	t.Parallel()
	f := setup(t, map[string]int{"sku-a": 5, "sku-b": 3})
	s1, s2, s3 := uuid.New(), uuid.New(), uuid.New()
	res := participanttest.ExecBatch(t, f.Pool, f.H.ForwardMany,
		cmd(t, s1, message.Forward, "sku-a", 2), cmd(t, s2, message.Forward, "sku-b", 3), cmd(t, s3, message.Forward, "sku-a", 1))
	for i, saga := range []uuid.UUID{s1, s2, s3} {
		participanttest.WantOutcome(t, res[i], message.Success, "")
		if got := participanttest.Payload[orderapi.ReserveInventoryResult](t, res[i]).ReservationID; got != saga.String() {
			t.Fatalf("result %d: reservation id %q, want saga %s", i, got, saga)
		}
	}
	stock := participanttest.Read(t, f.Pool, schema, Stock)
	if a, b := stock["sku-a"], stock["sku-b"]; a != (Item{Available: 2, Reserved: 3}) || b != (Item{Available: 0, Reserved: 3}) {
		t.Fatalf("stock after the batch: sku-a %+v sku-b %+v; want 2/3 and 0/3 available/reserved", a, b)
	}
	rs := participanttest.Read(t, f.Pool, schema, Reservations)
	if len(rs) != 3 || rs[s1].Qty != 2 || rs[s2].SKU != "sku-b" || rs[s3].State != StateReserved {
		t.Fatalf("reservations after the batch: %+v; want the three orders reserved", rs)
	}
}

func TestReserveBatchLeavesTheUnplainCasesToReserve(t *testing.T) {
	t.Parallel()
	f := setup(t, map[string]int{"sku-a": 5, "sku-c": 2})
	prior := uuid.New()
	participanttest.WantOutcome(t, participanttest.MustExec(t, f.Pool, f.H.Forward, cmd(t, prior, message.Forward, "sku-a", 1)), message.Success, "")
	before := participanttest.Read(t, f.Pool, schema, Stock)

	// Each of the sku-c orders alone fits, both together do not; the saga
	// with a reservation is a copy; sku-x is unknown. None of them is
	// reserved by the batch, the plain order is, and the batch (not all
	// Success) is not committed: the SDK runs reserve for each instead.
	plain, c1, c2, unknown := uuid.New(), uuid.New(), uuid.New(), uuid.New()
	res := participanttest.ExecBatch(t, f.Pool, f.H.ForwardMany,
		cmd(t, plain, message.Forward, "sku-a", 1), cmd(t, c1, message.Forward, "sku-c", 2), cmd(t, c2, message.Forward, "sku-c", 1),
		cmd(t, prior, message.Forward, "sku-a", 1), cmd(t, unknown, message.Forward, "sku-x", 1))
	participanttest.WantOutcome(t, res[0], message.Success, "")
	for i := 1; i < len(res); i++ {
		if res[i].Outcome == message.Success {
			t.Fatalf("result %d = success, want it left to the one-by-one path", i)
		}
	}
	if got := participanttest.Read(t, f.Pool, schema, Stock); got["sku-a"] != before["sku-a"] || got["sku-c"] != before["sku-c"] {
		t.Fatalf("stock after the declined batch = %+v, want it untouched (%+v)", got, before)
	}

	// Invalid payloads are errors, as in reserve (the SDK declines the
	// batch, and reserve dead-letters the command).
	bad := cmd(t, uuid.New(), message.Forward, "sku-a", 0)
	tx, err := f.Pool.Begin(testkit.Context(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(testkit.Context(t, 5*time.Second)) }()
	if _, err := f.H.ForwardMany(testkit.Context(t, 30*time.Second), tx, []message.Command{bad}); err == nil || !strings.Contains(err.Error(), "qty") {
		t.Fatalf("batch with qty 0 = %v, want an error naming qty", err)
	}
}

// confirmer builds the confirm-stock handlers for the fixture's schema.
func confirmer(t *testing.T) refstep.Handlers {
	t.Helper()
	h, err := refstep.Build(confirmStep(schema))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func confirmCmd(t *testing.T, saga uuid.UUID) message.Command {
	return participanttest.Command(t, saga, orderapi.StepConfirmStock, message.Forward, 1,
		orderapi.ConfirmStock{OrderID: "order-" + saga.String()[:8]})
}

// holdsOf reads the holds of saga.
func holdsOf(t *testing.T, f fixture, saga uuid.UUID) []holds.Hold {
	t.Helper()
	hs, err := holds.For(schema).BySaga(testkit.Context(t, 30*time.Second), f.Pool, saga)
	if err != nil {
		t.Fatal(err)
	}
	return hs
}

func TestReserveHoldsAndConfirmSells(t *testing.T) {
	t.Parallel()
	f := setup(t, map[string]int{"sku-a": 5})
	confirm := confirmer(t)
	saga := uuid.New()

	participanttest.WantOutcome(t, participanttest.MustExec(t, f.Pool, f.H.Forward, cmd(t, saga, message.Forward, "sku-a", 3)), message.Success, "")
	hs := holdsOf(t, f, saga)
	if len(hs) != 1 || hs[0].Resource != "sku-a" || hs[0].Quantity != 3 || hs[0].Step != orderapi.StepReserveInventory || hs[0].State != holds.Held {
		t.Fatalf("holds after reserve = %+v, want 3 x sku-a held by reserve-inventory", hs)
	}

	for _, round := range []string{"confirm", "confirm again"} {
		res := participanttest.MustExec(t, f.Pool, confirm.Forward, confirmCmd(t, saga))
		participanttest.WantOutcome(t, res, message.Success, "")
		if got := participanttest.Payload[orderapi.ConfirmStockResult](t, res).Sold; got != 3 {
			t.Fatalf("%s: sold %d, want 3", round, got)
		}
		if got, want := participanttest.Read(t, f.Pool, schema, Stock)["sku-a"], (Item{Available: 2, Sold: 3}); got != want {
			t.Fatalf("%s: stock = %+v, want %+v", round, got, want)
		}
		if r := participanttest.Read(t, f.Pool, schema, Reservations)[saga]; r.State != StateSold {
			t.Fatalf("%s: reservation state = %q, want %q", round, r.State, StateSold)
		}
		if hs := holdsOf(t, f, saga); len(hs) != 1 || hs[0].State != holds.Confirmed || hs[0].Settled == nil {
			t.Fatalf("%s: holds = %+v, want the hold confirmed", round, hs)
		}
	}
	// A copy of the reserve after the sale (defence in depth beside the
	// barrier) answers the reservation again and moves nothing.
	participanttest.WantOutcome(t, participanttest.MustExec(t, f.Pool, f.H.Forward, cmd(t, saga, message.Forward, "sku-a", 3)), message.Success, "")
	if got, want := participanttest.Read(t, f.Pool, schema, Stock)["sku-a"], (Item{Available: 2, Sold: 3}); got != want {
		t.Fatalf("after a reserve copy following the sale: stock = %+v, want %+v", got, want)
	}
}

func TestReleaseReleasesTheHold(t *testing.T) {
	t.Parallel()
	f := setup(t, map[string]int{"sku-a": 5})
	saga := uuid.New()
	participanttest.MustExec(t, f.Pool, f.H.Forward, cmd(t, saga, message.Forward, "sku-a", 2))
	participanttest.WantOutcome(t, participanttest.MustExec(t, f.Pool, f.H.Compensate, cmd(t, saga, message.Compensate, "sku-a", 2)), message.Success, "")
	if hs := holdsOf(t, f, saga); len(hs) != 1 || hs[0].State != holds.Released {
		t.Fatalf("holds after release = %+v, want the hold released", hs)
	}
}

func TestConfirmWithoutAHeldReservationFails(t *testing.T) {
	t.Parallel()
	f := setup(t, map[string]int{"sku-a": 5})
	confirm := confirmer(t)
	released := uuid.New()
	participanttest.MustExec(t, f.Pool, f.H.Forward, cmd(t, released, message.Forward, "sku-a", 2))
	participanttest.MustExec(t, f.Pool, f.H.Compensate, cmd(t, released, message.Compensate, "sku-a", 2))
	for name, saga := range map[string]uuid.UUID{"never reserved": uuid.New(), "released": released} {
		participanttest.WantOutcome(t, participanttest.MustExec(t, f.Pool, confirm.Forward, confirmCmd(t, saga)), message.Failure, orderapi.ReasonNoReservation)
		if got := participanttest.Read(t, f.Pool, schema, Stock)["sku-a"]; got != (Item{Available: 5}) {
			t.Fatalf("%s: stock after a refused confirm = %+v, want 5 available", name, got)
		}
	}
	participanttest.WantInvalid(t, f.Pool, confirm.Forward, participanttest.Command(t, uuid.New(), orderapi.StepConfirmStock, message.Forward, 1, orderapi.ConfirmStock{}), "order_id")
}

func TestReserveBatchTakesHolds(t *testing.T) {
	t.Parallel()
	f := setup(t, map[string]int{"sku-a": 5, "sku-b": 3})
	s1, s2 := uuid.New(), uuid.New()
	participanttest.ExecBatch(t, f.Pool, f.H.ForwardMany, cmd(t, s1, message.Forward, "sku-a", 2), cmd(t, s2, message.Forward, "sku-b", 3))
	for saga, want := range map[uuid.UUID]holds.Hold{s1: {Resource: "sku-a", Quantity: 2}, s2: {Resource: "sku-b", Quantity: 3}} {
		hs := holdsOf(t, f, saga)
		if len(hs) != 1 || hs[0].Resource != want.Resource || hs[0].Quantity != want.Quantity || hs[0].State != holds.Held {
			t.Fatalf("holds of saga %s after the batch = %+v, want %d x %s held", saga, hs, want.Quantity, want.Resource)
		}
	}
}
