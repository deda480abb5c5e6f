package orchestrator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/participants/cars"
	"github.com/sagaflow/sagaflow/participants/conformance"
	"github.com/sagaflow/sagaflow/participants/flights"
	"github.com/sagaflow/sagaflow/participants/hotels"
	"github.com/sagaflow/sagaflow/participants/inventory"
	"github.com/sagaflow/sagaflow/participants/reference"
	"github.com/sagaflow/sagaflow/relay"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps"
	"github.com/sagaflow/sagaflow/steps/orderapi"
	"github.com/sagaflow/sagaflow/steps/tripapi"
)

// topicsEnv is an orchestrator with its outcome, start and event topics
// named for the test, the reference participants (place-order's and
// book-trip's) and a reader of the outcome topic, on a fresh broker.
type topicsEnv struct {
	t        *testing.T
	ctx      context.Context
	pool     *pgxpool.Pool
	brokers  []string
	svc      *orchestrator.Service
	metrics  *prometheus.Registry
	outcomes *conformance.OutcomeReader
	replies  string
	starts   string
	events   string
	outcome  string
}

func newTopicsEnv(t *testing.T) *topicsEnv {
	t.Helper()
	pool := testkit.Pool(t)
	brokers := testkit.Brokers(t)
	prefix := "st" + strings.ToLower(testkit.RandomSuffix(6)) + "."
	e := &topicsEnv{t: t, pool: pool, brokers: brokers, replies: prefix + "saga.replies", starts: prefix + "saga.starts",
		events: prefix + "saga.events", outcome: prefix + "saga.outcomes", metrics: prometheus.NewRegistry()}
	reg := saga.NewRegistry()
	if err := steps.Register(reg); err != nil {
		t.Fatal(err)
	}
	m, err := orchestrator.NewMetrics(e.metrics, "sagaflow")
	if err != nil {
		t.Fatal(err)
	}
	e.svc, err = orchestrator.New(pool, reg, &orchestrator.Config{
		Brokers: brokers, Partitions: 2, GroupID: prefix + "orchestrator", StartTopic: e.starts, EventTopic: e.events,
		Engine: orchestrator.EngineConfig{TopicPrefix: prefix, ReplyTopic: e.replies, OutcomeTopic: e.outcome,
			TimerInterval: 50 * time.Millisecond, Metrics: m},
		Relay: relay.Config{KeepSent: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	parts, err := reference.New(pool, reference.Options{Brokers: brokers, TopicPrefix: prefix, ReplyTopics: []string{e.replies},
		Partitions: 2, PaymentLimitCents: 100_000, KeepSent: true, Trips: true})
	if err != nil {
		t.Fatal(err)
	}
	e.ctx = testkit.Context(t, 3*time.Minute)
	if err := e.svc.Prepare(e.ctx); err != nil {
		t.Fatal(err)
	}
	if err := parts.Prepare(e.ctx); err != nil {
		t.Fatal(err)
	}
	schema := reference.Options{}.Schema
	if err := inventory.Seed(e.ctx, pool, schema(orderapi.Inventory), map[string]int{"sku-apple": 100}); err != nil {
		t.Fatal(err)
	}
	if err := flights.Seed(e.ctx, pool, schema(tripapi.Flights), map[string]int{"LH1": 10}); err != nil {
		t.Fatal(err)
	}
	if err := hotels.Seed(e.ctx, pool, schema(tripapi.Hotels), map[string]int{"ritz": 10}); err != nil {
		t.Fatal(err)
	}
	if err := cars.Seed(e.ctx, pool, schema(tripapi.Cars), map[string]int{"mini": 10}); err != nil {
		t.Fatal(err)
	}
	if e.outcomes, err = conformance.ReadOutcomes(e.ctx, brokers, e.outcome); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.outcomes.Close)
	runCtx, stop := context.WithCancel(context.Background())
	errc := make(chan error, 2)
	go func() { errc <- e.svc.Run(runCtx) }()
	go func() { errc <- parts.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		for range 2 {
			if err := <-errc; err != nil {
				t.Errorf("run: %v", err)
			}
		}
	})
	return e
}

func orderBody(key string, amount int) string {
	return fmt.Sprintf(`{"type":"place-order","idempotency_key":%q,"aggregate_id":%q,"data":{"order_id":%q,"customer":"c","sku":"sku-apple","qty":1,"amount_cents":%d}}`,
		key, key, key, amount)
}

func tripData(trip string) map[string]any {
	return map[string]any{"trip_id": trip, "customer": "c", "flight": "LH1", "hotel": "ritz", "amount_cents": 1000, "needs_approval": true}
}

// startTrip starts a book-trip that waits for its approval and returns it
// once it waits.
func (e *topicsEnv) startTrip(trip string) uuid.UUID {
	e.t.Helper()
	in, _, err := e.svc.Engine().Start(e.ctx, orchestrator.StartRequest{Type: tripapi.SagaType, IdempotencyKey: trip, AggregateID: trip, Data: tripData(trip)})
	if err != nil {
		e.t.Fatal(err)
	}
	testkit.Eventually(e.t, 60*time.Second, "trip "+trip+" waiting for its approval", func() (bool, error) {
		return e.saga(in.ID).Steps[3].State == saga.StepWaiting, nil
	})
	return in.ID
}

func (e *topicsEnv) saga(id uuid.UUID) saga.Instance {
	e.t.Helper()
	in, _, err := e.svc.Engine().Get(e.ctx, id)
	if err != nil {
		e.t.Fatal(err)
	}
	return in
}

func (e *topicsEnv) waitState(id uuid.UUID, st saga.State) {
	e.t.Helper()
	testkit.Eventually(e.t, 90*time.Second, fmt.Sprintf("saga %s %s", id, st), func() (bool, error) {
		return e.saga(id).State == st, nil
	})
}

// produce writes records to topic, each with a message-id header (a new
// one when id is nil).
func (e *topicsEnv) produce(topic string, key string, value string, id uuid.UUID) {
	e.t.Helper()
	if id == uuid.Nil {
		id = uuid.New()
	}
	w := &kafka.Writer{Addr: kafka.TCP(e.brokers...), Topic: topic, Balancer: &kafka.Hash{}, BatchTimeout: time.Millisecond}
	defer w.Close()
	err := w.WriteMessages(e.ctx, kafka.Message{Key: []byte(key), Value: []byte(value),
		Headers: []kafka.Header{{Key: message.HeaderMessageID, Value: []byte(id.String())}}})
	if err != nil {
		e.t.Fatal(err)
	}
}

// deadLetters returns the reasons of the orchestrator's dead letters from
// topic, by record key.
func (e *topicsEnv) deadLetters(topic string) map[string]string {
	e.t.Helper()
	rows, err := e.pool.Query(e.ctx, `SELECT key, reason FROM `+orchestrator.SchemaDefault+`.dead_letters WHERE topic = $1`, topic)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]string{}
	for rows.Next() {
		var k, r string
		if err := rows.Scan(&k, &r); err != nil {
			e.t.Fatal(err)
		}
		out[k] = r
	}
	if rows.Err() != nil {
		e.t.Fatal(rows.Err())
	}
	return out
}

// waitDeadLetters waits until every key of want has a dead letter from
// topic whose reason contains want[key].
func (e *topicsEnv) waitDeadLetters(topic string, want map[string]string) {
	e.t.Helper()
	testkit.Eventually(e.t, 60*time.Second, fmt.Sprintf("%d dead letters from %s", len(want), topic), func() (bool, error) {
		got := e.deadLetters(topic)
		for k, w := range want {
			r, ok := got[k]
			if !ok {
				return false, nil
			}
			if !strings.Contains(r, w) {
				return false, fmt.Errorf("dead letter %q: reason %q, want it to name %q", k, r, w)
			}
		}
		return true, nil
	})
}

// waitOutcomes waits until each saga of ids has an outcome record.
func (e *topicsEnv) waitOutcomes(ids ...uuid.UUID) map[uuid.UUID][]message.SagaOutcome {
	e.t.Helper()
	got, err := e.outcomes.Wait(e.ctx, 60*time.Second, func(m map[uuid.UUID][]message.SagaOutcome) bool {
		for _, id := range ids {
			if len(m[id]) == 0 {
				return false
			}
		}
		return true
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return got
}

// outboxOutcomes counts the outcome rows of saga id in the orchestrator's
// outbox (the relay keeps sent rows in this test).
func (e *topicsEnv) outboxOutcomes(id uuid.UUID) int {
	e.t.Helper()
	n := 0
	for _, r := range sentRecords(e.t, e.pool, orchestrator.SchemaDefault) {
		if r.Topic == e.outcome && r.Headers[message.HeaderSagaID] == id.String() {
			n++
		}
	}
	return n
}

func (e *topicsEnv) counter(name string, labels ...string) float64 {
	e.t.Helper()
	mfs, err := e.metrics.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			match := true
			for i := 0; i+1 < len(labels); i += 2 {
				match = match && got[labels[i]] == labels[i+1]
			}
			if match {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// The orchestrator's Kafka topics on the real stack (relay, broker,
// reference participants): outcomes, starts and events.
func TestSagaTopicsOnKafka(t *testing.T) {
	t.Parallel()
	e := newTopicsEnv(t)
	t.Run("outcomes", e.testOutcomes)
	t.Run("starts", e.testStarts)
	t.Run("start from a service's outbox", e.testStartFromOutbox)
	t.Run("events", e.testEvents)
}

// A completed, a compensated and a failed saga (failed by an operator's
// force-fail) each have exactly one outcome record with the saga's fields;
// the final reply of the completed one applied again writes none.
func (e *topicsEnv) testOutcomes(t *testing.T) {
	e.t = t
	eng := e.svc.Engine()
	start := func(key string, amount int) uuid.UUID {
		in, _, err := eng.Start(e.ctx, orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: key, AggregateID: key,
			Data: json.RawMessage(fmt.Sprintf(`{"order_id":%q,"customer":"c","sku":"sku-apple","qty":1,"amount_cents":%d}`, key, amount))})
		if err != nil {
			t.Fatal(err)
		}
		return in.ID
	}
	done := start("out-ok", 1000)
	declined := start("out-declined", 500_000)
	trip := e.startTrip("out-trip")
	if _, err := eng.Operate(e.ctx, trip, saga.Operator{Action: saga.ActionForceFail, Actor: "ops-alice", Reason: "hotel closed"}); err != nil {
		t.Fatal(err)
	}
	e.waitState(done, saga.Completed)
	e.waitState(declined, saga.Compensated)
	got := e.waitOutcomes(done, declined, trip)
	want := map[uuid.UUID]struct {
		typ, key, state, actor, reason string
	}{
		done:     {orderapi.SagaType, "out-ok", "completed", "", ""},
		declined: {orderapi.SagaType, "out-declined", "compensated", "", ""},
		trip:     {tripapi.SagaType, "out-trip", "failed", "ops-alice", "hotel closed"},
	}
	for id, w := range want {
		os := got[id]
		if len(os) != 1 {
			t.Fatalf("saga %s (%s): %d outcome records %+v, want 1", id, w.key, len(os), os)
		}
		o := os[0]
		in := e.saga(id)
		if o.Kind != message.OutcomeFinished || o.State != w.state || o.Type != w.typ || o.AggregateID != w.key || o.IdempotencyKey != w.key {
			t.Errorf("saga %s: outcome %+v, want kind finished, state %s, type %s, keys %s", id, o, w.state, w.typ, w.key)
		}
		if o.Actor != w.actor || !strings.Contains(o.Reason, w.reason) {
			t.Errorf("saga %s: outcome actor %q reason %q, want %q and a reason naming %q", id, o.Actor, o.Reason, w.actor, w.reason)
		}
		if in.FinishedAt == nil || !o.At.Equal(*in.FinishedAt) {
			t.Errorf("saga %s: outcome at %s, want the finish time %v", id, o.At, in.FinishedAt)
		}
		var data, stored map[string]any
		if err := json.Unmarshal(o.Data, &data); err != nil {
			t.Fatalf("saga %s: outcome data %s: %v", id, o.Data, err)
		}
		if err := json.Unmarshal(in.Data, &stored); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(data) != fmt.Sprint(stored) {
			t.Errorf("saga %s: outcome data %v, want the final data %v", id, data, stored)
		}
	}
	if declinedReason := got[declined][0].Reason; declinedReason == "" {
		t.Errorf("the compensated saga's outcome has no reason")
	}
	if n := e.counter("sagaflow_outcomes_written_total", "type", orderapi.SagaType, "state", "completed"); n < 1 {
		t.Errorf("sagaflow_outcomes_written_total{completed} = %v, want >= 1", n)
	}

	// The completed saga's last reply again, as a redelivery the inbox's
	// dedupe no longer knows: the saga changes nothing, no outcome is
	// written.
	last := e.finalReply(done)
	tx, err := e.pool.Begin(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.ApplyReply(e.ctx, tx, last); err != nil {
		t.Fatalf("apply the final reply again: %v", err)
	}
	if err := tx.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}
	if n := e.outboxOutcomes(done); n != 1 {
		t.Fatalf("saga %s: %d outcome rows in the outbox after its final reply came again, want 1", done, n)
	}
	if st := e.saga(done).State; st != saga.Completed {
		t.Fatalf("saga %s %s after its final reply came again", done, st)
	}
}

// finalReply reads the reply topic for the reply that finished saga id
// (the last step's forward success).
func (e *topicsEnv) finalReply(id uuid.UUID) message.Reply {
	e.t.Helper()
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: e.brokers, GroupID: "spy-" + testkit.RandomSuffix(4), Topic: e.replies,
		StartOffset: kafka.FirstOffset, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	for {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			e.t.Fatalf("read the final reply of saga %s: %v", id, err)
		}
		rep, err := message.DecodeReply(m.Value)
		if err == nil && rep.SagaID == id && rep.Step == orderapi.StepAwardPoints && rep.Action == message.Forward {
			return rep
		}
	}
}

// A start record starts its saga, and its outcome arrives on the outcome
// topic; the same record twice (same message id) and a copy with another
// message id start nothing more; bad records are dead-lettered with their
// reason.
func (e *topicsEnv) testStarts(t *testing.T) {
	e.t = t
	id := uuid.New()
	e.produce(e.starts, "k-start", orderBody("k-start", 1000), id)
	e.produce(e.starts, "k-start", orderBody("k-start", 1000), id)
	e.produce(e.starts, "k-start", orderBody("k-start", 1000), uuid.Nil)
	var sagaID uuid.UUID
	testkit.Eventually(t, 60*time.Second, "the saga of the start record", func() (bool, error) {
		list, err := e.svc.Engine().List(e.ctx, orchestrator.Filter{Type: orderapi.SagaType, IdempotencyKey: "k-start"})
		if err != nil || len(list.Sagas) == 0 {
			return false, err
		}
		sagaID = list.Sagas[0].ID
		return true, nil
	})
	got := e.waitOutcomes(sagaID)
	if o := got[sagaID]; len(o) != 1 || o[0].State != "completed" || o[0].IdempotencyKey != "k-start" {
		t.Fatalf("outcomes of the saga started over Kafka: %+v, want one, completed", o)
	}

	bad := map[string]string{
		"bad-json":    "not a valid JSON body",
		"bad-type":    "no-such-saga",
		"bad-data":    "data",
		"bad-key":     "idempotency_key",
		"bad-field":   "unknown field",
		"bad-content": "customer is required",
	}
	e.produce(e.starts, "bad-json", `{"type":`, uuid.Nil)
	e.produce(e.starts, "bad-type", `{"type":"no-such-saga","idempotency_key":"x","aggregate_id":"x","data":{}}`, uuid.Nil)
	e.produce(e.starts, "bad-data", `{"type":"place-order","idempotency_key":"bad-data","aggregate_id":"x","data":[1]}`, uuid.Nil)
	e.produce(e.starts, "bad-key", `{"type":"place-order","aggregate_id":"x","data":{}}`, uuid.Nil)
	e.produce(e.starts, "bad-field", `{"type":"place-order","idempotency_key":"bf","aggregate_id":"x","data":{},"extra":1}`, uuid.Nil)
	e.produce(e.starts, "bad-content", `{"type":"place-order","idempotency_key":"bad-content","aggregate_id":"x","data":{"order_id":"o"}}`, uuid.Nil)
	e.waitDeadLetters(e.starts, bad)
	list, err := e.svc.Engine().List(e.ctx, orchestrator.Filter{Type: orderapi.SagaType, IdempotencyKey: "k-start"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Sagas) != 1 {
		t.Fatalf("%d sagas for the start record delivered three times, want 1", len(list.Sagas))
	}
	for _, k := range []string{"bad-data", "bad-content"} {
		if l, err := e.svc.Engine().List(e.ctx, orchestrator.Filter{IdempotencyKey: k}); err != nil || len(l.Sagas) != 0 {
			t.Fatalf("a saga for the refused start %s: %v %v", k, l.Sagas, err)
		}
	}
	if n := e.counter("sagaflow_kafka_starts_total", "result", "dead_lettered"); n != float64(len(bad)) {
		t.Errorf("sagaflow_kafka_starts_total{dead_lettered} = %v, want %d", n, len(bad))
	}
	if n := e.counter("sagaflow_kafka_starts_total", "result", "existing"); n != 1 {
		t.Errorf("sagaflow_kafka_starts_total{existing} = %v, want 1 (the copy with another message id)", n)
	}
}

// An event record completes a book-trip waiting for its approval; the same
// event_id again is a no-op; bad events are dead-lettered with their
// reason and do not block the partition.
func (e *topicsEnv) testEvents(t *testing.T) {
	e.t = t
	trip := e.startTrip("ev-trip")
	waiting := e.startTrip("ev-waiting")
	ev := `{"name":"approval","event_id":"mgr-7","data":{"approved":true}}`
	e.produce(e.events, trip.String(), ev, uuid.Nil)
	e.waitState(trip, saga.Completed)
	e.produce(e.events, trip.String(), ev, uuid.Nil)
	unknown := uuid.New()
	bad := map[string]string{
		unknown.String(): saga.ErrNotFound.Error(),
		trip.String():    "finished",
		waiting.String(): "never waits",
		"not-a-saga":     "not a saga id",
	}
	e.produce(e.events, unknown.String(), `{"name":"approval","event_id":"e1","data":{}}`, uuid.Nil)
	e.produce(e.events, trip.String(), `{"name":"approval","event_id":"mgr-8","data":{"approved":true}}`, uuid.Nil)
	e.produce(e.events, waiting.String(), `{"name":"payment-webhook","event_id":"e2","data":{}}`, uuid.Nil)
	e.produce(e.events, "not-a-saga", `{"name":"approval","event_id":"e3"}`, uuid.Nil)
	e.waitDeadLetters(e.events, bad)
	// Behind the bad ones on their partitions, a good one still goes
	// through: the waiting trip's approval, with the saga id in the body.
	e.produce(e.events, waiting.String(), fmt.Sprintf(`{"saga_id":%q,"name":"approval","event_id":"mgr-9","data":{"approved":false}}`, waiting), uuid.Nil)
	e.waitState(waiting, saga.Compensated)
	if n := e.counter("sagaflow_kafka_events_total", "result", "duplicate"); n != 1 {
		t.Errorf("sagaflow_kafka_events_total{duplicate} = %v, want 1", n)
	}
	if n := e.counter("sagaflow_kafka_events_total", "result", "recorded"); n != 2 {
		t.Errorf("sagaflow_kafka_events_total{recorded} = %v, want 2", n)
	}
	taken := 0
	_, journal, err := e.svc.Engine().Get(e.ctx, trip)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range journal {
		if j.Event == saga.JournalEventTaken {
			taken++
		}
	}
	if taken != 1 {
		t.Fatalf("trip %s took %d events, want 1 (the duplicate is a no-op)", trip, taken)
	}
	got := e.waitOutcomes(trip, waiting)
	if got[trip][0].State != "completed" || got[waiting][0].State != "compensated" {
		t.Fatalf("outcomes %+v %+v, want completed and compensated", got[trip], got[waiting])
	}
}

// A service starts a saga in the transaction of its own business write by
// putting the start record in its own outbox: rolled back, no saga; committed,
// exactly one, even when the record is delivered twice.
func (e *topicsEnv) testStartFromOutbox(t *testing.T) {
	e.t = t
	shop := "shop_" + strings.ToLower(testkit.RandomSuffix(6))
	ob := newShop(t, e.ctx, e.pool, shop)
	rl, err := relay.New(e.pool, ob.outbox, &relay.Config{Brokers: e.brokers, KeepSent: true})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- rl.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-errc; err != nil {
			t.Errorf("shop relay: %v", err)
		}
	}()

	if err := ob.placeOrder(e.ctx, e.starts, "shop-rolled-back", false); err != nil {
		t.Fatal(err)
	}
	if err := ob.placeOrder(e.ctx, e.starts, "shop-committed", true); err != nil {
		t.Fatal(err)
	}
	// The committed record once more, as a redelivery: the same value
	// under the message id the outbox gave it.
	var value []byte
	var headers map[string]string
	if err := e.pool.QueryRow(e.ctx, `SELECT value, headers FROM `+shop+`.outbox WHERE key = 'shop-committed'`).Scan(&value, &headers); err != nil {
		t.Fatal(err)
	}
	e.produce(e.starts, "shop-committed", string(value), uuid.MustParse(headers[message.HeaderMessageID]))
	find := func(key string) []saga.Instance {
		list, err := e.svc.Engine().List(e.ctx, orchestrator.Filter{Type: orderapi.SagaType, IdempotencyKey: key})
		if err != nil {
			t.Fatal(err)
		}
		return list.Sagas
	}
	var id uuid.UUID
	testkit.Eventually(t, 60*time.Second, "the committed order's saga", func() (bool, error) {
		if s := find("shop-committed"); len(s) > 0 {
			id = s[0].ID
			return true, nil
		}
		return false, nil
	})
	e.waitOutcomes(id)
	if s := find("shop-committed"); len(s) != 1 {
		t.Fatalf("%d sagas for the committed order, want 1", len(s))
	}
	if s := find("shop-rolled-back"); len(s) != 0 {
		t.Fatalf("a saga for the rolled-back order: %+v", s)
	}
	var rows int
	if err := e.pool.QueryRow(e.ctx, `SELECT count(*) FROM `+shop+`.outbox WHERE key = 'shop-rolled-back'`).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("the rolled-back order left %d outbox rows (%v)", rows, err)
	}
	var orders int
	if err := e.pool.QueryRow(e.ctx, `SELECT count(*) FROM `+shop+`.orders`).Scan(&orders); err != nil || orders != 1 {
		t.Fatalf("%d orders (%v), want the committed one", orders, err)
	}
}
