package inbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/internal/backoff"
)

// A generation of the consumer group assigns partitions to this member.
// Each assigned partition gets a fetcher (a kafka-go Reader of that one
// partition) that fills the partition's queue; each partition belongs to
// one lane, which takes batches from its partitions' queues (in order per
// partition) and runs them one after another. A full queue stops only its
// own partition's fetcher; a lane stuck on a batch holds up only its own
// partitions.

// partQueue is what was fetched of one partition and not yet taken.
type partQueue struct {
	topic     string
	partition int
	msgs      []kafka.Message
	bytes     int
	// room is signalled (without blocking) when the lane took messages.
	room chan struct{}
	// full is set while the fetcher waits for room (a pause, counted once).
	full bool
}

// lane is a set of partition queues served by one goroutine.
type lane struct {
	mu    sync.Mutex
	parts []*partQueue
	next  int // round-robin start
	// wake is signalled (without blocking) when a queue got a message.
	wake chan struct{}
}

func recordBytes(m kafka.Message) int {
	n := len(m.Key) + len(m.Value)
	for _, h := range m.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// push adds m to q if there is room: an empty queue always takes one
// message, however large.
func (l *lane) push(q *partQueue, m kafka.Message, maxMsgs, maxBytes int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	size := recordBytes(m)
	if len(q.msgs) > 0 && (len(q.msgs) >= maxMsgs || q.bytes+size > maxBytes) {
		return false
	}
	q.msgs = append(q.msgs, m)
	q.bytes += size
	select {
	case l.wake <- struct{}{}:
	default:
	}
	return true
}

// take removes up to maxMsgs messages and about maxBytes bytes from the
// lane's queues, in order per partition, starting at a different partition
// each time so that none starves. A single message larger than maxBytes is
// taken alone.
func (l *lane) take(maxMsgs, maxBytes int) []kafka.Message {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []kafka.Message
	bytes := 0
	n := len(l.parts)
	for k := 0; k < n && len(out) < maxMsgs; k++ {
		q := l.parts[(l.next+k)%n]
		taken := 0
		for taken < len(q.msgs) && len(out) < maxMsgs {
			size := recordBytes(q.msgs[taken])
			if len(out) > 0 && bytes+size > maxBytes {
				break
			}
			out = append(out, q.msgs[taken])
			bytes += size
			q.bytes -= size
			taken++
		}
		if taken > 0 {
			clear(q.msgs[:taken])
			q.msgs = q.msgs[taken:]
			select {
			case q.room <- struct{}{}:
			default:
			}
		}
		if len(out) > 0 && bytes >= maxBytes {
			break
		}
	}
	if n > 0 {
		l.next = (l.next + 1) % n
	}
	return out
}

// generation consumes the partitions gen assigned until gctx (the
// generation) or sctx (the session) ends, or a batch fails fatally.
func (c *Consumer) generation(sctx, gctx context.Context, gen *kafka.Generation, w *kafka.Writer, st *state) error {
	ctx, cancel := context.WithCancel(sctx)
	defer cancel()
	go func() {
		select {
		case <-gctx.Done():
			cancel()
		case <-ctx.Done():
		}
	}()

	lanes := make([]*lane, c.cfg.Lanes)
	for i := range lanes {
		lanes[i] = &lane{wake: make(chan struct{}, 1)}
	}
	var fetchers sync.WaitGroup
	assigned := 0
	for topic, parts := range gen.Assignments {
		for _, pa := range parts {
			q := &partQueue{topic: topic, partition: pa.ID, room: make(chan struct{}, 1)}
			l := lanes[laneOf(topic, pa.ID, len(lanes))]
			l.parts = append(l.parts, q)
			assigned++
			fetchers.Add(1)
			go func() {
				defer fetchers.Done()
				c.fetch(ctx, l, q, pa.Offset, st)
			}()
		}
	}
	c.log.Debug("inbox: joined a generation", "generation", gen.ID, "partitions", assigned)

	cm := newCommitter(c, gen, st)
	lanesDone, commits := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(commits)
		cm.run(ctx, lanesDone)
	}()
	errs := make(chan error, len(lanes))
	for _, l := range lanes {
		go func() {
			err := c.serve(ctx, cm, w, l, st)
			if err != nil {
				cancel()
			}
			errs <- err
		}()
	}
	var first error
	for range lanes {
		if err := <-errs; err != nil && first == nil && !errors.Is(err, errStopped) {
			first = err
		}
	}
	cancel()
	// The lanes are done (an in-flight batch finishes after cancel): the
	// committer commits what they handed it, then returns.
	close(lanesDone)
	fetchers.Wait()
	<-commits
	// What was fetched and not handled is dropped: the partition's next
	// owner starts from the committed offset, and the inbox dedupes.
	for _, l := range lanes {
		for _, q := range l.parts {
			st.queued.Add(-int64(len(q.msgs)))
			q.msgs, q.bytes = nil, 0
		}
	}
	return first
}

// laneOf picks the lane of a partition: every record of one partition goes
// to the same lane, so per-partition order holds.
func laneOf(topic string, partition, n int) int {
	if n == 1 {
		return 0
	}
	h := uint32(2166136261)
	for i := 0; i < len(topic); i++ {
		h = (h ^ uint32(topic[i])) * 16777619
	}
	return int((h + uint32(partition)) % uint32(n))
}

// fetch reads one partition from offset into q until ctx ends.
func (c *Consumer) fetch(ctx context.Context, l *lane, q *partQueue, offset int64, st *state) {
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers:   c.cfg.Brokers,
		Dialer:    c.cfg.Dialer,
		Topic:     q.topic,
		Partition: q.partition,
		MinBytes:  1,
		MaxBytes:  c.cfg.FetchBytes,
		MaxWait:   c.cfg.MaxWait,
		// Little read ahead inside kafka-go: the partition queue (bounded
		// in bytes) is the buffer.
		QueueCapacity:  8,
		ReadBackoffMin: 50 * time.Millisecond,
		ReadBackoffMax: time.Second,
		ErrorLogger: kafka.LoggerFunc(func(msg string, args ...any) {
			c.log.Warn("inbox: kafka reader: "+fmt.Sprintf(msg, args...), "topic", q.topic, "partition", q.partition)
		}),
	})
	defer func() {
		if err := r.Close(); err != nil {
			c.log.Debug("inbox: close partition reader", "topic", q.topic, "partition", q.partition, "err", err)
		}
	}()
	if err := r.SetOffset(offset); err != nil {
		c.log.Warn("inbox: set partition offset", "topic", q.topic, "partition", q.partition, "offset", offset, "err", err)
		return
	}
	failures := 0
	for {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			c.log.Warn("inbox: fetch failed; retrying", "topic", q.topic, "partition", q.partition, "err", err, "failures", failures)
			if !backoff.Sleep(ctx, c.backoff(failures)) {
				return
			}
			continue
		}
		failures = 0
		st.touch()
		for !l.push(q, m, c.cfg.QueueMessages, c.cfg.QueueBytes) {
			l.mu.Lock()
			if !q.full {
				q.full = true
				c.mPaused.Inc()
			}
			l.mu.Unlock()
			select {
			case <-q.room:
			case <-ctx.Done():
				return
			}
		}
		l.mu.Lock()
		q.full = false
		l.mu.Unlock()
		st.queued.Add(1)
	}
}

// serve runs the batches of lane l until ctx ends.
func (c *Consumer) serve(ctx context.Context, cm *committer, w *kafka.Writer, l *lane, st *state) error {
	for {
		batch := l.take(c.cfg.BatchSize, c.cfg.BatchBytes)
		if len(batch) == 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-l.wake:
			}
			continue
		}
		st.queued.Add(-int64(len(batch)))
		st.busy.Add(1)
		err := c.runBatch(ctx, w, batch)
		if err == nil && c.afterDBCommit != nil {
			err = c.afterDBCommit(batch)
		}
		if err != nil {
			st.busy.Add(-1)
			return err
		}
		cm.add(batch)
		st.busy.Add(-1)
		st.touch()
	}
}

// committer commits the offsets of the batches its generation's lanes
// handled, at most every CommitInterval: one commit covers every batch
// handled since the one before (a lone batch after a quiet spell is
// committed at once). A lane hands its batch's offsets over once the batch
// is in the database and goes on with the next batch without waiting for
// Kafka.
type committer struct {
	c   *Consumer
	gen *kafka.Generation
	st  *state

	mu      sync.Mutex
	pending map[string]map[int]int64
	kick    chan struct{}
}

func newCommitter(c *Consumer, gen *kafka.Generation, st *state) *committer {
	return &committer{c: c, gen: gen, st: st, pending: map[string]map[int]int64{}, kick: make(chan struct{}, 1)}
}

// add records the offsets after batch as due for commit.
func (cm *committer) add(batch []kafka.Message) {
	cm.mu.Lock()
	for _, m := range batch {
		mergeOffset(cm.pending, m.Topic, m.Partition, m.Offset+1)
	}
	cm.mu.Unlock()
	select {
	case cm.kick <- struct{}{}:
	default:
	}
}

func mergeOffset(offs map[string]map[int]int64, topic string, partition int, next int64) {
	p := offs[topic]
	if p == nil {
		p = map[int]int64{}
		offs[topic] = p
	}
	if next > p[partition] {
		p[partition] = next
	}
}

// take returns the pending offsets (nil if none) and clears them.
func (cm *committer) take() map[string]map[int]int64 {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	if len(cm.pending) == 0 {
		return nil
	}
	offs := cm.pending
	cm.pending = map[string]map[int]int64{}
	return offs
}

// run commits until lanesDone is closed (every lane of the generation has
// returned), then commits what is left once. ctx ending (a rebalance, a
// stop) does not end it: a lane finishes its batch in flight and hands its
// offsets over after that.
func (cm *committer) run(ctx context.Context, lanesDone <-chan struct{}) {
	interval := cm.c.cfg.CommitInterval
	var last time.Time
	for {
		select {
		case <-cm.kick:
		case <-lanesDone:
			cm.commit(ctx)
			return
		}
		if wait := interval - time.Since(last); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-lanesDone:
				t.Stop()
				cm.commit(ctx)
				return
			}
		}
		last = time.Now()
		cm.commit(ctx)
	}
}

// commit commits the pending offsets. A failure is logged and the offsets
// are kept for the next commit: the batches are in the database, and a
// redelivery is deduplicated.
func (cm *committer) commit(ctx context.Context) {
	offs := cm.take()
	if offs == nil {
		return
	}
	err := cm.gen.CommitOffsets(offs)
	if err == nil {
		cm.c.mCommits.Inc()
		cm.st.commitFailures.Store(0)
		return
	}
	cm.c.mCommitErrors.Inc()
	cm.mu.Lock()
	for topic, parts := range offs {
		for part, next := range parts {
			mergeOffset(cm.pending, topic, part, next)
		}
	}
	cm.mu.Unlock()
	n := cm.st.commitFailures.Add(1)
	if ctx.Err() != nil {
		// The generation ended (a rebalance) or we are stopping: the next
		// owner of the partitions gets the batches again and dedupes them.
		cm.c.log.Debug("inbox: offsets not committed as the generation ended; the batches will be redelivered and deduplicated", "err", err)
		return
	}
	if int(n) >= cm.c.cfg.RestartAfterErrors {
		cm.c.log.Warn("inbox: offset commits keep failing; recreating the consumer group (the batches will be redelivered and deduplicated)",
			"err", err, "failures", n)
		cm.st.restart(errRestart)
		return
	}
	cm.c.log.Warn("inbox: commit offsets failed; retrying with the next commit (the batches would be redelivered and deduplicated)",
		"err", err, "failures", n)
	select {
	case cm.kick <- struct{}{}:
	default:
	}
}
