// Package shipping is the reference participant of the create-shipment step
// of the place-order saga (orderapi.StepCreateShipment), a retryable step
// after the pivot: it has no business "no" and no compensation (Register
// passes a nil compensate handler); the orchestrator re-sends it until it
// succeeds.
//
// Business rule: an order ships at most once. The forward action inserts
// into shipments ... ON CONFLICT DO NOTHING, keyed by order_id (and unique
// per saga), so running it again, for the same saga or for another saga of
// the same order, answers the existing shipment and creates nothing.
//
// Fault injection for demos and tests: with probability Options.FailRate the
// handler answers RetryLater(orderapi.ReasonTransient) before touching
// anything. The draw is a deterministic function of (Options.Seed, step,
// saga id, attempt), so a run is reproducible for a seed, and every attempt
// of a saga has its own, independent chance.
//
// Tables (in the participant's schema, see Migrations):
// shipments(order_id, shipment_id, saga_id, customer, sku, qty, created_at).
// Shipments is the helper invariant checks use.
package shipping
