package inbox

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/internal/txhooks"
)

// commitHooks are the functions handlers registered with AfterCommit
// during one batch transaction; mark is where the running handler call
// began, so that its registrations are dropped when its writes are.
type commitHooks struct {
	fns  []func()
	mark int
	// tails are the handler's deferred writes (CommitWith) not sent yet;
	// tailMark is where the running call's began. defer is whether the
	// running call may defer writes at all.
	tails    []*pgx.Batch
	tailMark int
	defer_   bool
	// lazy: the batch's message ids are recorded when it commits
	// (beginLazy), so the handler may be running on a copy of a message
	// seen before: anything but every message applied runs the batch
	// again with the ids recorded first.
	lazy bool
	// prefetched is what the consumer's prefetch returned for the batch.
	prefetched any
}

type hooksKey struct{}

func withHooks(ctx context.Context) (context.Context, *commitHooks) {
	h := &commitHooks{}
	return context.WithValue(ctx, hooksKey{}, h), h
}

func hooksOf(ctx context.Context) *commitHooks {
	h, _ := ctx.Value(hooksKey{}).(*commitHooks)
	return h
}

// AfterCommit registers fn to run once the batch transaction tx (the
// transaction a Handler got, or a savepoint of it) has committed: never if
// it rolls back, and not if the handler's writes are undone first (the call
// failed or panicked, the batch was split, or the handler called Undo).
// Functions run in the order they were registered, on the consumer's
// goroutine, before the offsets are committed to Kafka: they must not
// block (hand work to a goroutine).
//
// For any other transaction it returns false and does nothing: the caller
// owns it and runs fn after its own commit.
func AfterCommit(tx pgx.Tx, fn func()) bool {
	h, ok := txhooks.Of(tx)
	if !ok {
		return false
	}
	h.AfterCommit(fn)
	return true
}

// begin marks the start of a handler call.
func (h *commitHooks) begin() { h.mark, h.tailMark = len(h.fns), len(h.tails) }

// drop forgets what the current handler call registered (AfterCommit and
// the CommitWith writes it has not sent yet).
func (h *commitHooks) drop() {
	clear(h.fns[h.mark:])
	h.fns = h.fns[:h.mark]
	if h.tailMark < len(h.tails) {
		clear(h.tails[h.tailMark:])
		h.tails = h.tails[:h.tailMark]
	}
}

// truncate drops the deferred writes from index i on.
func (h *commitHooks) truncate(i int) {
	if i < len(h.tails) {
		clear(h.tails[i:])
		h.tails = h.tails[:i]
	}
	h.tailMark = min(h.tailMark, i)
}

// takeTails returns the deferred writes and forgets them (they are being
// sent).
func (h *commitHooks) takeTails() []*pgx.Batch {
	t := h.tails
	h.tails, h.tailMark = nil, 0
	return t
}

// commitWith defers b to the commit where the call may (see
// txhooks.Tx.CommitWith).
func (h *commitHooks) commitWith(b *pgx.Batch) bool {
	if h == nil || !h.defer_ || b == nil || b.Len() == 0 {
		return false
	}
	h.tails = append(h.tails, b)
	return true
}

func (h *commitHooks) run() {
	for _, fn := range h.fns {
		fn()
	}
}
