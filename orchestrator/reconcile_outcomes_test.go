package orchestrator

import (
	"context"
	"encoding/json"
	"strings"
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
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, Balancer: kafkaclient.Balancer(), BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
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
	src := &kafkaTopics{brokers: brokers, dialer: &kafka.Dialer{Timeout: 10 * time.Second}, outcomes: topic}
	got, err := src.Finished(ctx, now.Add(-10*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if got[old] != 0 || got[once] != 1 || got[twice] != 2 || got[flagged] != 0 {
		t.Fatalf("finished records by saga: old %d, once %d, twice %d, flagged %d; want 0, 1, 2, 0", got[old], got[once], got[twice], got[flagged])
	}
}

// fakeStarts is a StartSource of fixed records.
type fakeStarts []StartSeen

func (f fakeStarts) Starts(context.Context, time.Time) ([]StartSeen, error) { return f, nil }

// A start record that made a saga, and one that was dead-lettered, are
// accounted for; one with neither is a lost start; one published within
// the grace (perhaps not consumed yet) is not looked at.
func TestReconcileFindsALostStart(t *testing.T) {
	t.Parallel()
	pool, e := orchEngine(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO orch.sagas (id, type, definition_version, aggregate_id, idempotency_key, state, current_step, data, steps, version, created_at, updated_at)
VALUES (gen_random_uuid(), 'place-order', 1, 'o-1', 'o-1', 'running', '', '{}', '[]', 1, now(), now())`); err != nil {
		t.Fatal(err)
	}
	deadID, lostID := uuid.NewString(), uuid.NewString()
	if _, err := pool.Exec(ctx, `INSERT INTO orch.dead_letters (topic, partition, "offset", value, message_id, reason) VALUES ('saga.starts', 0, 7, '\x00', $1, 'unknown saga type')`, deadID); err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(-5 * time.Minute)
	src := fakeStarts{
		{MessageID: uuid.NewString(), Where: "saga.starts/0@1", At: at, Type: "place-order", IdempotencyKey: "o-1"},
		{MessageID: deadID, Where: "saga.starts/0@7", At: at, Type: "nope", IdempotencyKey: "x"},
		{MessageID: lostID, Where: "saga.starts/1@3", At: at, Type: "place-order", IdempotencyKey: "o-lost"},
		{MessageID: uuid.NewString(), Where: "saga.starts/1@4", At: time.Now(), Type: "place-order", IdempotencyKey: "o-new"},
	}
	rep, err := e.Reconcile(ctx, ReconcileOptions{DryRun: true, Starts: src}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.ByKind[string(KindStartLost)] != 1 {
		t.Fatalf("by kind %v; want one %s", rep.ByKind, KindStartLost)
	}
	for _, d := range rep.List {
		if d.Kind == KindStartLost && (!strings.Contains(d.Detail, "o-lost") || !strings.Contains(d.Detail, lostID) || !strings.Contains(d.Detail, "saga.starts/1@3")) {
			t.Errorf("lost start %+v; want it to name its key, message id and place", d)
		}
	}
}

// The Kafka source reads the start topic's records from since, each
// message id once, with the type and key of those that decode.
func TestStartSourceReadsTheStartTopic(t *testing.T) {
	t.Parallel()
	brokers := testkit.Brokers(t)
	topic := testkit.Topic(t, brokers, "starts", 2)
	ctx := testkit.Context(t, time.Minute)
	rec := func(id, body string) kafka.Message {
		return kafka.Message{Key: []byte("k"), Value: []byte(body), Time: time.Now(), Headers: []kafka.Header{{Key: message.HeaderMessageID, Value: []byte(id)}}}
	}
	a, b := uuid.NewString(), uuid.NewString()
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, Balancer: kafkaclient.Balancer(), BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
	defer w.Close()
	good := `{"type":"place-order","idempotency_key":"o-9","aggregate_id":"o-9","data":{}}`
	if err := w.WriteMessages(ctx, rec(a, good), rec(a, good), rec(b, `not json`)); err != nil {
		t.Fatal(err)
	}
	src := &kafkaTopics{brokers: brokers, dialer: &kafka.Dialer{Timeout: 10 * time.Second}, starts: topic}
	got, err := src.Starts(ctx, time.Now().Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].MessageID != a || got[0].Type != "place-order" || got[0].IdempotencyKey != "o-9" || got[1].MessageID != b || got[1].Type != "" {
		t.Fatalf("starts read %+v; want o-9 once, then the record that does not decode", got)
	}
}
