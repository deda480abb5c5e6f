package conformance

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/message"
)

// OutcomeReader reads an orchestrator's outcome topic (saga.outcomes by
// default: a record per end of a saga and per flag, docs/conformance.md)
// from its start, as an initiating service would, and checks every record
// against the wire contract: its value a message.SagaOutcome, its key the
// aggregate id, its saga-id and message-id headers present.
type OutcomeReader struct {
	topic string
	c     *collector
}

// ReadOutcomes starts reading topic on brokers (every partition, from the
// first offset) until Close.
func ReadOutcomes(ctx context.Context, brokers []string, topic string) (*OutcomeReader, error) {
	if len(brokers) == 0 {
		return nil, errors.New("conformance: ReadOutcomes: no brokers")
	}
	conn, err := kafka.DialContext(ctx, "tcp", brokers[0])
	if err != nil {
		return nil, fmt.Errorf("conformance: read outcomes: dial %s: %w", brokers[0], err)
	}
	defer conn.Close()
	parts, err := conn.ReadPartitions(topic)
	if err != nil {
		return nil, fmt.Errorf("conformance: read outcomes: partitions of %s: %w", topic, err)
	}
	return &OutcomeReader{topic: topic, c: startCollectorOf(brokers, []string{topic}, len(parts))}, nil
}

// Outcomes returns the outcome records read so far by saga id, in the
// order of their partition (a saga's records share its aggregate's
// partition), each message id once: a record the orchestrator's relay
// published again after a crash carries the same message id, and a
// consumer deduplicating by message id (as the wire contract asks) takes
// it once. A record that breaks the contract is an error naming it.
func (r *OutcomeReader) Outcomes() (map[uuid.UUID][]message.SagaOutcome, error) {
	out := map[uuid.UUID][]message.SagaOutcome{}
	seen := map[string]bool{}
	var errs []error
	for _, rec := range r.c.records(r.topic) {
		o, err := checkOutcome(rec)
		if err != nil {
			errs = append(errs, fmt.Errorf("outcome at %s/%d offset %d: %w", rec.topic, rec.partition, rec.offset, err))
			continue
		}
		id, _ := rec.header(message.HeaderMessageID)
		if seen[id] {
			continue
		}
		seen[id] = true
		out[o.SagaID] = append(out[o.SagaID], o)
	}
	r.c.mu.Lock()
	errs = append(errs, r.c.errs...)
	r.c.mu.Unlock()
	return out, errors.Join(errs...)
}

// Wait returns Outcomes once done accepts them, or an error after timeout.
func (r *OutcomeReader) Wait(ctx context.Context, timeout time.Duration, done func(map[uuid.UUID][]message.SagaOutcome) bool) (map[uuid.UUID][]message.SagaOutcome, error) {
	deadline := time.Now().Add(timeout)
	for {
		r.c.mu.Lock()
		changed := r.c.changed
		r.c.mu.Unlock()
		got, err := r.Outcomes()
		if err != nil || done(got) {
			return got, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return got, fmt.Errorf("conformance: the outcomes on %s were not there within %s", r.topic, timeout)
		}
		select {
		case <-changed:
		case <-time.After(left):
		case <-ctx.Done():
			return got, ctx.Err()
		}
	}
}

// Close stops reading.
func (r *OutcomeReader) Close() { r.c.stop() }

// checkOutcome decodes an outcome record and checks its key and headers.
func checkOutcome(rec record) (message.SagaOutcome, error) {
	o, err := message.DecodeSagaOutcome(rec.value)
	if err != nil {
		return o, err
	}
	if string(rec.key) != o.AggregateID {
		return o, fmt.Errorf("key %q, want the aggregate id %q", rec.key, o.AggregateID)
	}
	if v, _ := rec.header(message.HeaderSagaID); v != o.SagaID.String() {
		return o, fmt.Errorf("header %s %q, want the saga id %s", message.HeaderSagaID, v, o.SagaID)
	}
	if v, _ := rec.header(message.HeaderMessageID); uuid.Validate(v) != nil {
		return o, fmt.Errorf("header %s %q is not a UUID", message.HeaderMessageID, v)
	}
	return o, nil
}
