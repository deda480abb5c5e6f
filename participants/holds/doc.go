// Package holds is the participant SDK's helper for semantic locks: a
// step that takes units of a resource (stock, seats, credit) for a saga
// records who holds them, a later step of the saga confirms them (the
// units are committed: sold, booked) and the step's compensation releases
// them. Until then the units are not available to another saga, and an
// operator can ask "who is holding this?".
//
// A hold is a row of the holds table in the participant's schema (created
// by the SDK's barrier migrations, see participants.Participant.Migrations):
// (saga, step, resource) → quantity, state (held, confirmed, released),
// since, settled_at. Every operation takes a participants.DB: pass the
// handler's transaction, so the hold commits or rolls back with the
// handler's own writes and the barrier's record. Every operation is
// idempotent under redelivery: Take of a hold that exists returns it,
// Confirm and Release return only the holds they settle now, so the
// caller moves its units exactly once.
//
//	h := holds.For(p.Schema())
//	reserve := func(ctx context.Context, tx pgx.Tx, cmd message.Command) (participants.Result, error) {
//		// ... move qty units of sku from available to reserved ...
//		_, _, err := h.Take(ctx, tx, cmd.SagaID, cmd.Step, sku, qty)
//		return participants.Success(nil), err
//	}
//	release := func(ctx context.Context, tx pgx.Tx, cmd message.Command) (participants.Result, error) {
//		released, err := h.Release(ctx, tx, cmd.SagaID, cmd.Step)
//		// ... give back the units of each released hold ...
//	}
//	confirm := func(ctx context.Context, tx pgx.Tx, cmd message.Command) (participants.Result, error) {
//		confirmed, err := h.Confirm(ctx, tx, cmd.SagaID, "reserve")
//		// ... move the units of each confirmed hold from reserved to sold ...
//	}
//
// The reference inventory participant (participants/inventory) holds stock
// this way and the place-order saga confirms it after its pivot, so no
// reservation outlives its saga. The participants command serves the holds
// read-only at GET /holds. Why a saga needs semantic locks at all:
// docs/isolation.md.
package holds
