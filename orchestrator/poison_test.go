package orchestrator_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/api"
	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/participants/inventory"
	"github.com/sagaflow/sagaflow/participants/reference"
	"github.com/sagaflow/sagaflow/relay"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

// TestTraceparentPoisonOnTheRealStack is finding 2 of issue 27 through the
// real pipeline (the API, Postgres, the relay, Kafka, the five reference
// participants and back), tracing off: starts whose traceparent is a
// 20 KiB later version (ff, or 01 which was kept raw) or carries invalid
// UTF-8, alone or beside a bad tracestate, are answered 201, store no
// trace context, send commands without one, make no participant write a
// dead letter, and complete. Before, the 01 one was copied into every
// command (over the participants' 16 KiB header bound: a dead letter per
// send until the saga gave up) and the invalid UTF-8 one answered 500.
func TestTraceparentPoisonOnTheRealStack(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	brokers := testkit.Brokers(t)
	prefix := "tp" + strings.ToLower(testkit.RandomSuffix(6)) + "."
	replyTopic := prefix + "saga.replies"
	reg := saga.NewRegistry()
	if err := steps.Register(reg); err != nil {
		t.Fatal(err)
	}
	svc, err := orchestrator.New(pool, reg, &orchestrator.Config{
		Brokers: brokers, Partitions: 2, GroupID: prefix + "orchestrator",
		Engine: orchestrator.EngineConfig{TopicPrefix: prefix, ReplyTopic: replyTopic, TimerInterval: 50 * time.Millisecond},
		Relay:  relay.Config{KeepSent: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	parts, err := reference.New(pool, reference.Options{Brokers: brokers, TopicPrefix: prefix, ReplyTopics: []string{replyTopic},
		Partitions: 2, PaymentLimitCents: 100_000, KeepSent: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testkit.Context(t, 2*time.Minute)
	if err := svc.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	if err := parts.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	if err := inventory.Seed(ctx, pool, reference.Options{}.Schema(orderapi.Inventory), map[string]int{"sku-apple": 10}); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	errc := make(chan error, 2)
	go func() { errc <- svc.Run(runCtx) }()
	go func() { errc <- parts.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		for range 2 {
			if err := <-errc; err != nil {
				t.Errorf("run: %v", err)
			}
		}
	})
	h, err := api.New(svc.Engine(), nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	ids := "-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-"
	cases := []struct{ name, traceparent, tracestate string }{
		{"ff 20 KiB", "ff" + ids + strings.Repeat("f", 20<<10), ""},
		{"01 20 KiB", "01" + ids + strings.Repeat("a", 20<<10), "rojo=00f067aa0ba902b7"},
		{"01 invalid UTF-8", "01" + ids + "\xff\xfe\xfd", ""},
		{"00 invalid UTF-8", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902\xff\xfe-01", ""},
		{"good with a bad tracestate", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "a=\xff," + strings.Repeat("b=c,", 4000)},
	}
	sagas := map[uuid.UUID]string{}
	for i, c := range cases {
		orderID := fmt.Sprintf("poison-%d", i)
		body := fmt.Sprintf(`{"type":"place-order","idempotency_key":%q,"aggregate_id":%q,"data":{"order_id":%q,"customer":"c","sku":"sku-apple","qty":1,"amount_cents":1000}}`,
			orderID, orderID, orderID)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/sagas", bytes.NewBufferString(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("traceparent", c.traceparent)
		if c.tracestate != "" {
			req.Header.Set("tracestate", c.tracestate)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var a api.StartAnswer
		err = json.NewDecoder(resp.Body).Decode(&a)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusCreated {
			t.Fatalf("%s: POST /sagas = %d (%v), want 201", c.name, resp.StatusCode, err)
		}
		sagas[a.ID] = c.name
	}
	testkit.Eventually(t, 90*time.Second, "every saga completed", func() (bool, error) {
		for id, name := range sagas {
			in, _, err := svc.Engine().Get(ctx, id)
			if err != nil {
				return false, err
			}
			if in.State.Terminal() && in.State != saga.Completed {
				return false, fmt.Errorf("%s: saga %s ended %s, want completed", name, id, in.State)
			}
			if in.State != saga.Completed {
				return false, nil
			}
		}
		return true, nil
	})
	for id, name := range sagas {
		in, _, err := svc.Engine().Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		good := strings.HasPrefix(name, "good")
		if (in.TraceParent != "") != good || in.TraceState != "" {
			t.Errorf("%s: stored traceparent %.80q tracestate %.80q", name, in.TraceParent, in.TraceState)
		}
		for _, s := range in.Steps {
			if s.Attempts != 1 {
				t.Errorf("%s: step %s sent %d times, want once", name, s.Name, s.Attempts)
			}
		}
	}
	commands := 0
	for _, r := range sentRecords(t, pool, orchestrator.SchemaDefault) {
		if r.Topic == orchestrator.OutcomeTopicDefault {
			continue // an outcome record, not a command
		}
		c, err := message.DecodeCommand(r.Value)
		if err != nil {
			t.Fatalf("outbox row on %s: %v", r.Topic, err)
		}
		name, ok := sagas[c.SagaID]
		if !ok {
			continue
		}
		commands++
		tp, has := r.Headers[message.HeaderTraceParent]
		if has && !message.ValidTraceParent(tp) || has != strings.HasPrefix(name, "good") {
			t.Errorf("%s: command %s/%s carries traceparent %.80q", name, c.Step, c.Action, tp)
		}
		if ts, has := r.Headers[message.HeaderTraceState]; has {
			t.Errorf("%s: command %s/%s carries tracestate %.80q", name, c.Step, c.Action, ts)
		}
	}
	if n := len(steps.PlaceOrderDefinition().Steps); commands != n*len(cases) {
		t.Errorf("%d commands for %d sagas, want %d each (one per step)", commands, len(cases), n)
	}
	schemas := []string{orchestrator.SchemaDefault}
	for _, name := range reference.Names {
		schemas = append(schemas, reference.Options{}.Schema(name))
	}
	for _, s := range schemas {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+s+`.dead_letters`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("%s wrote %d dead letters, want none", s, n)
		}
	}
}
