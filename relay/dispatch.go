package relay

import (
	"context"
	"time"

	"github.com/sagaflow/sagaflow/internal/outboxdb"
)

// Dispatch defaults.
const (
	// DispatchLeaseDefault is how long a row enqueued for dispatch is left
	// to the process that committed it before the sweep may publish it: a
	// crashed process's rows wait this long (plus the relay's
	// PollInterval). Longer than a dispatch normally takes under load, so
	// the sweep rarely publishes a row the dispatch is about to.
	DispatchLeaseDefault = 3 * time.Second
	// dispatchQueue bounds the pending sets waiting for the dispatch; a
	// Send that finds it full leaves the rows to the sweep.
	dispatchQueue = 4096
	// deleteLinger is how long the dispatch gathers published rows before
	// deleting them in one statement.
	deleteLinger = 50 * time.Millisecond
)

// The dispatch mode publishes the rows its process just committed (leased
// to it in the saga engine's or the participant's transaction, handed over
// with Send after the commit) at once, instead of waiting for the sweep to
// be woken and claim them, and deletes them (marks them sent with KeepSent)
// once Kafka acknowledged them. The sweep of the same outbox is the safety
// net: a row the dispatch did not publish and delete (the process died
// between commit and publish, or between publish and delete; Kafka refused
// it; the queue was full) becomes due to the sweep when its lease ends and
// is published then, so delivery stays at least once (receivers dedupe by
// message-id). Rows Kafka does not take are released to the sweep at once
// rather than after their lease.
//
// Order: the dispatch publishes in the order of Send, one produce per
// partition at a time over the producer the sweep uses too, so the rows of
// one key that one process commits one after the other reach Kafka in that
// order. A row that falls back to the sweep is published after its lease,
// after later rows of its key that were dispatched: the saga engine sends
// at most one command per saga at a time, and a re-send or compensation
// overtaking an older copy is what the participants' barrier is for (see
// docs/DESIGN.md, dispatch after commit).

// Active reports whether the dispatch mode runs (and so whether rows handed
// to Send now are published at once).
func (r *Relay) Active() bool { return r.dispatching.Load() }

// Lease is how long rows enqueued for dispatch are left to this relay
// before the sweep may publish them (Config.DispatchLease).
func (r *Relay) Lease() time.Duration { return r.cfg.DispatchLease }

// Send hands p (committed) to the dispatch. It never blocks: when the queue
// is full the rows are left to the sweep.
func (r *Relay) Send(p *outboxdb.Pending) {
	if p == nil || len(p.IDs) == 0 {
		return
	}
	select {
	case r.queue <- p:
	default:
		r.dropped.Do(func() {
			r.log.Warn("relay: dispatch queue full; rows left to the sweep (published after their lease)")
		})
	}
}

// dispatch publishes what Send hands over until ctx is cancelled; then it
// publishes what is queued and returns.
func (r *Relay) dispatch(ctx context.Context) {
	defer r.dispatching.Store(false)
	prod := newDirect(r.cfg, "sagaflow-dispatcher")
	defer prod.close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.forgetLoop()
	}()
	defer func() {
		r.done <- nil // the end of this run's deletes
		<-done
	}()
	for {
		var first *outboxdb.Pending
		select {
		case first = <-r.queue:
		case <-ctx.Done():
			// Publish what is queued: it is committed, and the sweep would
			// otherwise publish it only after the lease.
			for {
				select {
				case p := <-r.queue:
					r.dispatchBatch(context.WithoutCancel(ctx), prod, []*outboxdb.Pending{p})
				default:
					return
				}
			}
		}
		batch := []*outboxdb.Pending{first}
		n := len(first.IDs)
	gather:
		for n < r.cfg.BatchSize {
			select {
			case p := <-r.queue:
				batch = append(batch, p)
				n += len(p.IDs)
			default:
				break gather
			}
		}
		r.dispatchBatch(ctx, prod, batch)
	}
}

// dispatchBatch publishes the batch's rows with one write; the
// acknowledged ones go to the deletes, the others are released to the
// sweep.
func (r *Relay) dispatchBatch(ctx context.Context, prod *direct, batch []*outboxdb.Pending) {
	var rows []outboxdb.Row
	for _, p := range batch {
		for i, m := range p.Msgs {
			rows = append(rows, outboxdb.Row{ID: p.IDs[i], Topic: m.Topic, Key: m.Key, Value: m.Value, Headers: m.Headers})
		}
	}
	pr := r.publish(context.WithoutCancel(ctx), prod, rows)
	if left := append(pr.untouched, failedRows(pr.failed)...); len(left) > 0 {
		// The sweep retries them with its backoff and parks what Kafka
		// keeps refusing: at once rather than after the lease.
		ids := make([]int64, len(left))
		for i, row := range left {
			ids[i] = row.ID
		}
		err := pr.outage
		if len(pr.failed) > 0 {
			err = pr.failed[0].err
		}
		r.log.Warn("relay: dispatch failed; the rows are left to the sweep", "rows", len(ids), "error", err)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.WriteTimeout)
		defer cancel()
		if rerr := r.ob.Release(rctx, r.pool, ids); rerr != nil {
			r.log.Warn("relay: rows not released; the sweep publishes them after their lease", "rows", len(ids), "error", rerr)
		}
	}
	if len(pr.sent) == 0 {
		return
	}
	if r.afterDispatch != nil {
		if err := r.afterDispatch(); err != nil {
			return
		}
	}
	r.done <- pr.sent
}

func failedRows(fs []failedRow) []outboxdb.Row {
	rows := make([]outboxdb.Row, len(fs))
	for i, f := range fs {
		rows[i] = f.row
	}
	return rows
}

// forgetLoop deletes (marks sent) the dispatched rows, gathering what
// arrives within deleteLinger (or up to 4 batches) into one statement whose
// commit does not wait for the disk (outboxdb.Table.ForgetPublished):
// nothing waits for these deletes, and a lost one only makes the sweep
// publish its rows again after their lease (deduped by the receivers). A
// failure leaves them to the sweep the same way. A nil batch ends it.
func (r *Relay) forgetLoop() {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for ids := range r.done {
		if ids == nil {
			return
		}
		last := false
		timer.Reset(deleteLinger)
	gather:
		for len(ids) < 4*r.cfg.BatchSize {
			select {
			case more := <-r.done:
				if more == nil {
					last = true
					break gather
				}
				ids = append(ids, more...)
			case <-timer.C:
				break gather
			}
		}
		timer.Stop()
		ctx, cancel := context.WithTimeout(context.Background(), r.cfg.WriteTimeout)
		err := r.ob.ForgetPublished(ctx, r.pool, ids, r.cfg.KeepSent)
		cancel()
		if err != nil {
			r.log.Warn("relay: dispatched rows not deleted; the sweep publishes them again after their lease", "rows", len(ids), "error", err)
		}
		if last {
			return
		}
	}
}
