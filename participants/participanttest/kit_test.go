package participanttest_test

import (
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/participants"
	"github.com/sagaflow/sagaflow/participants/coupon"
	"github.com/sagaflow/sagaflow/participants/participanttest"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

// The kit runs the coupon participant behind the real barrier: a lock, a
// copy answered from the barrier, a second order refused, compensations
// (one empty), a forward after its compensation refused, and an unknown step dead-lettered, with the
// effects read back.
func TestKitRunsHandlersBehindTheBarrier(t *testing.T) {
	t.Parallel()
	k := participanttest.New(t, "coupon_kit", coupon.Migrations, func(p *participants.Participant) error {
		return coupon.Register(p, coupon.Options{})
	})
	if err := coupon.Seed(t.Context(), k.Pool, k.Schema(), "SAVE10"); err != nil {
		t.Fatal(err)
	}
	first, second := uuid.New(), uuid.New()
	lock := func(saga uuid.UUID) message.Command {
		return participanttest.Command(t, saga, orderapi.StepLockCoupon, message.Forward, 1, orderapi.LockCoupon{OrderID: "o-" + saga.String()[:4], Code: "SAVE10"})
	}
	a := lock(first)
	copyA := a
	copyA.MessageID = uuid.New()
	ans := k.Send(a, copyA, lock(second))
	participanttest.WantReply(t, ans[0], message.Success, "")
	participanttest.WantReply(t, ans[1], message.Success, "")
	if string(ans[0].Reply.Payload) != string(ans[1].Reply.Payload) {
		t.Fatalf("copy answered %s, the first %s: want the same payload", ans[1].Reply.Payload, ans[0].Reply.Payload)
	}
	participanttest.WantReply(t, ans[2], message.Failure, orderapi.ReasonCouponTaken)
	if locks := participanttest.Read(t, k.Pool, k.Schema(), coupon.Locks); locks["SAVE10"] != first {
		t.Fatalf("locks %v, want SAVE10 held by %s", locks, first)
	}

	unlock := participanttest.Command(t, first, orderapi.StepLockCoupon, message.Compensate, 1, orderapi.LockCoupon{OrderID: "o", Code: "SAVE10"})
	closeSecond := participanttest.Command(t, second, orderapi.StepLockCoupon, message.Compensate, 1, orderapi.LockCoupon{OrderID: "o", Code: "SAVE10"})
	unknown := participanttest.Command(t, uuid.New(), "no-such-step", message.Forward, 1, nil)
	third := uuid.New()
	closeThird := participanttest.Command(t, third, orderapi.StepLockCoupon, message.Compensate, 1, orderapi.LockCoupon{OrderID: "o", Code: "SAVE10"})
	ans = k.Send(unlock, closeSecond, unknown, closeThird)
	participanttest.WantReply(t, ans[0], message.Success, "")
	participanttest.WantReply(t, ans[1], message.Success, participants.ReasonEmpty)
	participanttest.WantReply(t, ans[3], message.Success, participants.ReasonEmpty)
	if !strings.Contains(ans[2].DeadLetter, "unknown step") {
		t.Fatalf("unknown step: %+v, want it dead-lettered naming the step", ans[2])
	}
	if locks := participanttest.Read(t, k.Pool, k.Schema(), coupon.Locks); len(locks) != 0 {
		t.Fatalf("locks %v after the compensation, want none", locks)
	}
	participanttest.WantReply(t, k.Send(copyA)[0], message.Success, "")
	// A forward arriving after its compensation is refused, never run.
	participanttest.WantReply(t, k.Send(lock(third))[0], message.Failure, participants.ReasonCompensated)
	if locks := participanttest.Read(t, k.Pool, k.Schema(), coupon.Locks); len(locks) != 0 {
		t.Fatalf("locks %v after a refused forward, want none", locks)
	}
}
