package isolation_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/participants"
	"github.com/sagaflow/sagaflow/participants/coupon"
	"github.com/sagaflow/sagaflow/participants/holds"
	"github.com/sagaflow/sagaflow/participants/inventory"
	"github.com/sagaflow/sagaflow/participants/participanttest"
	"github.com/sagaflow/sagaflow/participants/payment"
	"github.com/sagaflow/sagaflow/participants/points"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

func inventoryKit(t *testing.T, stock map[string]int) *participanttest.Kit {
	t.Helper()
	k := participanttest.New(t, orderapi.Inventory, inventory.Migrations, func(p *participants.Participant) error {
		return inventory.Register(p, inventory.Options{})
	})
	if err := inventory.Seed(testkit.Context(t, 30*time.Second), k.Pool, k.Schema(), stock); err != nil {
		t.Fatal(err)
	}
	return k
}

func reserve(t *testing.T, saga uuid.UUID, action message.Action, sku string, qty int) message.Command {
	return participanttest.Command(t, saga, orderapi.StepReserveInventory, action, 1, orderapi.ReserveInventory{OrderID: "o-" + saga.String()[:8], SKU: sku, Qty: qty})
}

// Semantic lock (inventory reserve and participants/holds): while saga A
// holds the last unit, its outcome is open (it may still compensate). A
// second saga must neither count that unit as free nor sell it.
func TestSemanticLockKeepsHeldStockFromAnotherSaga(t *testing.T) {
	t.Parallel()
	k := inventoryKit(t, map[string]int{"sku-last": 1})
	ctx := testkit.Context(t, 30*time.Second)
	a, b := uuid.New(), uuid.New()

	// Without a lock: a reservation that only checks the stock and sells
	// it at the end lets both sagas see the one unit as free: two orders
	// are promised one unit (a dirty read of stock another saga counts on).
	promised := 0
	for range []uuid.UUID{a, b} {
		var free bool
		if err := k.Pool.QueryRow(ctx, `SELECT available >= 1 FROM inventory.items WHERE sku = 'sku-last'`).Scan(&free); err != nil {
			t.Fatal(err)
		}
		if free {
			promised++
		}
	}
	if promised != 2 {
		t.Fatalf("without a lock %d sagas were promised the last unit, want the anomaly: 2", promised)
	}

	// With it: A's reservation moves the unit to reserved and holds it;
	// B is refused while A's saga runs, and gets it once A compensates.
	participanttest.WantReply(t, k.Send(reserve(t, a, message.Forward, "sku-last", 1))[0], message.Success, "")
	participanttest.WantReply(t, k.Send(reserve(t, b, message.Forward, "sku-last", 1))[0], message.Failure, orderapi.ReasonInsufficientStock)
	who, err := holds.For(k.Schema()).ByResource(ctx, k.Pool, "sku-last")
	if err != nil || len(who) != 1 || who[0].SagaID != a || who[0].State != holds.Held {
		t.Fatalf("holds of sku-last = %+v (%v), want saga A's", who, err)
	}
	participanttest.WantReply(t, k.Send(reserve(t, a, message.Compensate, "sku-last", 1))[0], message.Success, "")
	participanttest.WantReply(t, k.Send(reserve(t, uuid.New(), message.Forward, "sku-last", 1))[0], message.Success, "")
}

// Commutative updates (points award: balance = balance + points): two
// sagas awarding points to one customer at the same time both count.
func TestCommutativeUpdatesLoseNoUpdate(t *testing.T) {
	t.Parallel()
	k := participanttest.New(t, orderapi.Points, points.Migrations, func(p *participants.Participant) error {
		return points.Register(p, points.Options{})
	})
	ctx := testkit.Context(t, 30*time.Second)

	// Without: each saga reads the balance and writes back its own sum;
	// interleaved, the second write loses the first (a lost update).
	if _, err := k.Pool.Exec(ctx, `INSERT INTO points.balances (customer, points) VALUES ('naive', 0)`); err != nil {
		t.Fatal(err)
	}
	t1, t2 := begin(t, k), begin(t, k)
	var r1, r2 int64
	for _, r := range []struct {
		tx  pgx.Tx
		out *int64
	}{{t1, &r1}, {t2, &r2}} {
		if err := r.tx.QueryRow(ctx, `SELECT points FROM points.balances WHERE customer = 'naive'`).Scan(r.out); err != nil {
			t.Fatal(err)
		}
	}
	mustExec(t, t1, `UPDATE points.balances SET points = $1 WHERE customer = 'naive'`, r1+10)
	commit(t, t1)
	mustExec(t, t2, `UPDATE points.balances SET points = $1 WHERE customer = 'naive'`, r2+10)
	commit(t, t2)
	if got := balances(t, k)["naive"]; got != 10 {
		t.Fatalf("read-modify-write balance = %d, want the anomaly: 10 (one award lost)", got)
	}

	// With: the points participant's own handler in two interleaved
	// transactions; the second waits for the first and adds to its result.
	award := func(saga uuid.UUID) message.Record {
		return record(t, participanttest.Command(t, saga, orderapi.StepAwardPoints, message.Forward, 1,
			orderapi.AwardPoints{OrderID: "o-" + saga.String()[:8], Customer: "alice", Points: 10}))
	}
	t1, t2 = begin(t, k), begin(t, k)
	if _, err := k.P.HandleCommands(ctx, t1, []message.Record{award(uuid.New())}); err != nil {
		t.Fatal(err)
	}
	second := make(chan error, 1)
	go func() {
		_, err := k.P.HandleCommands(ctx, t2, []message.Record{award(uuid.New())})
		second <- err
	}()
	commit(t, t1)
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	commit(t, t2)
	if got := balances(t, k)["alice"]; got != 20 {
		t.Fatalf("balance after two concurrent awards of 10 = %d, want 20", got)
	}
}

// Reread value (coupon lock: UPDATE ... WHERE locked_by IS NULL OR
// locked_by = saga): the value a saga decided on is checked again when it
// writes, so a saga that read "free" before another took the coupon does
// not take it too.
func TestRereadValueRefusesAStaleDecision(t *testing.T) {
	t.Parallel()
	k := participanttest.New(t, orderapi.Coupon, coupon.Migrations, func(p *participants.Participant) error {
		return coupon.Register(p, coupon.Options{})
	})
	ctx := testkit.Context(t, 30*time.Second)
	if err := coupon.Seed(ctx, k.Pool, k.Schema(), "NAIVE", "SAVE5"); err != nil {
		t.Fatal(err)
	}
	a, b := uuid.New(), uuid.New()

	// Without: both sagas read the coupon free, then write their lock
	// unconditionally: B overwrites A, and A believes it holds a coupon
	// that is B's (a fuzzy read).
	for range 2 {
		var free bool
		if err := k.Pool.QueryRow(ctx, `SELECT locked_by IS NULL FROM coupon.coupons WHERE code = 'NAIVE'`).Scan(&free); err != nil || !free {
			t.Fatalf("naive read: free=%v err=%v", free, err)
		}
	}
	for _, s := range []uuid.UUID{a, b} {
		if _, err := k.Pool.Exec(ctx, `UPDATE coupon.coupons SET locked_by = $1, locked_at = now() WHERE code = 'NAIVE'`, s); err != nil {
			t.Fatal(err)
		}
	}
	if locks := couponLocks(t, k); locks["NAIVE"] != b {
		t.Fatalf("naive lock holder %s, want the anomaly: B overwrote A", locks["NAIVE"])
	}

	// With: the coupon participant rereads at the write: B is refused.
	lock := func(s uuid.UUID) participanttest.Answer {
		return k.Send(participanttest.Command(t, s, orderapi.StepLockCoupon, message.Forward, 1, orderapi.LockCoupon{OrderID: "o-" + s.String()[:8], Code: "SAVE5"}))[0]
	}
	participanttest.WantReply(t, lock(a), message.Success, "")
	participanttest.WantReply(t, lock(b), message.Failure, orderapi.ReasonCouponTaken)
	if locks := couponLocks(t, k); locks["SAVE5"] != a {
		t.Fatalf("SAVE5 locked by %s, want A", locks["SAVE5"])
	}
}

// Version file (the SDK barrier, participants/barrier.go, and the
// inventory's reservation state): a compensation that overtakes its
// forward is recorded, so the late forward is refused instead of taking
// stock for a saga that has already been undone.
func TestVersionFileRefusesAForwardAfterItsCompensation(t *testing.T) {
	t.Parallel()
	k := inventoryKit(t, map[string]int{"sku-a": 5, "sku-naive": 5})
	ctx := testkit.Context(t, 30*time.Second)
	saga := uuid.New()

	// Without a record of what was done: the compensation finds nothing to
	// undo and forgets; the forward that arrives after it reserves, and
	// the units stay reserved for a saga that is over.
	mustExec(t, k.Pool, `UPDATE inventory.items SET available = available - 2, reserved = reserved + 2 WHERE sku = 'sku-naive'`)
	if s := stock(t, k)["sku-naive"]; s.Reserved != 2 {
		t.Fatalf("naive: %+v, want the anomaly: 2 units reserved after the compensation", s)
	}

	// With: the barrier records the empty compensation and closes the
	// forward; the late forward is answered failure and changes nothing.
	participanttest.WantReply(t, k.Send(reserve(t, saga, message.Compensate, "sku-a", 2))[0], message.Success, participants.ReasonEmpty)
	participanttest.WantReply(t, k.Send(reserve(t, saga, message.Forward, "sku-a", 2))[0], message.Failure, participants.ReasonCompensated)
	if s := stock(t, k)["sku-a"]; s != (inventory.Item{Available: 5}) {
		t.Fatalf("stock after a forward that came after its compensation = %+v, want 5 available", s)
	}
	if hs, err := holds.For(k.Schema()).BySaga(ctx, k.Pool, saga); err != nil || len(hs) != 0 {
		t.Fatalf("holds of the compensated saga = %+v (%v), want none", hs, err)
	}
}

// By value (payment limit): the amount decides the path. An order over the
// limit is not charged automatically (its saga compensates and releases
// what it held); a participant without the rule charges it like any other.
func TestByValueKeepsLargeOrdersOffTheAutomaticPath(t *testing.T) {
	t.Parallel()
	const limit = 10_000
	for _, c := range []struct {
		name        string
		limit       int64
		wantCharges int
	}{
		{"without the rule", math.MaxInt64, 1},
		{"with the rule", limit, 0},
	} {
		k := participanttest.New(t, orderapi.Payment, payment.Migrations, func(p *participants.Participant) error {
			return payment.Register(p, payment.Options{LimitCents: c.limit})
		})
		big := uuid.New()
		a := k.Send(participanttest.Command(t, big, orderapi.StepChargePayment, message.Forward, 1,
			orderapi.ChargePayment{OrderID: "o-big", Customer: "carol", AmountCents: limit + 1}))[0]
		charges, err := payment.Charges(testkit.Context(t, 30*time.Second), k.Pool, k.Schema())
		if err != nil {
			t.Fatal(err)
		}
		if charges[big] != c.wantCharges {
			t.Fatalf("%s: the large order was charged %d times (answer %s %q), want %d", c.name, charges[big], a.Reply.Outcome, a.Reply.Reason, c.wantCharges)
		}
		if c.wantCharges == 0 {
			participanttest.WantReply(t, a, message.Failure, orderapi.ReasonPaymentDeclined)
		}
	}
}

func begin(t *testing.T, k *participanttest.Kit) pgx.Tx {
	t.Helper()
	tx, err := k.Pool.Begin(testkit.Context(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

func commit(t *testing.T, tx pgx.Tx) {
	t.Helper()
	if err := tx.Commit(testkit.Context(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
}

func mustExec(t *testing.T, db participants.DB, sql string, args ...any) {
	t.Helper()
	if _, err := db.Exec(testkit.Context(t, 30*time.Second), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func record(t *testing.T, cmd message.Command) message.Record {
	t.Helper()
	v, err := message.EncodeCommand(cmd)
	if err != nil {
		t.Fatal(err)
	}
	r := message.Record{Topic: message.CommandTopic("", orderapi.Points), Key: []byte(cmd.AggregateID), Value: v}
	for key, h := range message.Headers(cmd.MessageID, cmd.SagaID) {
		r.Headers = append(r.Headers, message.Header{Key: key, Value: []byte(h)})
	}
	return r
}

func balances(t *testing.T, k *participanttest.Kit) map[string]int64 {
	t.Helper()
	return participanttest.Read(t, k.Pool, k.Schema(), points.Balances)
}

func couponLocks(t *testing.T, k *participanttest.Kit) map[string]uuid.UUID {
	t.Helper()
	return participanttest.Read(t, k.Pool, k.Schema(), coupon.Locks)
}

func stock(t *testing.T, k *participanttest.Kit) map[string]inventory.Item {
	t.Helper()
	return participanttest.Read(t, k.Pool, k.Schema(), inventory.Stock)
}
