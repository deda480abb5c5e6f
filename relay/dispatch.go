package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/outbox"
)

// Dispatch defaults.
const (
	// DispatchLeaseDefault is how long a row enqueued for dispatch is left
	// to the process that committed it before the relay may publish it: a
	// crashed process's rows wait this long (plus the relay's
	// PollInterval). Longer than a dispatch normally takes under load, so
	// the relay rarely publishes a row the dispatcher is about to.
	DispatchLeaseDefault = 3 * time.Second
	// dispatchQueue bounds the pending sets waiting for the dispatcher; a
	// Send that finds it full leaves the rows to the relay.
	dispatchQueue = 4096
	// deleteLinger is how long the dispatcher gathers published rows
	// before deleting them in one statement.
	deleteLinger = 50 * time.Millisecond
)

// Dispatcher publishes the rows its process just committed (outbox
// EnqueueDirect, handed over with Send after the commit) at once, instead
// of waiting for the relay to be woken and claim them, and deletes them
// (marks them sent with KeepSent) once Kafka acknowledged them. The relay
// of the same outbox is the safety net: a row the dispatcher did not
// publish and delete (the process died between commit and publish, or
// between publish and delete; Kafka refused it; the queue was full) becomes
// due to the relay when its lease ends and is published then, so delivery
// stays at least once (receivers dedupe by message-id). A batch Kafka does
// not take is released to the relay at once (outbox.Release) rather than
// after its lease.
//
// Order: the dispatcher publishes in the order of Send, one produce per
// partition at a time (over its own connections to the partition leaders,
// partitioned as the relay's Writer partitions: see direct), so the rows
// of one key that one process commits one after the other reach Kafka in
// that order. A row that falls back to the relay is
// published after its lease, after later rows of its key that were
// dispatched: the saga engine sends at most one command per saga at a time,
// and a re-send or compensation overtaking an older copy is what the
// participants' barrier is for (see docs/DESIGN.md, dispatch after commit).
type Dispatcher struct {
	pool  *pgxpool.Pool
	ob    *outbox.Outbox
	cfg   Config
	log   *slog.Logger
	m     *outboxMetrics
	queue chan *outbox.Pending
	done  chan []int64

	// afterPublish (tests only) runs after a publish and before the rows are
	// deleted; an error drops the delete, as if the process died there.
	afterPublish func() error
	dropped      sync.Once
	running      atomic.Bool
}

// NewDispatcher returns the dispatcher of ob; cfg is the relay's (brokers,
// dialer, timeouts, KeepSent, metrics, logger).
func NewDispatcher(pool *pgxpool.Pool, ob *outbox.Outbox, cfg *Config) (*Dispatcher, error) {
	if pool == nil || ob == nil {
		return nil, errors.New("relay: NewDispatcher: pool and outbox are required")
	}
	if cfg == nil {
		cfg = &Config{}
	}
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("relay %s: NewDispatcher: %w", ob.Schema(), err)
	}
	c := cfg.WithDefaults()
	return &Dispatcher{pool: pool, ob: ob, cfg: c, log: c.Logger.With("outbox", ob.Schema(), "component", "dispatcher"),
		m: c.Metrics.forOutbox(ob.Schema()), queue: make(chan *outbox.Pending, dispatchQueue), done: make(chan []int64, dispatchQueue)}, nil
}

// Active reports whether Run is running (and so whether rows handed over
// now are published at once).
func (d *Dispatcher) Active() bool { return d.running.Load() }

// Lease is how long rows enqueued for this dispatcher are left to it.
func (d *Dispatcher) Lease() time.Duration { return d.cfg.DispatchLease }

// Send hands p (committed) to the dispatcher. It never blocks: when the
// queue is full the rows are left to the relay.
func (d *Dispatcher) Send(p *outbox.Pending) {
	if p == nil || len(p.IDs) == 0 {
		return
	}
	select {
	case d.queue <- p:
	default:
		d.dropped.Do(func() {
			d.log.Warn("dispatcher: queue full; rows left to the relay (published after their lease)")
		})
	}
}

// Run publishes what Send hands over until ctx is cancelled; then it
// publishes what is queued and returns.
func (d *Dispatcher) Run(ctx context.Context) error {
	if !d.running.CompareAndSwap(false, true) {
		return fmt.Errorf("relay %s: dispatcher: Run: already running", d.ob.Schema())
	}
	defer d.running.Store(false)
	w := newDirect(d.cfg, "sagaflow-dispatcher")
	defer w.close()
	var wg sync.WaitGroup
	wg.Go(d.recordLoop)
	defer func() {
		close(d.done)
		wg.Wait()
	}()
	for {
		var first *outbox.Pending
		select {
		case first = <-d.queue:
		case <-ctx.Done():
			// Publish what is queued: it is committed, and the relay would
			// otherwise publish it only after the lease.
			for {
				select {
				case p := <-d.queue:
					d.publish(context.WithoutCancel(ctx), w, []*outbox.Pending{p})
				default:
					return nil
				}
			}
		}
		batch := []*outbox.Pending{first}
		n := len(first.IDs)
	gather:
		for n < d.cfg.BatchSize {
			select {
			case p := <-d.queue:
				batch = append(batch, p)
				n += len(p.IDs)
			default:
				break gather
			}
		}
		d.publish(ctx, w, batch)
	}
}

// publish writes the batch's messages with one call; on success their rows
// go to the deleter, on failure they are left to the relay.
func (d *Dispatcher) publish(ctx context.Context, w *direct, batch []*outbox.Pending) {
	var msgs []kafka.Message
	var ids []int64
	for _, p := range batch {
		for i, m := range p.Msgs {
			km := kafka.Message{Topic: m.Topic, Key: []byte(m.Key), Value: m.Value}
			for name, v := range m.Headers {
				km.Headers = append(km.Headers, kafka.Header{Key: name, Value: []byte(v)})
			}
			msgs = append(msgs, km)
			ids = append(ids, p.IDs[i])
		}
	}
	start := time.Now()
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.cfg.WriteTimeout)
	err := w.write(wctx, msgs)
	cancel()
	if err != nil {
		// Some may have gone out: all go to the relay (a message published
		// twice is deduped by its receiver), at once rather than after the
		// lease: the relay retries with its backoff and parks what Kafka
		// keeps refusing.
		d.log.Warn("dispatcher: publish failed; the rows are left to the relay", "rows", len(ids), "error", err)
		if d.m != nil {
			d.m.publishErrors.Add(float64(len(ids)))
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.cfg.WriteTimeout)
		defer cancel()
		if rerr := d.ob.Release(rctx, d.pool, ids); rerr != nil {
			d.log.Warn("dispatcher: rows not released; the relay publishes them after their lease", "rows", len(ids), "error", rerr)
		}
		return
	}
	if d.m != nil {
		d.m.published.Add(float64(len(ids)))
		d.m.publishTime.Observe(time.Since(start).Seconds())
		d.m.batchSize.Observe(float64(len(ids)))
	}
	if d.afterPublish != nil {
		if err := d.afterPublish(); err != nil {
			return
		}
	}
	d.done <- ids
}

// recordLoop deletes (marks sent) the published rows, gathering what
// arrives within deleteLinger (or up to 4 batches) into one statement whose
// commit does not wait for the disk (outbox.ForgetPublished): nothing waits
// for these deletes, and a lost one only makes the relay publish its rows
// again after their lease (deduped by the receivers). A failure leaves them
// to the relay the same way.
func (d *Dispatcher) recordLoop() {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for ids := range d.done {
		timer.Reset(deleteLinger)
	gather:
		for len(ids) < 4*d.cfg.BatchSize {
			select {
			case more, ok := <-d.done:
				if !ok {
					break gather
				}
				ids = append(ids, more...)
			case <-timer.C:
				break gather
			}
		}
		timer.Stop()
		ctx, cancel := context.WithTimeout(context.Background(), d.cfg.WriteTimeout)
		err := d.ob.ForgetPublished(ctx, d.pool, ids, d.cfg.KeepSent)
		cancel()
		if err != nil {
			d.log.Warn("dispatcher: published rows not deleted; the relay publishes them again after their lease", "rows", len(ids), "error", err)
		}
	}
}
