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
// Provider mode (RegisterProvider, ProviderMigrations): the charge is made
// by an outside payment provider, the safe way (package
// participants/external): the handler records the charge to make and
// answers accepted; the returned Caller makes it after the commit with an
// idempotency key derived from the step's barrier key (retried, bounded,
// behind a circuit, resumed after a crash) and completes the step with
// the provider's charge id, appending the ledger row in that transaction,
// or fails it on a decline; the orchestrator's query of the accepted step
// looks the charge up at the provider. The provider's own count is what
// proves a customer charged once (participants/external/fakeprovider).
//
// Tables (in the participant's schema, see Migrations): ledger(id, saga_id,
// order_id, customer, amount_cents, kind, created_at). Charges is the helper
// invariant checks use.
package payment
