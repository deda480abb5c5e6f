// Package points is the reference participant of the award-points step of
// the place-order saga (orderapi.StepAwardPoints), a retryable step after
// the pivot: it has no business "no" and no compensation (Register passes a
// nil compensate handler); the orchestrator re-sends it until it succeeds.
//
// Business rule: an order earns its points once. The forward action
// inserts entries(order_id, saga_id, customer, points) ... ON CONFLICT DO
// NOTHING, and only when the entry was inserted adds the points to the
// customer's balance with an additive upsert (points = points + $n), so a
// repeated command, or another saga for the same order, neither adds an
// entry nor counts twice. Success carries the customer's balance. For every
// customer, balances.points equals the sum of its entries.
//
// Fault injection for demos and tests: with probability Options.FailRate the
// handler answers RetryLater(orderapi.ReasonTransient) before touching
// anything. The draw is a deterministic function of (Options.Seed, step,
// saga id, attempt), so a run is reproducible for a seed, and every attempt
// of a saga has its own, independent chance.
//
// Tables (in the participant's schema, see Migrations): entries, balances.
// Entries and Balances are the helpers invariant checks use.
package points
