// Package payment is the reference participant of the charge-payment step of
// the place-order saga (orderapi.StepChargePayment), the saga's PIVOT: once
// it succeeds there is no way back, so it has no compensation (Register
// passes a nil compensate handler).
//
// Business rule: a charge above Options.LimitCents (LimitCentsDefault unless
// set) is declined with Fail(orderapi.ReasonPaymentDeclined) and leaves
// nothing behind; otherwise one 'charge' row is appended to the ledger and
// Success carries its id as the payment id.
//
// Defence in depth beside the SDK barrier: the ledger has UNIQUE (saga_id,
// kind), so a saga is charged at most once even if the forward ran twice; a
// repeated forward answers the first charge's payment id. The pivot is
// re-sent by the orchestrator until it gets a definite answer, which makes
// this idempotency essential.
//
// Tables (in the participant's schema, see Migrations): ledger(id, saga_id,
// order_id, customer, amount_cents, kind, created_at). Charges is the helper
// invariant checks use.
package payment
