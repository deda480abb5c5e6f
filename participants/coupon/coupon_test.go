package coupon

import (
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

const schema = "coupon"

type fixture = participanttest.Fixture[refstep.Handlers]

func setup(t *testing.T, codes ...string) fixture {
	t.Helper()
	f := participanttest.NewFixture(t, schema, Migrations, func(schema string) (refstep.Handlers, error) { return refstep.Build(step(schema)) })
	if err := Seed(testkit.Context(t, 30*time.Second), f.Pool, schema, codes...); err != nil {
		t.Fatalf("seed: %v", err)
	}
	return f
}

func cmd(t *testing.T, saga uuid.UUID, action message.Action, code string) message.Command {
	return participanttest.Command(t, saga, orderapi.StepLockCoupon, action, 1,
		orderapi.LockCoupon{OrderID: "order-" + saga.String()[:8], Code: code})
}

func TestLockIsExclusiveUntilCompensated(t *testing.T) {
	t.Parallel()
	f := setup(t, "SAVE5")
	a, b := uuid.New(), uuid.New()

	res := participanttest.MustExec(t, f.Pool, f.H.Forward, cmd(t, a, message.Forward, "SAVE5"))
	participanttest.WantOutcome(t, res, message.Success, "")
	if got := participanttest.Payload[orderapi.LockCouponResult](t, res).DiscountCents; got != DiscountCentsDefault {
		t.Fatalf("discount = %d, want %d", got, DiscountCentsDefault)
	}
	// The same saga taking it again is a no-op success.
	participanttest.WantOutcome(t, participanttest.MustExec(t, f.Pool, f.H.Forward, cmd(t, a, message.Forward, "SAVE5")), message.Success, "")

	// Another saga is refused while a holds it.
	participanttest.WantOutcome(t, participanttest.MustExec(t, f.Pool, f.H.Forward, cmd(t, b, message.Forward, "SAVE5")), message.Failure, orderapi.ReasonCouponTaken)
	if got := participanttest.Read(t, f.Pool, schema, Locks); len(got) != 1 || got["SAVE5"] != a {
		t.Fatalf("locks = %v, want SAVE5 held by %s", got, a)
	}

	// Compensating b (which never held it) leaves a's lock.
	participanttest.WantOutcome(t, participanttest.MustExec(t, f.Pool, f.H.Compensate, cmd(t, b, message.Compensate, "SAVE5")), message.Success, "")
	if got := participanttest.Read(t, f.Pool, schema, Locks); got["SAVE5"] != a {
		t.Fatalf("after compensating another saga: locks = %v, want SAVE5 still held by %s", got, a)
	}

	// Compensating a frees it, and b can take it.
	participanttest.WantOutcome(t, participanttest.MustExec(t, f.Pool, f.H.Compensate, cmd(t, a, message.Compensate, "SAVE5")), message.Success, "")
	if got := participanttest.Read(t, f.Pool, schema, Locks); len(got) != 0 {
		t.Fatalf("after compensation: locks = %v, want none", got)
	}
	participanttest.WantOutcome(t, participanttest.MustExec(t, f.Pool, f.H.Forward, cmd(t, b, message.Forward, "SAVE5")), message.Success, "")
	if got := participanttest.Read(t, f.Pool, schema, Locks); got["SAVE5"] != b {
		t.Fatalf("locks = %v, want SAVE5 held by %s", got, b)
	}
}

func TestNoCodeAndUnknownCode(t *testing.T) {
	t.Parallel()
	f := setup(t, "SAVE5")
	saga := uuid.New()
	res := participanttest.MustExec(t, f.Pool, f.H.Forward, cmd(t, saga, message.Forward, ""))
	participanttest.WantOutcome(t, res, message.Success, "")
	if got := participanttest.Payload[orderapi.LockCouponResult](t, res).DiscountCents; got != 0 {
		t.Fatalf("discount without a code = %d, want 0", got)
	}
	participanttest.WantOutcome(t, participanttest.MustExec(t, f.Pool, f.H.Compensate, cmd(t, saga, message.Compensate, "")), message.Success, "")

	participanttest.WantOutcome(t, participanttest.MustExec(t, f.Pool, f.H.Forward, cmd(t, saga, message.Forward, "NOPE")), message.Failure, orderapi.ReasonUnknownCoupon)
	if got := participanttest.Read(t, f.Pool, schema, Locks); len(got) != 0 {
		t.Fatalf("locks = %v, want none", got)
	}
}

func TestConcurrentLocksHaveOneWinner(t *testing.T) {
	t.Parallel()
	const sagas = 12
	f := setup(t, "HOT")
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		winners  []uuid.UUID
		refusals int
		failures []string
	)
	start := make(chan struct{})
	for range sagas {
		saga := uuid.New()
		c := cmd(t, saga, message.Forward, "HOT")
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res, err := participanttest.Exec(testkit.Context(t, 30*time.Second), f.Pool, f.H.Forward, c)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				failures = append(failures, err.Error())
			case res.Outcome == message.Success:
				winners = append(winners, saga)
			case res.Reason == orderapi.ReasonCouponTaken:
				refusals++
			default:
				failures = append(failures, string(res.Outcome)+" "+res.Reason)
			}
		}()
	}
	close(start)
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("unexpected results: %v", failures)
	}
	if len(winners) != 1 || refusals != sagas-1 {
		t.Fatalf("%d winners and %d refusals, want 1 and %d", len(winners), refusals, sagas-1)
	}
	if got := participanttest.Read(t, f.Pool, schema, Locks); got["HOT"] != winners[0] {
		t.Fatalf("locks = %v, want HOT held by the winner %s", got, winners[0])
	}
}

func TestInvalidPayloads(t *testing.T) {
	t.Parallel()
	f := setup(t, "SAVE5")
	for _, action := range []message.Action{message.Forward, message.Compensate} {
		fn := f.H.Forward
		if action == message.Compensate {
			fn = f.H.Compensate
		}
		for name, c := range map[string]struct {
			field   string
			payload any
		}{
			"empty":    {"payload", nil},
			"not json": {"payload", []byte(`[1,2`)},
			"no order": {"order_id", orderapi.LockCoupon{Code: "SAVE5"}},
		} {
			t.Run(name+"/"+string(action), func(t *testing.T) {
				participanttest.WantInvalid(t, f.Pool, fn, participanttest.Command(t, uuid.New(), orderapi.StepLockCoupon, action, 1, c.payload), c.field)
			})
		}
	}
	if got := participanttest.Read(t, f.Pool, schema, Locks); len(got) != 0 {
		t.Fatalf("locks after invalid commands = %v, want none", got)
	}
}

func TestRegister(t *testing.T) {
	t.Parallel()
	p, err := participants.New(testkit.Pool(t), &participants.Config{Name: orderapi.Coupon})
	if err != nil {
		t.Fatalf("participants.New: %v", err)
	}
	if err := Register(p, Options{}); err != nil {
		t.Fatalf("Register: %v", err)
	}
	if err := Register(p, Options{}); err == nil {
		t.Fatal("second Register: err = nil, want duplicate step error")
	}
	if err := Register(nil, Options{}); err == nil {
		t.Fatal("Register(nil): err = nil, want an error")
	}
}

func TestLockBatchTakesFreeCodesAndLeavesTheRest(t *testing.T) {
	t.Parallel()
	f := setup(t, "A", "B", "C")
	held := uuid.New()
	participanttest.WantOutcome(t, participanttest.MustExec(t, f.Pool, f.H.Forward, cmd(t, held, message.Forward, "C")), message.Success, "")

	a, none, b := uuid.New(), uuid.New(), uuid.New()
	res := participanttest.ExecBatch(t, f.Pool, f.H.ForwardMany, cmd(t, a, message.Forward, "A"), cmd(t, none, message.Forward, ""), cmd(t, b, message.Forward, "B"))
	for i, want := range []int64{DiscountCentsDefault, 0, DiscountCentsDefault} {
		participanttest.WantOutcome(t, res[i], message.Success, "")
		if got := participanttest.Payload[orderapi.LockCouponResult](t, res[i]).DiscountCents; got != want {
			t.Fatalf("result %d: discount %d, want %d", i, got, want)
		}
	}
	if got := participanttest.Read(t, f.Pool, schema, Locks); got["A"] != a || got["B"] != b || got["C"] != held {
		t.Fatalf("locks = %v, want A by %s, B by %s, C by %s", got, a, b, held)
	}

	// A code held by another saga, an unknown code, and one code wanted by
	// two sagas of the batch are left to lock; the batch is not committed.
	for name, cs := range map[string][]message.Command{
		"held":    {cmd(t, uuid.New(), message.Forward, "C")},
		"unknown": {cmd(t, uuid.New(), message.Forward, "NOPE")},
		"twice":   {cmd(t, uuid.New(), message.Forward, "D"), cmd(t, uuid.New(), message.Forward, "D")},
	} {
		if name == "twice" {
			if err := Seed(testkit.Context(t, 30*time.Second), f.Pool, schema, "D"); err != nil {
				t.Fatal(err)
			}
		}
		res := participanttest.ExecBatch(t, f.Pool, f.H.ForwardMany, cs...)
		all := true
		for _, r := range res {
			all = all && r.Outcome == message.Success
		}
		if all {
			t.Fatalf("%s: every result success, want the batch left to lock", name)
		}
	}
	if got := participanttest.Read(t, f.Pool, schema, Locks); len(got) != 3 {
		t.Fatalf("locks after the declined batches = %v, want the three of before", got)
	}
}
