package inbox

import "context"

// commitHooks are the functions handlers registered with AfterCommit
// during one batch transaction; mark is where the running handler call
// began, so that its registrations are dropped when its writes are.
type commitHooks struct {
	fns  []func()
	mark int
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
func (h *commitHooks) begin() { h.mark = len(h.fns) }

// drop forgets what the current handler call registered.
func (h *commitHooks) drop() {
	clear(h.fns[h.mark:])
	h.fns = h.fns[:h.mark]
}

func (h *commitHooks) run() {
	for _, fn := range h.fns {
		fn()
	}
}
