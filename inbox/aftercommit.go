package inbox

import (
	"context"

	"github.com/jackc/pgx/v5"
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

// AfterCommit registers fn to run once the batch transaction the handler
// was called in has committed: never if it rolls back, and not if the
// handler's writes are undone first (the call failed or panicked, the batch
// was split, or the handler called Undo). Functions run in the order they
// were registered, on the consumer's goroutine, before the offsets are
// committed to Kafka: they must not block (hand work to a goroutine).
//
// ctx must be the context the Handler got. Outside a handler it returns
// false and does nothing: the caller owns the transaction and runs fn after
// its own commit.
func AfterCommit(ctx context.Context, fn func()) bool {
	h := hooksOf(ctx)
	if h == nil {
		return false
	}
	h.fns = append(h.fns, fn)
	return true
}

// InHandler reports whether ctx is an inbox handler's, whose transaction's
// commit AfterCommit reports.
func InHandler(ctx context.Context) bool { return hooksOf(ctx) != nil }

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

// takeTails returns the deferred writes and forgets them (they are being
// sent).
func (h *commitHooks) takeTails() []*pgx.Batch {
	t := h.tails
	h.tails, h.tailMark = nil, 0
	return t
}

// CanDefer reports whether the handler may defer its last writes to the
// commit with CommitWith: inside a handler whose batch is not being split
// to isolate a failing message (then every error must surface in the call
// that caused it).
func CanDefer(ctx context.Context) bool {
	h := hooksOf(ctx)
	return h != nil && h.defer_
}

// CommitWith defers the statements of b to the round trip that commits the
// batch transaction (they are sent with COMMIT), or, if the handler or the
// inbox sends any other statement in the transaction first, to just before
// that statement, so every later read sees them. Use it for the last
// writes of a handler whose results nothing needs: queue statements
// without callbacks that can fail (their results are read after COMMIT
// ran), and make a statement that must not pass raise an error instead
// (the transaction then rolls back and the batch runs again at once with
// nothing deferred: CanDefer is false, the handler sends its writes itself
// and sees the error in its own call). Like AfterCommit, deferred writes are dropped with the
// handler's other writes (a failed call, Undo, a split). It returns false,
// and defers nothing, where CanDefer is false: send b yourself then.
func CommitWith(ctx context.Context, b *pgx.Batch) bool {
	h := hooksOf(ctx)
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
