package outboxdb

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// Pending is what a transaction enqueued for dispatch right after its
// commit (see EnqueueDirect): the messages, and the ids of their rows once
// the insert ran, in the same order.
type Pending struct {
	Msgs []Message
	IDs  []int64
}

// directSQL inserts rows that the relay's sweep leaves alone for a lease:
// the committing process publishes them itself right after its commit (the
// relay's dispatch mode) and deletes them; only if it does not (it crashed
// between commit and publish, or between publish and delete; Kafka refused)
// are they due to the sweep when the lease ends, which publishes them like
// any row. No NOTIFY (the relay finds them by its poll) and no listen lock.
// The lease is counted on the server's clock.
func (o *Table) directSQL() string {
	t := pgx.Identifier{o.schema, "outbox"}.Sanitize()
	return `INSERT INTO ` + t + ` (topic, key, value, headers, available_at)
SELECT u.topic, u.key, u.value, u.headers, now() + $5::bigint * interval '1 microsecond'
FROM unnest($1::text[], $2::text[], $3::bytea[], $4::jsonb[]) AS u(topic, key, value, headers)
RETURNING id`
}

// QueueEnqueueDirect adds to b the insert of msgs as rows leased to the
// committing process for lease (see directSQL), and returns their Pending,
// whose IDs are filled in when b runs. Hand it to the relay (Send) after the
// transaction commits; if it rolls back, drop it.
func (o *Table) QueueEnqueueDirect(b *pgx.Batch, lease time.Duration, msgs ...Message) (*Pending, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	args, err := o.enqueueArgs(msgs)
	if err != nil {
		return nil, err
	}
	p := &Pending{Msgs: msgs}
	n := len(msgs)
	b.Queue(o.directSQL(), args[0], args[1], args[2], args[3], lease.Microseconds()).Query(func(rows pgx.Rows) error {
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return fmt.Errorf("outbox %s: enqueue %d messages for dispatch: %w", o.schema, n, err)
		}
		if len(ids) != n {
			// Fewer rows than messages (a trigger on the table dropped
			// some): which is which is unknown, so none is dispatched;
			// the relay publishes the rows there are after the lease.
			p.IDs = nil
			return nil
		}
		// The ids are drawn in insert order, which is the order of msgs.
		slices.Sort(ids)
		p.IDs = ids
		return nil
	})
	return p, nil
}

// EnqueueDirect is QueueEnqueueDirect in a round trip of its own.
func (o *Table) EnqueueDirect(ctx context.Context, tx DB, lease time.Duration, msgs ...Message) (*Pending, error) {
	b := &pgx.Batch{}
	p, err := o.QueueEnqueueDirect(b, lease, msgs...)
	if err != nil || p == nil {
		return p, err
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, err
	}
	return p, nil
}

// Release makes leased rows due to the relay now, instead of when their
// lease ends: the dispatch could not publish them (Kafka refused, or did
// not answer), so there is nothing to wait for.
func (o *Table) Release(ctx context.Context, db DB, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	t := pgx.Identifier{o.schema, "outbox"}.Sanitize()
	if _, err := db.Exec(ctx, `UPDATE `+t+` SET available_at = now() WHERE id = ANY($1) AND sent_at IS NULL AND available_at > now()`, ids); err != nil {
		return fmt.Errorf("outbox %s: release %d leased rows: %w", o.schema, len(ids), err)
	}
	return nil
}
