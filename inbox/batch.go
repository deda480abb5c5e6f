package inbox

import (
	"context"
	"errors"
	"fmt"
	"github.com/sagaflow/sagaflow/internal/pgid"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/internal/backoff"
	"github.com/sagaflow/sagaflow/internal/txhooks"
	"github.com/sagaflow/sagaflow/message"
)

// batchSavepoint is the savepoint the Handler runs under; rolling back to
// it undoes the handler's writes and keeps the inbox rows. Splitting a
// batch sets it again (same name, nested) before each part.
const batchSavepoint = "sagaflow_inbox"

// singleTries is how often a message standing alone is tried within one
// attempt, after transient errors, before it is dead-lettered (a deadlock
// or a serialization failure rarely strikes three times in a row). The
// tries follow each other at once: the transaction is open and holds the
// locks of the parts of the batch already applied, so waiting there would
// make every other writer of those rows wait too. The waiting is done
// before, between the attempts of the whole batch (IsolateAfter of them,
// with backoff and no transaction open).
const singleTries = 3

// handlerError is a transient failure of the Handler itself (as opposed to
// the inbox's own statements); enough of them in a row isolate the batch.
type handlerError struct {
	err error
	// deferred: the handler's deferred writes (CommitWith) failed. The
	// batch is retried at once with nothing deferred, so a write that must
	// fail fails in the call that sent it, where the handler sees it.
	deferred bool
	// transient: a deferred error that is also a transient failure of the
	// handler's (a batch that began lazily): counted as one.
	transient bool
}

func (e *handlerError) Error() string { return e.err.Error() }
func (e *handlerError) Unwrap() error { return e.err }

// errLazy is what fails a batch that began lazily (beginLazy) when the
// handler did anything but apply every message: the message may be a copy,
// which only the dedupe insert before the handler tells. The batch runs
// again at once, its ids recorded first (as with a failed deferred write).
// With failed the handler's call failed (counted as an attempt when the
// failure is transient); else it answered something other than Applied.
func errLazy(err error, failed bool) error {
	return &handlerError{err: fmt.Errorf("%w (the batch runs again with its message ids recorded first)", err), deferred: true,
		transient: failed && Classify(err) == ClassTransient}
}

// retryLater is a Handler's RetryLater result as an error.
type retryLater struct {
	offset int64
	reason string
}

func (e *retryLater) Error() string {
	return fmt.Sprintf("message at offset %d: retry later: %s", e.offset, e.reason)
}

// runBatch runs the batch until it commits, retrying with backoff. It
// returns errStopped if ctx ends while waiting to retry.
func (c *Consumer) runBatch(ctx context.Context, w *kafka.Writer, batch []kafka.Message) error {
	start := time.Now()
	for _, m := range batch {
		if !m.Time.IsZero() {
			c.mWait.Observe(max(start.Sub(m.Time), 0).Seconds())
		}
	}
	// The batch runs to its end even when ctx is cancelled meanwhile.
	work := context.WithoutCancel(ctx)
	handlerFailures := 0
	noDefer := false
	for attempt := 1; ; attempt++ {
		isolate := handlerFailures >= c.cfg.IsolateAfter
		res, err := c.process(work, w, batch, isolate, noDefer)
		if err == nil {
			c.mMessages.Add(float64(res.handled))
			c.mDuplicates.Add(float64(res.duplicates))
			c.mDLQ.Add(float64(res.dead))
			c.mBatch.Observe(float64(len(batch)))
			c.mBatchTime.Observe(time.Since(start).Seconds())
			return nil
		}
		var he *handlerError
		if errors.As(err, &he) && he.deferred && !noDefer {
			c.mReruns.Inc()
			if he.transient {
				// The handler failed: an attempt like any other,
				// retried at once.
				c.mErrors.Inc()
				handlerFailures++
			}
			// Deferring is only a saving of round trips: the same batch
			// again at once, its ids recorded first and its writes sent
			// as the handler makes them (a version conflict of the
			// engine, a barrier row a copy recorded first: the handler
			// then takes its other path; a copy of a message seen
			// before: skipped).
			noDefer = true
			c.log.Debug("inbox: a deferred write failed or a lazily begun batch did not apply every message; the batch runs again at once with its ids recorded first and nothing deferred",
				"err", err, "messages", len(batch), "first_topic", batch[0].Topic, "first_partition", batch[0].Partition, "first_offset", batch[0].Offset)
			continue
		}
		c.mErrors.Inc()
		if he != nil {
			handlerFailures++
		}
		wait := c.backoff(attempt)
		c.log.Warn("inbox: batch failed; rolled back, will retry",
			"err", err, "class", Classify(err).String(), "attempt", attempt, "retry_in", wait, "messages", len(batch),
			"first_topic", batch[0].Topic, "first_partition", batch[0].Partition, "first_offset", batch[0].Offset,
			"isolate_next", handlerFailures >= c.cfg.IsolateAfter)
		if !backoff.Sleep(ctx, wait) {
			return errStopped
		}
	}
}

type batchResult struct {
	handled, duplicates, dead int
}

// dead is a message on its way to the dead-letter topic.
type dead struct {
	m      kafka.Message
	reason string
	stray  bool // Result.Stray
}

// item is one message of a batch with what the batch decided about it.
type item struct {
	m      kafka.Message
	id     uuid.UUID
	bad    string // non-empty: dead-letter without handling, for this reason
	repeat bool   // same id earlier in the batch
}

// process runs one batch in one transaction. Any error means the
// transaction was rolled back and the batch must be retried. With isolate,
// a transient handler error splits the batch as a permanent one does.
//
// With noDefer the handler's CommitWith defers nothing (CanDefer is false).
func (c *Consumer) process(ctx context.Context, w *kafka.Writer, batch []kafka.Message, isolate, noDefer bool) (res batchResult, err error) {
	items := make([]item, len(batch))
	seen := make(map[uuid.UUID]bool, len(batch))
	ids := make([]uuid.UUID, 0, len(batch))
	topics := make([]string, 0, len(batch))
	for i, m := range batch {
		items[i].m = m
		id, reason := c.precheck(m)
		switch {
		case reason != "":
			items[i].bad = reason
		case seen[id]:
			items[i].id, items[i].repeat = id, true
		default:
			items[i].id = id
			seen[id] = true
			ids = append(ids, id)
			topics = append(topics, m.Topic)
		}
	}

	ctx, hooks := withHooks(ctx)
	hooks.defer_ = !isolate && !noDefer
	// A batch of well-formed messages for a handler that reads nothing
	// ahead records its ids at the end (one round trip fewer): see
	// beginLazy.
	hooks.lazy = hooks.defer_ && len(ids) > 0
	for _, it := range items {
		hooks.lazy = hooks.lazy && it.bad == ""
	}
	// BEGIN, the dedupe insert and the savepoint the handler runs under go
	// to Postgres in one round trip, with the handler's prefetch reads. A
	// prefetch that reads nothing for this batch (it has what it needs)
	// leaves it lazy.
	var queue func(*pgx.Batch)
	if c.cfg.prefetch != nil {
		// The records the handler may get: well-formed, first in the
		// batch (whether they are copies is known only after).
		cand := make([]kafka.Message, 0, len(items))
		for _, it := range items {
			if it.bad == "" && !it.repeat {
				cand = append(cand, it.m)
			}
		}
		recs := toRecords(cand)
		var first *pgx.Batch
		if hooks.lazy {
			first = &pgx.Batch{}
			hooks.prefetched = c.cfg.prefetch(first, recs)
			hooks.lazy = first.Len() == 0
		}
		if !hooks.lazy {
			queue = func(b *pgx.Batch) {
				if first != nil {
					// Queued once already: the same reads, and the
					// result they fill.
					b.QueuedQueries = append(b.QueuedQueries, first.QueuedQueries...)
					first = nil
					return
				}
				hooks.prefetched = c.cfg.prefetch(b, recs)
			}
		}
	}
	var tx pgx.Tx
	var fresh map[uuid.UUID]bool
	if hooks.lazy {
		tx, fresh, err = beginLazy(ctx, c.pool, c.table, ids, topics, hooks)
	} else {
		tx, fresh, err = beginDeduped(ctx, c.pool, c.table, ids, topics, queue, hooks)
	}
	if err != nil {
		return res, fmt.Errorf("%w (batch of %d messages)", err, len(batch))
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	var ms []kafka.Message
	var msIdx []int
	for i, it := range items {
		if it.bad == "" && !it.repeat && fresh[it.id] {
			ms = append(ms, it.m)
			msIdx = append(msIdx, i)
		}
	}
	results := make([]Result, len(items))
	if len(ms) > 0 {
		rs, err := c.apply(ctx, tx, ms, toRecords(ms), isolate)
		if err != nil {
			return res, err
		}
		for k, i := range msIdx {
			results[i] = rs[k]
			if hooks.lazy && rs[k].Outcome != Applied {
				return res, errLazy(fmt.Errorf("inbox: the handler answered %s for the message at offset %d", rs[k].Outcome, ms[k].Offset), false)
			}
		}
	}

	var deads []dead
	var forget []uuid.UUID
	for i, it := range items {
		switch {
		case it.bad != "":
			deads = append(deads, dead{m: it.m, reason: it.bad})
		case it.repeat || !fresh[it.id]:
			res.duplicates++
		case results[i].Outcome == DeadLetter:
			forget = append(forget, it.id)
			reason := results[i].Reason
			if reason == "" {
				reason = "dead-lettered by the handler (no reason given)"
			}
			c.log.Warn("inbox: message dead-lettered", message.AttrMessageIDHash, message.IDHash(it.id), "topic", it.m.Topic,
				"partition", it.m.Partition, "offset", it.m.Offset, "reason", cleanText(reason, MaxReasonBytes))
			deads = append(deads, dead{m: it.m, reason: reason, stray: results[i].Stray})
		case results[i].Outcome == Duplicate:
			res.duplicates++
		default:
			res.handled++
		}
	}
	if len(forget) > 0 {
		// A dead-lettered message leaves no inbox row: replayed once its
		// cause is fixed, it is handled.
		if _, err := tx.Exec(ctx, "DELETE FROM "+c.table+" WHERE message_id = ANY($1)", pgid.UUIDs(forget)); err != nil {
			return res, fmt.Errorf("inbox: forget %d dead-lettered message ids: %w", len(forget), err)
		}
	}
	if len(deads) > 0 {
		if err = c.recordDead(ctx, tx, deads); err != nil {
			return res, err
		}
		if err = c.publishDead(ctx, w, deads); err != nil {
			return res, err
		}
		res.dead = len(deads)
	}
	if err = tx.Commit(ctx); err != nil {
		return res, fmt.Errorf("inbox: commit batch transaction (%d messages): %w", len(batch), err)
	}
	hooks.run()
	return res, nil
}

// apply runs the Handler on ms (recs: the same messages as records) under
// batchSavepoint (already set) and returns a Result per message. A permanent error (and, with isolate, a
// transient one) splits ms in halves, each under a new savepoint, until the
// failing message stands alone and is dead-lettered. Any returned error
// means the transaction must be rolled back.
func (c *Consumer) apply(ctx context.Context, tx pgx.Tx, ms []kafka.Message, recs []message.Record, isolate bool) ([]Result, error) {
	tries := 1
	if isolate && len(ms) == 1 {
		tries = singleTries
	}
	var herr error
	for try := 1; try <= tries; try++ {
		if try > 1 {
			if _, err := tx.Exec(ctx, "SAVEPOINT "+batchSavepoint); err != nil {
				return nil, fmt.Errorf("inbox: savepoint: %w", err)
			}
		}
		var rs []Result
		rs, herr = c.call(ctx, tx, ms, recs)
		if herr == nil {
			return rs, nil
		}
		if h := hooksOf(ctx); h != nil && h.defer_ && wantsRerun(herr) {
			// The call wrote ahead of a check that failed: its writes
			// are undone and it runs again at once, in this
			// transaction, with nothing deferred (not counted as an
			// attempt).
			if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT "+batchSavepoint); err != nil {
				return nil, fmt.Errorf("inbox: roll back to the batch savepoint to run the handler again with nothing deferred (%q): %w", herr.Error(), err)
			}
			h.defer_ = false
			c.mReruns.Inc()
			c.log.Debug("inbox: the handler's call runs again with nothing deferred", "err", herr, "messages", len(ms),
				"first_topic", ms[0].Topic, "first_partition", ms[0].Partition, "first_offset", ms[0].Offset)
			try--
			continue
		}
		if h := hooksOf(ctx); h != nil && h.lazy && Classify(herr) != ClassUnavailable {
			return nil, errLazy(herr, true)
		}
		if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT "+batchSavepoint); err != nil {
			return nil, fmt.Errorf("inbox: roll back to the batch savepoint after %q: %w", herr.Error(), err)
		}
		if Classify(herr) != ClassTransient {
			break
		}
	}
	switch Classify(herr) {
	case ClassUnavailable:
		return nil, fmt.Errorf("inbox: handle %d messages (first: topic %s partition %d offset %d): %w",
			len(ms), ms[0].Topic, ms[0].Partition, ms[0].Offset, herr)
	case ClassTransient:
		if !isolate {
			return nil, &handlerError{err: fmt.Errorf("inbox: handle %d messages (first: topic %s partition %d offset %d): %w",
				len(ms), ms[0].Topic, ms[0].Partition, ms[0].Offset, herr)}
		}
	}
	if len(ms) == 1 {
		reason := herr.Error()
		if Classify(herr) == ClassTransient {
			reason = fmt.Sprintf("kept failing (batch retried %d times, then alone %d times): %s", c.cfg.IsolateAfter, singleTries, reason)
		}
		var pe *panicError
		if errors.As(herr, &pe) {
			c.log.Error("inbox: handler panicked", "topic", ms[0].Topic, "partition", ms[0].Partition,
				"offset", ms[0].Offset, "panic", fmt.Sprint(pe.value), "stack", string(pe.stack))
		}
		return []Result{{Outcome: DeadLetter, Reason: reason}}, nil
	}
	c.mIsolated.Inc()
	c.log.Info("inbox: splitting a batch to isolate a failing message", "messages", len(ms),
		"first_topic", ms[0].Topic, "first_partition", ms[0].Partition, "first_offset", ms[0].Offset, "err", herr)
	mid := len(ms) / 2
	out := make([]Result, 0, len(ms))
	for _, part := range [][2]int{{0, mid}, {mid, len(ms)}} {
		if _, err := tx.Exec(ctx, "SAVEPOINT "+batchSavepoint); err != nil {
			return nil, fmt.Errorf("inbox: savepoint: %w", err)
		}
		rs, err := c.apply(ctx, tx, ms[part[0]:part[1]], recs[part[0]:part[1]], isolate)
		if err != nil {
			return nil, err
		}
		out = append(out, rs...)
	}
	return out, nil
}

// wantsRerun reports whether err (a Handler's) asks for the batch to run
// again at once with nothing deferred: the handler asked it
// (txhooks.ErrRerun), or a deferred write failed when a later statement of
// the call sent it, an error that belongs to the batch taken the careful
// way, not to the message the call was handling.
func wantsRerun(err error) bool {
	var he *handlerError
	return errors.Is(err, txhooks.ErrRerun) || (errors.As(err, &he) && he.deferred)
}

// call runs the Handler, turning a panic into a permanent error, a result
// count that does not match into an error, and a RetryLater result into a
// transient error.
func (c *Consumer) call(ctx context.Context, tx pgx.Tx, ms []kafka.Message, recs []message.Record) (rs []Result, err error) {
	hooks := hooksOf(ctx)
	if hooks != nil {
		hooks.begin()
	}
	defer func() {
		if p := recover(); p != nil {
			rs, err = nil, &panicError{value: p, stack: stack()}
		}
		if err != nil && hooks != nil {
			hooks.drop() // the call's writes are rolled back
		}
	}()
	rs, err = c.handler(ctx, tx, recs)
	if err != nil {
		return nil, err
	}
	if len(rs) != len(ms) {
		return nil, fmt.Errorf("inbox: handler returned %d results for %d messages", len(rs), len(ms))
	}
	for i, r := range rs {
		switch r.Outcome {
		case Applied, Duplicate, DeadLetter:
		case RetryLater:
			return nil, &retryLater{offset: ms[i].Offset, reason: r.Reason}
		default:
			return nil, fmt.Errorf("inbox: handler returned %s for the message at offset %d", r.Outcome, ms[i].Offset)
		}
	}
	return rs, nil
}

// toRecords gives the handler the records without kafka-go's types, once
// per batch (its retries and splits reuse them). The headers of every
// record share one allocation; each record's slice is capped at its own,
// so a handler that appends to one cannot write into the next.
func toRecords(ms []kafka.Message) []message.Record {
	n := 0
	for _, m := range ms {
		n += len(m.Headers)
	}
	all := make([]message.Header, 0, n)
	out := make([]message.Record, len(ms))
	for i, m := range ms {
		from := len(all)
		for _, h := range m.Headers {
			all = append(all, message.Header(h))
		}
		out[i] = message.Record{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Key: m.Key, Value: m.Value,
			Headers: all[from:len(all):len(all)], Time: m.Time}
	}
	return out
}
