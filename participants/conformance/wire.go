package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/message"
)

// topicPartitions is the partition count of the topics the kit creates.
const topicPartitions = 4

// record is one record the kit read back.
type record struct {
	topic     string
	partition int
	offset    int64
	key       []byte
	value     []byte
	headers   []kafka.Header
}

func (r record) header(key string) (string, bool) {
	for _, h := range r.headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

// collector reads every partition of some topics from the start and keeps
// what it read.
type collector struct {
	mu      sync.Mutex
	recs    map[string][]record
	changed chan struct{} // closed and replaced on every new record
	errs    []error

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func startCollector(brokers []string, topics ...string) *collector {
	return startCollectorOf(brokers, topics, topicPartitions)
}

// startCollectorOf reads partitions 0 to partitions-1 of each topic.
func startCollectorOf(brokers []string, topics []string, partitions int) *collector {
	ctx, cancel := context.WithCancel(context.Background())
	c := &collector{recs: map[string][]record{}, changed: make(chan struct{}), cancel: cancel}
	for _, t := range topics {
		for p := range partitions {
			r := kafka.NewReader(kafka.ReaderConfig{
				Brokers: brokers, Topic: t, Partition: p, MinBytes: 1, MaxBytes: 4 << 20,
				MaxWait: 100 * time.Millisecond, StartOffset: kafka.FirstOffset,
			})
			c.wg.Add(1)
			go func() {
				defer c.wg.Done()
				defer r.Close()
				for {
					m, err := r.ReadMessage(ctx)
					if err != nil {
						if ctx.Err() == nil {
							c.fail(fmt.Errorf("read %s partition %d: %w", t, p, err))
						}
						return
					}
					c.add(record{topic: m.Topic, partition: m.Partition, offset: m.Offset, key: m.Key, value: m.Value, headers: m.Headers})
				}
			}()
		}
	}
	return c
}

func (c *collector) add(r record) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.recs[r.topic] = append(c.recs[r.topic], r)
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *collector) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errs = append(c.errs, err)
}

// records returns what was read from topic so far.
func (c *collector) records(topic string) []record {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]record(nil), c.recs[topic]...)
}

// wait returns the first record of topic that match accepts, waiting up to
// timeout for one.
func (c *collector) wait(ctx context.Context, timeout time.Duration, topic string, match func(record) bool) (record, error) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		c.mu.Lock()
		for _, r := range c.recs[topic] {
			if match(r) {
				c.mu.Unlock()
				return r, nil
			}
		}
		changed, errs := c.changed, errors.Join(c.errs...)
		c.mu.Unlock()
		if errs != nil {
			return record{}, errs
		}
		select {
		case <-changed:
		case <-timer.C:
			return record{}, fmt.Errorf("nothing within %s", timeout)
		case <-ctx.Done():
			return record{}, ctx.Err()
		}
	}
}

func (c *collector) stop() {
	c.cancel()
	c.wg.Wait()
}

// sent is a command the kit produced.
type sent struct {
	cmd message.Command
	msg kafka.Message
}

// newCommand is a conformance command of saga for aggregate, with payload
// (any JSON-encodable value; nil: none).
func (r *run) newCommand(saga uuid.UUID, aggregate string, action message.Action, attempt int, payload any) message.Command {
	cmd := message.Command{
		MessageID: uuid.New(), SagaID: saga, SagaType: SagaType, AggregateID: aggregate, Step: StepName,
		Action: action, Attempt: attempt, ReplyTo: r.replyTopic, SentAt: time.Now().UTC(),
	}
	if payload != nil {
		cmd.Payload = mustJSON(payload)
	}
	return cmd
}

// commandRecord encodes cmd as the orchestrator would: keyed by aggregate
// id, with the wire headers.
func (r *run) commandRecord(cmd message.Command) (kafka.Message, error) {
	value, err := message.EncodeCommand(cmd)
	if err != nil {
		return kafka.Message{}, err
	}
	m := kafka.Message{Topic: r.commandTopic, Key: []byte(cmd.AggregateID), Value: value, Headers: wireHeaders(cmd.MessageID, cmd.SagaID)}
	r.sign(&m, r.signer)
	return m, nil
}

func wireHeaders(messageID, sagaID uuid.UUID) []kafka.Header {
	return []kafka.Header{
		{Key: message.HeaderMessageID, Value: []byte(messageID.String())},
		{Key: message.HeaderSagaID, Value: []byte(sagaID.String())},
		{Key: message.HeaderContentType, Value: []byte(message.ContentTypeJSON)},
	}
}

// send produces cmd and remembers it.
func (r *run) send(ctx context.Context, cmd message.Command) (sent, error) {
	m, err := r.commandRecord(cmd)
	if err != nil {
		return sent{}, fmt.Errorf("encode command: %w", err)
	}
	s := sent{cmd: cmd, msg: m}
	return s, r.produce(ctx, s)
}

// produce writes s's record (again, for a redelivery).
func (r *run) produce(ctx context.Context, s sent) error {
	r.mu.Lock()
	r.commands[s.cmd.MessageID] = s.cmd
	r.mu.Unlock()
	if err := r.writer.WriteMessages(ctx, s.msg); err != nil {
		return fmt.Errorf("produce to %s: %w", s.msg.Topic, err)
	}
	return nil
}

// answer waits for the reply to the command with id.
func (r *run) answer(ctx context.Context, id uuid.UUID) (message.Reply, error) {
	rec, err := r.col.wait(ctx, r.cfg.Timeout, r.replyTopic, func(rec record) bool {
		rep, err := message.DecodeReply(rec.value)
		return err == nil && rep.InReplyTo == id
	})
	if err != nil {
		return message.Reply{}, fmt.Errorf("no answer to command %s on %s: %w", id, r.replyTopic, err)
	}
	rep, _ := message.DecodeReply(rec.value)
	return rep, nil
}

// exchange sends cmd and waits for its reply.
func (r *run) exchange(ctx context.Context, cmd message.Command) (message.Reply, error) {
	if _, err := r.send(ctx, cmd); err != nil {
		return message.Reply{}, err
	}
	return r.answer(ctx, cmd.MessageID)
}

// repliesTo counts the replies read so far that answer id.
func (r *run) repliesTo(id uuid.UUID) int {
	n := 0
	for _, rec := range r.col.records(r.replyTopic) {
		if rep, err := message.DecodeReply(rec.value); err == nil && rep.InReplyTo == id {
			n++
		}
	}
	return n
}
