// Package inventory is the reference participant of the reserve-inventory
// step of the place-order saga (orderapi.StepReserveInventory), a
// compensable step before the pivot.
//
// Business rule: an order reserves Qty units of one SKU. Stock lives in
// items(sku, available, reserved, sold) with CHECK available >= 0 AND
// reserved >= 0, so nothing can ever be oversold. The forward action is one
// commutative, conditional update
//
//	UPDATE items SET available = available - qty, reserved = reserved + qty
//	WHERE sku = $1 AND available >= qty
//
// which takes the row lock for the rest of the transaction, so concurrent
// sagas on the same SKU serialise on that row and never see a stale count.
// It then records reservations(saga_id, order_id, sku, qty, state) with
// state 'reserved'. Not enough stock answers Fail(orderapi.ReasonInsufficientStock),
// an unknown SKU Fail(orderapi.ReasonUnknownSKU); both leave nothing behind.
//
// The semantic lock is the reservation row itself: units moved from
// available to reserved belong to that saga until the compensation releases
// them (available += qty, reserved -= qty, state 'released'). The
// compensation works from the recorded reservation, not from the command
// payload, and finds nothing to do for a saga that reserved nothing. For
// every SKU, available + reserved + sold never changes through reserve and
// release.
//
// Defence in depth beside the SDK barrier: the reservation's primary key is
// the saga id, so a second forward for the same saga answers the first one's
// result without touching stock, and two concurrent copies cannot both
// commit.
//
// Tables (in the participant's schema, see Migrations): items, reservations.
// Seed, Stock and Reservations are the helpers demos and invariant checks use.
package inventory
