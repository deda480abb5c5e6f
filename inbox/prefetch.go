package inbox

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/message"
)

// Prefetch lets a handler read what it will need in the round trip that
// begins the batch transaction. It is called with the records the handler
// may get (those dead-lettered before the handler are left out; whether a
// record is a copy the dedupe drops is known only after, so copies are
// in) and queues read-only statements in b, after the dedupe insert and
// the savepoint. Their callbacks run when the transaction has begun; the
// value Prefetch returns reaches the handler through Prefetched. An error
// of a queued statement fails the transaction like any statement error
// (the batch is retried by its class). The reads follow the same snapshot
// rules as the handler's own (READ COMMITTED: what was committed when the
// statement ran), so a handler that guards its writes on what it read (a
// version check) stays correct.
type Prefetch func(b *pgx.Batch, recs []message.Record) any

type prefetchKey struct{}

// Prefetched returns the value Config.Prefetch returned for the batch the
// handler was called with, or nil (no Prefetch, or outside a handler).
func Prefetched(ctx context.Context) any {
	return ctx.Value(prefetchKey{})
}
