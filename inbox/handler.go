package inbox

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/message"
)

// Outcome says what became of one message of a batch.
type Outcome uint8

const (
	// Applied: the message was handled; its writes commit with the batch.
	Applied Outcome = iota
	// Duplicate: the handler found the message's effect already there and
	// wrote nothing (the inbox's own dedupe never shows a handler a message
	// id it has seen; this is for handlers with dedupe of their own).
	Duplicate
	// DeadLetter: the message itself is bad (Result.Reason says why); the
	// handler wrote nothing for it. It goes to the dead-letter topic and the
	// partition moves on.
	DeadLetter
	// RetryLater: the message cannot be handled now for a reason that may
	// pass (Result.Reason). The whole call is rolled back and retried with
	// backoff; after Config.IsolateAfter failed attempts the batch is split
	// until the failing message stands alone, and a message that still
	// cannot be handled then is dead-lettered with its last reason.
	RetryLater
)

func (o Outcome) String() string {
	switch o {
	case Applied:
		return "applied"
	case Duplicate:
		return "duplicate"
	case DeadLetter:
		return "dead letter"
	case RetryLater:
		return "retry later"
	}
	return fmt.Sprintf("outcome(%d)", o)
}

// Result is a handler's answer for one message.
type Result struct {
	Outcome Outcome
	// Reason explains a DeadLetter or RetryLater outcome; it becomes the
	// dead-letter record's reason header (truncated to MaxReasonBytes).
	Reason string
	// Stray marks a DeadLetter message that answers nothing its consumer's
	// side sent (a stray reply): its row in the dead_letters table is
	// marked stray, and retention purges it after its own window
	// (retention.Config.StrayDeadLetterAfter) even if it was never
	// redriven, since no operator needs to act on it.
	Stray bool
}

// Handler handles the new messages of a batch (never a duplicate of a
// committed message id, never one whose headers are unusable) inside tx and
// returns one Result per message, in order. A single message is a batch of
// one.
//
// A nil error with the results means: the writes of every Applied message
// commit with the batch; DeadLetter messages must have no writes at all. A
// RetryLater result anywhere makes the inbox roll the call back, as an
// error does.
//
// An error (or a panic) means none of the call's writes may be kept: the
// inbox rolls back to the savepoint it took before the call and decides by
// the error's class (see Classify). A permanent error (Permanent, an error
// wrapping message.ErrInvalid, a panic, or a Postgres data error about the
// content: SQLSTATE classes 22 and 23, and 54) makes the inbox split the
// batch and call the Handler on each half until the offending message
// stands alone; that message is dead-lettered with the error and the rest
// is applied. A transient error (a lost connection, a serialization
// failure, a deadlock, anything unclassified) rolls the whole transaction
// back; the batch is retried with backoff, and after Config.IsolateAfter
// attempts it is split the same way so that one message that keeps failing
// cannot hold up the others.
//
// The Handler must not commit or roll back tx, nor leave a savepoint of its
// own open, nor change rs (a retry or a split within the batch's
// transaction passes the same records again). ctx is not cancelled when
// Run's context is, so that the batch in flight can finish.
type Handler func(ctx context.Context, tx pgx.Tx, rs []message.Record) ([]Result, error)

// EachMessage builds a Handler from a function of one message. Each message
// runs in a savepoint of its own: a permanent error (see Classify) rolls
// back that message's writes and dead-letters it; any other error fails the
// call (transient: the batch is retried).
func EachMessage(f func(ctx context.Context, tx pgx.Tx, r message.Record) error) Handler {
	return func(ctx context.Context, tx pgx.Tx, ms []message.Record) ([]Result, error) {
		out := make([]Result, len(ms))
		for i, m := range ms {
			sp, err := tx.Begin(ctx)
			if err != nil {
				return nil, fmt.Errorf("savepoint: %w", err)
			}
			h := hooksOf(ctx)
			mark := 0
			if h != nil {
				mark = len(h.fns)
			}
			herr := callOne(ctx, sp, m, f)
			if herr != nil && h != nil {
				clear(h.fns[mark:]) // this message's writes are rolled back
				h.fns = h.fns[:mark]
				// (its deferred writes go with the savepoint's rollback)
			}
			if herr == nil {
				if err := sp.Commit(ctx); err != nil {
					return nil, fmt.Errorf("release savepoint: %w", err)
				}
				continue
			}
			if Classify(herr) != ClassPermanent {
				return nil, herr
			}
			if err := sp.Rollback(ctx); err != nil {
				return nil, fmt.Errorf("roll back to savepoint after %q: %w", herr.Error(), err)
			}
			out[i] = Result{Outcome: DeadLetter, Reason: herr.Error()}
		}
		return out, nil
	}
}

func callOne(ctx context.Context, tx pgx.Tx, m message.Record, f func(context.Context, pgx.Tx, message.Record) error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &panicError{value: p, stack: debug.Stack()}
		}
	}()
	return f(ctx, tx, m)
}

// panicError is a recovered handler panic: permanent for the message.
type panicError struct {
	value any
	stack []byte
}

func (e *panicError) Error() string { return fmt.Sprintf("handler panicked: %v", e.value) }

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks err as a property of the message itself: retrying cannot
// help, so the message is dead-lettered. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether Classify puts err in ClassPermanent.
func IsPermanent(err error) bool { return Classify(err) == ClassPermanent }

// errIsPermanentMark reports whether err was marked by us or the message
// package as a property of the message.
func errIsPermanentMark(err error) bool {
	var p *permanentError
	var pe *panicError
	return errors.As(err, &p) || errors.As(err, &pe) || errors.Is(err, message.ErrInvalid)
}

func stack() []byte { return debug.Stack() }

// Undo rolls back every write the Handler made so far in this call; the
// inbox's savepoint stays set, so the Handler can go on in the same call.
// It lets a handler try a fast path and fall back to a slower one.
func Undo(ctx context.Context, tx pgx.Tx) error {
	// What it registered with AfterCommit and CommitWith goes with its
	// writes (dropped first: a deferred write is not sent to be undone).
	if h := hooksOf(ctx); h != nil {
		h.drop()
	}
	if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT "+batchSavepoint); err != nil {
		return fmt.Errorf("inbox: undo the handler's writes: %w", err)
	}
	return nil
}
