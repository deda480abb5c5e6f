// Package txhooks is the explicit API between the inbox's batch
// transaction and the code of this module that runs inside it (the
// orchestrator's engine, the participant SDK). The transaction an inbox
// Handler gets implements Tx; code that wants to defer writes to the
// commit, run work after it or read what was prefetched asks the
// transaction it was given, never its context.
package txhooks

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/message"
)

// Tx is an inbox batch transaction (or a savepoint of one) as a Handler
// gets it.
type Tx interface {
	pgx.Tx
	// AfterCommit registers fn to run once the batch transaction has
	// committed: never if it rolls back, and not if the handler call that
	// registered it is undone (failed, panicked, split off). Functions
	// run in order, on the consumer's goroutine, before offsets are
	// committed: they must not block.
	AfterCommit(fn func())
	// CanDefer reports whether CommitWith may be used: not while the
	// batch is split to isolate a failing message (then every error must
	// surface in the call that caused it).
	CanDefer() bool
	// CommitWith defers the statements of b to the round trip that
	// commits the batch (or to just before the next statement sent in the
	// transaction, so later reads see them). Queue only statements whose
	// results nothing needs and that raise an error rather than pass
	// silently. It returns false, deferring nothing, where CanDefer is
	// false or b is empty: send b yourself then.
	CommitWith(b *pgx.Batch) bool
	// Flush sends what is deferred now (BEGIN too, if it has not gone
	// yet), so that the callbacks of deferred statements have run.
	Flush(ctx context.Context) error
	// Prefetched is the value the consumer's Prefetch returned for this
	// batch, or nil.
	Prefetched() any
}

// ErrRerun, wrapped in a handler's error, asks the inbox to undo the
// handler's call (back to the savepoint it runs under) and make it again
// at once, in the same transaction, with nothing deferred (CanDefer
// false): the handler wrote ahead of a check that has now failed (a
// participant's forward answered other than success, a barrier row a copy
// recorded first), and the same commands taken the careful way answer it.
// A deferred write failing when a later statement of the call sends it is
// handled alike. The inbox does it only in a call that could defer.
var ErrRerun = errors.New("the batch must run again with nothing deferred")

// Of returns tx as an inbox batch transaction, or false when it is the
// caller's own transaction (whose commit nothing here sees).
func Of(tx pgx.Tx) (Tx, bool) {
	h, ok := tx.(Tx)
	return h, ok
}

// Prefetch queues, in the round trip that begins each batch transaction,
// the reads a handler will need, after the dedupe insert: it is called
// with the records the handler may get (copies included: whether a record
// is one is known only after) and its value reaches the handler through
// Tx.Prefetched. A queued statement's error fails the transaction like
// any statement's. The reads see what was committed when they ran (READ
// COMMITTED), as the handler's own would. A Prefetch that queues nothing
// for a batch (it has what the handler needs) lets a batch of well-formed
// records that may defer begin lazily: nothing is sent before the
// handler's first statement, and the ids are recorded with the COMMIT.
// It may be called before the batch is known to begin that way; its
// queued reads then run in the first round trip as usual.
type Prefetch func(b *pgx.Batch, recs []message.Record) any

// SetPrefetch sets the Prefetch of an inbox consumer configuration (cfg
// is a *inbox.Config). Package inbox sets it at init; the orchestrator's
// service calls it for its reply consumer.
var SetPrefetch func(cfg any, p Prefetch)
