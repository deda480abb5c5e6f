package relay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/internal/kafkaclient"
)

// direct is the relay's producer, in both of its modes: one kafka-go Conn
// per partition leader it writes to, each produce request written and its
// answer read by the calling goroutine. kafka-go's Writer hands a message
// through its batching goroutine and its transport's connection goroutine
// and back, a cost paid on every lone publish, and a lone saga publishes
// six times (docs/perf/figures.md#relay-dispatcher-conn).
//
// Partitions are chosen by kafkaclient.Balancer over partitions 0..n-1 (the
// Java client's murmur2), so a key's rows reach the same partition
// whichever mode publishes them. The partition count of a topic is read from
// the cluster's metadata and re-read after metadataTTL or an error.
//
// A write that fails for the connection's sake (network, timeout, a leader
// that moved) closes it and is retried once on a fresh one, from the first
// message not acknowledged; a second failure, or a refusal by the broker,
// fails that message and the ones after it on its partition. A retried
// write that the broker had taken after all is a duplicate, which the
// receivers dedupe; the order of distinct messages of a partition is kept,
// as each write waits for the one before.
type direct struct {
	dialer   *kafka.Dialer
	timeout  time.Duration
	balancer kafka.Balancer

	client *kafka.Client
	tr     *kafka.Transport

	conns map[topicPartition]*kafka.Conn
	meta  map[string]topicMeta
	// now is time.Now (tests move the metadata clock).
	now func() time.Time
}

type topicPartition struct {
	topic     string
	partition int
}

type topicMeta struct {
	ids     []int
	leaders []kafka.Partition
	at      time.Time
}

// metadataTTL bounds how long a topic's partition count is trusted (the
// Writer's transport refreshes its metadata every 6 s).
const metadataTTL = 6 * time.Second

// maxRequestBytes bounds the key, value and header bytes of one produce
// request: Kafka's default message.max.bytes (1 MiB) limits a record batch,
// and one request carries one batch per partition. A single larger message
// goes alone, and Kafka's answer decides.
const maxRequestBytes = 900 << 10

func newDirect(c Config, clientID string) *direct {
	d := c.Dialer
	if d == nil {
		d = &kafka.Dialer{Timeout: c.WriteTimeout, DualStack: true}
	}
	cp := *d
	cp.ClientID = clientID
	if cp.Timeout == 0 {
		cp.Timeout = c.WriteTimeout
	}
	tr := kafkaclient.Transport(c.Dialer, clientID)
	tr.DialTimeout = c.WriteTimeout
	return &direct{dialer: &cp, timeout: c.WriteTimeout, balancer: kafkaclient.Balancer(),
		client: &kafka.Client{Addr: kafka.TCP(c.Brokers...), Timeout: c.WriteTimeout, Transport: tr}, tr: tr,
		conns: map[topicPartition]*kafka.Conn{}, meta: map[string]topicMeta{}, now: time.Now}
}

// close closes every connection.
func (p *direct) close() {
	for k, c := range p.conns {
		_ = c.Close()
		delete(p.conns, k)
	}
	p.tr.CloseIdleConnections()
}

// write publishes msgs (each with its Topic set, Partition unset): grouped
// by topic and partition, in their order within each partition, the
// partitions of one call written concurrently. It returns nil if every
// message was acknowledged (acks=all), else the error of each message (nil
// for those acknowledged).
func (p *direct) write(ctx context.Context, msgs []kafka.Message) []error {
	type group struct {
		tp   topicPartition
		idx  []int
		msgs []kafka.Message
		conn *kafka.Conn
		sent int
		err  error
	}
	var errs []error
	fail := func(i int, err error) {
		if errs == nil {
			errs = make([]error, len(msgs))
		}
		errs[i] = err
	}
	var groups []*group
	index := map[topicPartition]*group{}
	metaErr := map[string]error{}
	for i, m := range msgs {
		if err := metaErr[m.Topic]; err != nil {
			fail(i, err)
			continue
		}
		parts, err := p.partitions(ctx, m.Topic)
		if err != nil {
			metaErr[m.Topic] = err
			fail(i, err)
			continue
		}
		tp := topicPartition{m.Topic, p.balancer.Balance(m, parts...)}
		g := index[tp]
		if g == nil {
			g = &group{tp: tp}
			index[tp] = g
			groups = append(groups, g)
		}
		g.idx = append(g.idx, i)
		g.msgs = append(g.msgs, m)
	}
	if len(groups) == 1 {
		g := groups[0]
		g.sent, g.err = p.writePartition(ctx, g.tp, g.msgs, 0)
	} else if len(groups) > 1 {
		// Connections are looked up (and dialled) here, one goroutine at a
		// time; the writes then run side by side, one per partition, and
		// the failed ones are retried after the others are done.
		var wg sync.WaitGroup
		for _, g := range groups {
			if g.conn, g.err = p.conn(ctx, g.tp); g.err != nil {
				continue
			}
			wg.Go(func() { g.sent, g.err = writeChunks(g.conn, p.timeout, g.msgs) })
		}
		wg.Wait()
		for _, g := range groups {
			if g.err != nil {
				p.drop(g.tp)
				g.sent, g.err = p.writePartition(ctx, g.tp, g.msgs, g.sent)
			}
		}
	}
	for _, g := range groups {
		if g.err != nil {
			for _, i := range g.idx[g.sent:] {
				fail(i, g.err)
			}
		}
	}
	return errs
}

// writePartition writes msgs[sent:] to tp, and once more on a fresh
// connection after a failure a new connection may cure. It returns how many
// of msgs are acknowledged.
func (p *direct) writePartition(ctx context.Context, tp topicPartition, msgs []kafka.Message, sent int) (int, error) {
	var err error
	for attempt := 0; attempt < 2; attempt++ {
		var c *kafka.Conn
		if c, err = p.conn(ctx, tp); err != nil {
			continue
		}
		var n int
		n, err = writeChunks(c, p.timeout, msgs[sent:])
		sent += n
		if err == nil {
			return sent, nil
		}
		p.drop(tp)
		if !retriable(err) {
			break
		}
	}
	return sent, fmt.Errorf("produce to %s[%d]: %w", tp.topic, tp.partition, err)
}

// retriable: a fresh connection (to the partition's leader as the metadata
// now names it) may take what this one did not.
func retriable(err error) bool {
	var kerr kafka.Error
	if errors.As(err, &kerr) {
		return kerr.Temporary()
	}
	return isTransport(err)
}

// writeChunks writes msgs on c in requests of at most maxRequestBytes and
// returns how many were acknowledged.
func writeChunks(c *kafka.Conn, timeout time.Duration, msgs []kafka.Message) (int, error) {
	sent := 0
	for sent < len(msgs) {
		n, size := 0, 0
		for sent+n < len(msgs) {
			s := messageSize(msgs[sent+n])
			if n > 0 && size+s > maxRequestBytes {
				break
			}
			size += s
			n++
		}
		if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
			return sent, err
		}
		// The Conn writes to its own topic and partition: a message must
		// not name another, and names none here.
		chunk := make([]kafka.Message, n)
		for i, m := range msgs[sent : sent+n] {
			m.Topic, m.Partition = "", 0
			chunk[i] = m
		}
		if _, err := c.WriteMessages(chunk...); err != nil {
			return sent, err
		}
		sent += n
	}
	return sent, nil
}

// messageSize is the key, value and header bytes of m.
func messageSize(m kafka.Message) int {
	s := len(m.Key) + len(m.Value)
	for _, h := range m.Headers {
		s += len(h.Key) + len(h.Value)
	}
	return s
}

// conn is the open connection to tp's leader, dialled if there is none.
func (p *direct) conn(ctx context.Context, tp topicPartition) (*kafka.Conn, error) {
	if c := p.conns[tp]; c != nil {
		return c, nil
	}
	if _, err := p.partitions(ctx, tp.topic); err != nil {
		return nil, err
	}
	m := p.meta[tp.topic]
	if tp.partition >= len(m.leaders) {
		return nil, fmt.Errorf("connect to the leader of %s[%d]: the topic has %d partitions", tp.topic, tp.partition, len(m.leaders))
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	c, err := p.dialer.DialPartition(ctx, "tcp", "", m.leaders[tp.partition])
	if err != nil {
		delete(p.meta, tp.topic)
		return nil, fmt.Errorf("connect to the leader of %s[%d]: %w", tp.topic, tp.partition, err)
	}
	c.SetRequiredAcks(int(kafka.RequireAll))
	p.conns[tp] = c
	return c, nil
}

// drop closes tp's connection and forgets the topic's metadata.
func (p *direct) drop(tp topicPartition) {
	if c := p.conns[tp]; c != nil {
		_ = c.Close()
		delete(p.conns, tp)
	}
	delete(p.meta, tp.topic)
}

// partitions is 0..n-1 for topic's n partitions.
func (p *direct) partitions(ctx context.Context, topic string) ([]int, error) {
	if m, ok := p.meta[topic]; ok && p.now().Sub(m.at) < metadataTTL {
		return m.ids, nil
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	// kafka-go's Conn.ReadPartitions (and so Dialer.DialLeader) asks
	// the broker to create a topic it does not know; this request does
	// not (as the relay's Writer does not).
	res, err := p.client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return nil, fmt.Errorf("read the partitions of %q: %w", topic, err)
	}
	for _, t := range res.Topics {
		if t.Name != topic {
			continue
		}
		if t.Error != nil {
			return nil, fmt.Errorf("read the partitions of %q: %w", topic, t.Error)
		}
		m := topicMeta{ids: make([]int, len(t.Partitions)), leaders: make([]kafka.Partition, len(t.Partitions)), at: p.now()}
		for i := range m.ids {
			m.ids[i] = i
		}
		for _, pt := range t.Partitions {
			if pt.ID < 0 || pt.ID >= len(m.leaders) {
				return nil, fmt.Errorf("read the partitions of %q: partition %d of %d", topic, pt.ID, len(m.leaders))
			}
			m.leaders[pt.ID] = pt
		}
		if len(m.ids) == 0 {
			return nil, fmt.Errorf("read the partitions of %q: none", topic)
		}
		p.meta[topic] = m
		return m.ids, nil
	}
	return nil, fmt.Errorf("read the partitions of %q: %w", topic, kafka.UnknownTopicOrPartition)
}
