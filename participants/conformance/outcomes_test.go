package conformance_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sagaflow/sagaflow/internal/testkit"

	"github.com/google/uuid"
	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/internal/devbroker"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/participants/conformance"
)

// ReadOutcomes returns the outcome records per saga id, and names each
// record that breaks the contract (a key other than the aggregate id, a
// body that is not an outcome).
func TestReadOutcomes(t *testing.T) {
	t.Parallel()
	b, err := devbroker.Start(devbroker.Config{Partitions: 2, Topics: []string{"saga.outcomes"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := conformance.ReadOutcomes(ctx, b.Addrs(), "saga.outcomes")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	id := uuid.New()
	record := func(key string, o message.SagaOutcome) kafka.Message {
		v, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		return kafka.Message{Key: []byte(key), Value: v, Headers: []kafka.Header{
			{Key: message.HeaderMessageID, Value: []byte(uuid.NewString())}, {Key: message.HeaderSagaID, Value: []byte(o.SagaID.String())}}}
	}
	ok := message.SagaOutcome{SagaID: id, Type: "t", AggregateID: "order-1", IdempotencyKey: "order-1", Kind: message.OutcomeFinished,
		State: "completed", Data: json.RawMessage(`{}`), At: time.Now().UTC()}
	w := &kafka.Writer{Addr: kafka.TCP(b.Addrs()...), Topic: "saga.outcomes", Balancer: &kafka.Hash{}, BatchTimeout: time.Millisecond}
	defer w.Close()
	if err := w.WriteMessages(ctx, record("order-1", ok)); err != nil {
		t.Fatal(err)
	}
	got, err := r.Wait(ctx, 30*time.Second, func(m map[uuid.UUID][]message.SagaOutcome) bool { return len(m[id]) == 1 })
	if err != nil {
		t.Fatal(err)
	}
	if o := got[id][0]; o.State != "completed" || o.AggregateID != "order-1" {
		t.Fatalf("read %+v", o)
	}
	// The same record published again (a relay that crashed after the
	// broker took it) carries the same message id: read once. A second
	// record of the saga with a message id of its own is read as well.
	again := record("order-1", ok)
	again.Headers[0].Value = []byte(uuid.NewString())
	// A last record of another saga on the same partition (same key) marks
	// the end of what to read.
	last := ok
	last.SagaID = uuid.New()
	if err := w.WriteMessages(ctx, again, again, record("order-1", ok), record("order-1", last)); err != nil {
		t.Fatal(err)
	}
	if got, err = r.Wait(ctx, 30*time.Second, func(m map[uuid.UUID][]message.SagaOutcome) bool { return len(m[last.SagaID]) == 1 }); err != nil {
		t.Fatal(err)
	}
	if n := len(got[id]); n != 3 {
		t.Fatalf("%d records of saga %s, want 3 (the copy with a message id already read is dropped)", n, id)
	}
	if err := w.WriteMessages(ctx, record("order-2", ok), kafka.Message{Key: []byte("x"), Value: []byte(`{"nope":1}`)}); err != nil {
		t.Fatal(err)
	}
	wants := []string{`key "order-2", want the aggregate id "order-1"`, `unknown field "nope"`}
	named := func(err error) bool {
		for _, w := range wants {
			if err == nil || !strings.Contains(err.Error(), w) {
				return false
			}
		}
		return true
	}
	testkit.Eventually(t, 30*time.Second, fmt.Sprintf("an error naming each of %q", wants), func() (bool, error) {
		_, err := r.Outcomes()
		return named(err), nil
	})
}
