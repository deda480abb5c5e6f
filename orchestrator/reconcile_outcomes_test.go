package orchestrator

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/internal/kafkaclient"
	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/message"
)

// fakeOutcomes is an OutcomeSource of fixed counts, recording since.
type fakeOutcomes struct {
	counts map[uuid.UUID]int
	since  time.Time
}

func (f *fakeOutcomes) Finished(_ context.Context, since time.Time) (map[uuid.UUID]int, error) {
	f.since = since
	return f.counts, nil
}

// The reconciler compares the sagas that finished in the outcome window,
// up to the grace, with the outcome records: one without its record and
// one with two are found; one that finished within the grace (its record
// may not be out yet) or before the window is not looked at.
func TestReconcileFindsMissingAndDuplicatedOutcomes(t *testing.T) {
	t.Parallel()
	pool, e := orchEngine(t)
	ctx := context.Background()
	finished := func(key string, ago time.Duration) uuid.UUID {
		t.Helper()
		id := uuid.New()
		if _, err := pool.Exec(ctx, `INSERT INTO orch.sagas (id, type, definition_version, aggregate_id, idempotency_key, state, current_step, data, steps, version, created_at, updated_at, finished_at)
VALUES ($1, 'place-order', 1, $2, $2, 'completed', '', '{}', '[]', 3, now() - $3::interval, now() - $3::interval, now() - $3::interval)`, id, key, ago.String()); err != nil {
			t.Fatal(err)
		}
		return id
	}
	good := finished("good", 5*time.Minute)
	missing := finished("missing", 5*time.Minute)
	twice := finished("twice", 6*time.Minute)
	finished("in-grace", 10*time.Second)
	finished("before-window", time.Hour)
	src := &fakeOutcomes{counts: map[uuid.UUID]int{good: 1, twice: 2}}
	rep, err := e.Reconcile(ctx, ReconcileOptions{DryRun: true, Outcomes: src}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.ByKind[string(KindOutcomeMissing)] != 1 || rep.ByKind[string(KindOutcomeDuplicated)] != 1 {
		t.Fatalf("by kind %v; want one %s and one %s", rep.ByKind, KindOutcomeMissing, KindOutcomeDuplicated)
	}
	for _, d := range rep.List {
		switch d.Kind {
		case KindOutcomeMissing:
			if d.SagaID != missing {
				t.Errorf("missing outcome found on %s, want %s", d.SagaID, missing)
			}
		case KindOutcomeDuplicated:
			if d.SagaID != twice {
				t.Errorf("duplicated outcome found on %s, want %s", d.SagaID, twice)
			}
		}
	}
	if age := time.Since(src.since); age < ReconcileOutcomeWindowDefault-time.Minute || age > ReconcileOutcomeWindowDefault+time.Minute {
		t.Errorf("the topic was read from %s ago, want the window %s", age, ReconcileOutcomeWindowDefault)
	}
}

// The Kafka source reads every partition from the first record published
// at or after since to the end: an older record is not read, a record
// published again (same message id) counts once, two records of one saga
// with their own ids count twice, a flag is not an end.
func TestOutcomeSourceReadsTheTopicFromSince(t *testing.T) {
	t.Parallel()
	brokers := testkit.Brokers(t)
	topic := testkit.Topic(t, brokers, "outcomes", 2)
	ctx := testkit.Context(t, time.Minute)
	now := time.Now()
	rec := func(saga uuid.UUID, kind string, msgID string, at time.Time) kafka.Message {
		t.Helper()
		o := message.SagaOutcome{SagaID: saga, Type: "t", AggregateID: "a-" + saga.String(), Kind: kind, State: "completed", Data: json.RawMessage(`{}`), At: at}
		v, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		return kafka.Message{Key: []byte(o.AggregateID), Value: v, Time: at,
			Headers: []kafka.Header{{Key: message.HeaderMessageID, Value: []byte(msgID)}, {Key: message.HeaderSagaID, Value: []byte(saga.String())}}}
	}
	old, once, twice, flagged := uuid.New(), uuid.New(), uuid.New(), uuid.New()
	dup := uuid.NewString()
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, Balancer: kafkaclient.Balancer(), BatchTimeout: time.Millisecond}
	defer w.Close()
	if err := w.WriteMessages(ctx,
		rec(old, message.OutcomeFinished, uuid.NewString(), now.Add(-time.Hour)),
		rec(once, message.OutcomeFinished, dup, now.Add(-time.Minute)),
		rec(once, message.OutcomeFinished, dup, now.Add(-time.Minute)),
		rec(twice, message.OutcomeFinished, uuid.NewString(), now.Add(-time.Minute)),
		rec(twice, message.OutcomeFinished, uuid.NewString(), now.Add(-time.Minute)),
		rec(flagged, message.OutcomeFlagged, uuid.NewString(), now.Add(-time.Minute)),
	); err != nil {
		t.Fatal(err)
	}
	src := kafkaOutcomes{brokers: brokers, dialer: &kafka.Dialer{Timeout: 10 * time.Second}, topic: topic}
	got, err := src.Finished(ctx, now.Add(-10*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if got[old] != 0 || got[once] != 1 || got[twice] != 2 || got[flagged] != 0 {
		t.Fatalf("finished records by saga: old %d, once %d, twice %d, flagged %d; want 0, 1, 2, 0", got[old], got[once], got[twice], got[flagged])
	}
}
