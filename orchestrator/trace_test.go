package orchestrator_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

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

// sentRecord is one outbox row kept after publishing (relay.keep_sent).
type sentRecord struct {
	Topic   string
	Headers map[string]string
	Value   []byte
}

func sentRecords(t *testing.T, pool *pgxpool.Pool, schema string) []sentRecord {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT topic, headers, value FROM `+schema+`.outbox ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []sentRecord
	for rows.Next() {
		var r sentRecord
		var h []byte
		if err := rows.Scan(&r.Topic, &h, &r.Value); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(h, &r.Headers); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// A saga started through the API with a traceparent carries its trace id on
// every command, the first and those sent after replies (forwards after a
// success, compensations after the pivot's decline), through the real
// pipeline: the orchestrator's relay, Kafka, the reference participants,
// which echo it on their replies, and back. With tracing on there is a span
// for the start, each step send and each reply applied, all in the
// caller's trace; a start without a traceparent begins a trace of its own.
func TestEveryCommandCarriesTheSagasTraceID(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	brokers := testkit.Brokers(t)
	prefix := "tr" + strings.ToLower(testkit.RandomSuffix(6)) + "."
	replyTopic := prefix + "saga.replies"
	reg := saga.NewRegistry()
	if err := steps.Register(reg); err != nil {
		t.Fatal(err)
	}
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	svc, err := orchestrator.New(pool, reg, &orchestrator.Config{
		Brokers: brokers, Partitions: 2, GroupID: prefix + "orchestrator",
		Engine: orchestrator.EngineConfig{TopicPrefix: prefix, ReplyTopic: replyTopic, TimerInterval: 50 * time.Millisecond, Tracer: tp.Tracer(orchestrator.TracerName)},
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
	invSchema := reference.Options{}.Schema(orderapi.Inventory)
	if err := inventory.Seed(ctx, pool, invSchema, map[string]int{"sku-apple": 10}); err != nil {
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

	start := func(orderID string, amount int64, traceparent string) uuid.UUID {
		t.Helper()
		body := fmt.Sprintf(`{"type":"place-order","idempotency_key":%q,"aggregate_id":%q,"data":{"order_id":%q,"customer":"c","sku":"sku-apple","qty":1,"amount_cents":%d}}`,
			orderID, orderID, orderID, amount)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/sagas", bytes.NewBufferString(body))
		req.Header.Set("Content-Type", "application/json")
		if traceparent != "" {
			req.Header.Set("traceparent", traceparent)
			req.Header.Set("tracestate", "rojo=00f067aa0ba902b7")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var a api.StartAnswer
		if err := json.NewDecoder(resp.Body).Decode(&a); err != nil || resp.StatusCode != http.StatusCreated {
			t.Fatalf("POST /sagas: %d %v", resp.StatusCode, err)
		}
		return a.ID
	}
	const (
		traceOK       = "4bf92f3577b34da6a3ce929d0e0e4736"
		traceDeclined = "0af7651916cd43dd8448eb211c80319c"
		callerSpan    = "00f067aa0ba902b7"
	)
	completed := start("order-t1", 1000, "00-"+traceOK+"-"+callerSpan+"-01")
	declined := start("order-t2", 250_000, "00-"+traceDeclined+"-"+callerSpan+"-01") // declined at the pivot: compensated
	fresh := start("order-t3", 1000, "")

	want := map[uuid.UUID]saga.State{completed: saga.Completed, declined: saga.Compensated, fresh: saga.Completed}
	testkit.Eventually(t, 90*time.Second, "the three sagas terminal", func() (bool, error) {
		for id, st := range want {
			in, _, err := svc.Engine().Get(ctx, id)
			if err != nil || in.State != st {
				return false, err
			}
		}
		return true, nil
	})
	freshIn, _, err := svc.Engine().Get(ctx, fresh)
	if err != nil {
		t.Fatal(err)
	}
	traceFresh := message.TraceID(freshIn.TraceParent)
	if traceFresh == "" || traceFresh == traceOK || traceFresh == traceDeclined {
		t.Fatalf("a start without traceparent under tracing: stored %q, want a new trace", freshIn.TraceParent)
	}
	traceOf := map[uuid.UUID]string{completed: traceOK, declined: traceDeclined, fresh: traceFresh}

	// Every command in the orchestrator's outbox (kept after it was
	// published to Kafka) carries its saga's trace id.
	perSaga := map[uuid.UUID][]string{}
	commandTrace := map[uuid.UUID]string{} // message id -> traceparent
	for _, r := range sentRecords(t, pool, orchestrator.SchemaDefault) {
		if r.Topic == orchestrator.OutcomeTopicDefault {
			continue // an outcome record, not a command
		}
		c, err := message.DecodeCommand(r.Value)
		if err != nil {
			t.Fatalf("outbox row on %s: %v", r.Topic, err)
		}
		tp := r.Headers[message.HeaderTraceParent]
		if got := message.TraceID(tp); got != traceOf[c.SagaID] {
			t.Errorf("saga %s command %s/%s attempt %d: traceparent %q, want trace id %s", c.SagaID, c.Step, c.Action, c.Attempt, tp, traceOf[c.SagaID])
		}
		if c.SagaID == completed && r.Headers[message.HeaderTraceState] != "rojo=00f067aa0ba902b7" {
			t.Errorf("command %s/%s: tracestate %q, want the caller's", c.Step, c.Action, r.Headers[message.HeaderTraceState])
		}
		if sa := c.Step + "/" + string(c.Action); !slices.Contains(perSaga[c.SagaID], sa) { // re-sends once
			perSaga[c.SagaID] = append(perSaga[c.SagaID], sa)
		}
		commandTrace[c.MessageID] = tp
	}
	if n := len(perSaga[completed]); n < 5 {
		t.Errorf("completed saga: %d commands %v, want its five forwards", n, perSaga[completed])
	}
	if got := strings.Join(perSaga[declined], " "); !strings.Contains(got, "reserve-inventory/compensate") {
		t.Errorf("declined saga's commands %q: want the compensations sent after the decline", got)
	}

	// The participants echoed each command's trace context on the reply.
	replies := 0
	for _, name := range reference.Names {
		for _, r := range sentRecords(t, pool, reference.Options{}.Schema(name)) {
			rep, err := message.DecodeReply(r.Value)
			if err != nil {
				continue
			}
			replies++
			if got, want := r.Headers[message.HeaderTraceParent], commandTrace[rep.InReplyTo]; got != want {
				t.Errorf("%s reply to %s/%s: traceparent %q, want the command's %q", name, rep.Step, rep.Action, got, want)
			}
		}
	}
	// Every command was answered before its saga moved on (a re-sent
	// copy's answer may still be on its way: at least one per step).
	if replies < len(perSaga[completed])+len(perSaga[declined]) {
		t.Errorf("%d replies for %d commands", replies, len(commandTrace))
	}

	// Spans: a start per saga (the caller's span its parent), a send per
	// command whose span id the command's traceparent names, and an apply
	// per reply, all in their saga's trace.
	count := map[string]int{}
	sendSpans := map[string]bool{}
	inTrace := map[string]bool{traceOK: true, traceDeclined: true, traceFresh: true}
	for _, s := range spans.GetSpans() {
		kind := s.Name
		switch {
		case s.Name == "saga start":
			kind = "start"
			if tid := s.SpanContext.TraceID().String(); tid != traceFresh && s.Parent.SpanID().String() != callerSpan {
				t.Errorf("saga start span in trace %s has parent %s, want the caller's span %s", tid, s.Parent.SpanID(), callerSpan)
			}
		case strings.HasPrefix(s.Name, "step send "):
			kind = "send"
			sendSpans[s.SpanContext.SpanID().String()] = true
		case strings.HasPrefix(s.Name, "reply apply "):
			kind = "apply"
		}
		count[kind]++
		if !inTrace[s.SpanContext.TraceID().String()] {
			t.Errorf("span %q in trace %s, not one of the sagas'", s.Name, s.SpanContext.TraceID())
		}
	}
	// A send span per command (more if a transaction that enqueued one
	// rolled back and was redone), an apply per reply the sagas needed.
	if need := len(perSaga[completed]) + len(perSaga[declined]) + len(perSaga[fresh]); count["start"] != 3 || count["send"] < len(commandTrace) || count["apply"] < need {
		t.Errorf("spans %v; want 3 starts, at least %d sends and %d applies", count, len(commandTrace), need)
	}
	for id, tp := range commandTrace {
		if span := tp[36:52]; !sendSpans[span] {
			t.Errorf("command %s: traceparent %s names span %s, no step send span", id, tp, span)
		}
	}
}
