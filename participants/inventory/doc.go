// Package inventory is the reference participant of two steps of the
// place-order saga: reserve-inventory (orderapi.StepReserveInventory), a
// compensable step before the pivot, and confirm-stock
// (orderapi.StepConfirmStock), a retryable step after it.
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
// state 'reserved' and takes a hold (package participants/holds: qty units
// of the SKU held by the saga's reserve-inventory step, since now). Not
// enough stock answers Fail(orderapi.ReasonInsufficientStock), an unknown
// SKU Fail(orderapi.ReasonUnknownSKU); both leave nothing behind.
//
// The semantic lock is the reservation and its hold: units moved from
// available to reserved belong to that saga until the compensation
// releases them (available += qty, reserved -= qty, state 'released', hold
// released) or confirm-stock sells them (reserved -= qty, sold += qty,
// state 'sold', hold confirmed). Both work from the recorded reservation,
// not from the command payload, and do their work once: a copy finds the
// reservation settled and changes nothing. A compensation finds nothing to
// do for a saga that reserved nothing; confirm-stock for a saga without a
// held reservation answers Fail(orderapi.ReasonNoReservation). For every
// SKU, available + reserved + sold never changes, and once a saga has
// ended none of its units is left reserved.
//
// Defence in depth beside the SDK barrier: the reservation's primary key is
// the saga id, so a second forward for the same saga answers the first one's
// result without touching stock, and two concurrent copies cannot both
// commit.
//
// Tables (in the participant's schema, see Migrations): items, reservations,
// and the SDK's holds. Seed, Stock and Reservations are the helpers demos
// and invariant checks use; holds.For(schema) lists the holds.
package inventory
