// Package coupon is the reference participant of the lock-coupon step of the
// place-order saga (orderapi.StepLockCoupon), a compensable step before the
// pivot.
//
// Business rule: a coupon code can be used by one order at a time. The
// semantic lock is coupons.locked_by: the forward action takes it with
//
//	UPDATE coupons SET locked_by = $saga, locked_at = now()
//	WHERE code = $1 AND (locked_by IS NULL OR locked_by = $saga)
//
// so a coupon held by another saga answers Fail(orderapi.ReasonCouponTaken),
// an unknown code Fail(orderapi.ReasonUnknownCoupon), and taking it again for
// the same saga is a no-op success. An order without a code succeeds with
// nothing locked and no discount. Success carries the coupon's discount
// (DiscountCentsDefault unless seeded otherwise).
//
// The compensation frees the coupon only if this saga holds it
// (WHERE code = $1 AND locked_by = $saga): compensating one saga never frees
// a lock another saga took.
//
// Tables (in the participant's schema, see Migrations): coupons(code,
// discount_cents, locked_by, locked_at). Seed and Locks are the helpers
// demos and invariant checks use.
package coupon
