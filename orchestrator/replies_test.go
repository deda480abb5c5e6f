package orchestrator_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sagaflow/sagaflow/inbox"
	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

func replyRec(t *testing.T, r message.Reply) message.Record {
	t.Helper()
	b, err := message.EncodeReply(r)
	if err != nil {
		t.Fatal(err)
	}
	return message.Record{Topic: "saga.replies", Key: []byte(r.SagaID.String()), Value: b, Headers: []message.Header{
		{Key: message.HeaderMessageID, Value: []byte(r.MessageID.String())},
		{Key: message.HeaderSagaID, Value: []byte(r.SagaID.String())},
		{Key: message.HeaderContentType, Value: []byte("application/json")},
	}}
}

func spanAttr(s tracetest.SpanStub, key string) (attribute.Value, bool) {
	for _, a := range s.Attributes {
		if string(a.Key) == key {
			return a.Value, true
		}
	}
	return attribute.Value{}, false
}

// tracedService is a service without Kafka (timers only) on a fresh
// database, its engine tracing into the returned exporter.
func tracedService(t *testing.T) (*orchestrator.Service, *pgxpool.Pool, *tracetest.InMemoryExporter) {
	t.Helper()
	pool := testkit.Pool(t)
	reg := saga.NewRegistry()
	if err := steps.Register(reg); err != nil {
		t.Fatal(err)
	}
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	svc, err := orchestrator.New(pool, reg, &orchestrator.Config{Run: orchestrator.RunSet{Timers: true},
		Engine: orchestrator.EngineConfig{Schema: "orch", Tracer: tp.Tracer(orchestrator.TracerName)}})
	if err != nil {
		t.Fatal(err)
	}
	sets, err := svc.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	testkit.Migrate(t, pool, sets)
	return svc, pool, spans
}

func startOrder(t *testing.T, svc *orchestrator.Service, o string) saga.Instance {
	t.Helper()
	in, _, err := svc.Engine().Start(testkit.Context(t, time.Minute), orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: o, AggregateID: o,
		Data: map[string]any{"order_id": o, "customer": "c", "sku": "sku-apple", "qty": 1, "amount_cents": 100}})
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// A command's span carries the hash of its id, never the id: a command id
// is what a reply quotes to answer it, and traces are read by more people
// than the command topics.
func TestStepSendSpanCarriesTheCommandIDHash(t *testing.T) {
	t.Parallel()
	svc, _, spans := tracedService(t)
	in := startOrder(t, svc, "o-1")
	cmdID := in.Steps[0].AwaitID
	var send *tracetest.SpanStub
	for _, s := range spans.GetSpans() {
		if s.Name == "step send "+orderapi.StepReserveInventory {
			send = &s
		}
		for _, a := range s.Attributes {
			if strings.Contains(strings.ToLower(a.Value.AsString()), cmdID.String()) {
				t.Fatalf("span %q attribute %s carries the command id", s.Name, a.Key)
			}
		}
	}
	if send == nil {
		t.Fatal("no step send span")
	}
	if v, ok := spanAttr(*send, message.AttrMessageIDHash); !ok || v.AsString() != message.IDHash(cmdID) || len(v.AsString()) != message.IDHashLen {
		t.Fatalf("step send span %s = %q, want the command id's hash %s", message.AttrMessageIDHash, v.AsString(), message.IDHash(cmdID))
	}
}

// A stray reply is dropped alone from its batch: the batch's other replies
// are applied as one (not down the one-by-one path), the stray one is
// dead-lettered and marked stray, for retention to purge.
func TestHandleRepliesDropsAStrayReplyAlone(t *testing.T) {
	t.Parallel()
	svc, pool, spans := tracedService(t)
	ctx := testkit.Context(t, time.Minute)
	var ids []uuid.UUID
	for _, o := range []string{"o-1", "o-2"} {
		ids = append(ids, startOrder(t, svc, o).ID)
	}
	answer := func(id uuid.UUID) message.Reply {
		in, _, err := svc.Engine().Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return message.Reply{MessageID: uuid.New(), InReplyTo: in.Steps[0].AwaitID, SagaID: id, Step: orderapi.StepReserveInventory,
			Action: message.Forward, Outcome: message.Success, Payload: json.RawMessage(`{"reservation_id":"r"}`)}
	}
	stray := answer(ids[0])
	stray.InReplyTo = uuid.New() // answers nothing the saga sent
	recs := []message.Record{replyRec(t, answer(ids[0])), replyRec(t, stray), replyRec(t, answer(ids[1]))}
	var out []inbox.Result
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		out, err = svc.HandleReplies(ctx, tx, recs)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if out[0].Outcome != inbox.Applied || out[2].Outcome != inbox.Applied {
		t.Fatalf("results %+v: want the answers applied", out)
	}
	if out[1].Outcome != inbox.DeadLetter || !out[1].Stray {
		t.Fatalf("stray reply: %+v, want a dead letter marked stray", out[1])
	}
	for _, id := range ids {
		in, _, err := svc.Engine().Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if in.CurrentStep() != orderapi.StepLockCoupon {
			t.Fatalf("saga %s at %q, want moved on to %s", id, in.CurrentStep(), orderapi.StepLockCoupon)
		}
	}
	var got []tracetest.SpanStub
	for _, s := range spans.GetSpans() {
		if s.Name == "reply apply "+orderapi.StepReserveInventory {
			got = append(got, s)
		}
	}
	if len(got) != 3 {
		t.Fatalf("%d reply spans, want 3", len(got))
	}
	for k, s := range got {
		if v, ok := spanAttr(s, orchestrator.AttrReplyRetried); ok && v.AsBool() {
			t.Fatalf("reply %d retried: the stray reply made its batch be decided again", k)
		}
		_, strayAttr := spanAttr(s, orchestrator.AttrReplyStray)
		if (k == 1) != (strayAttr && s.Status.Code == codes.Error) {
			t.Fatalf("reply %d span: stray attribute %v, status %v", k, strayAttr, s.Status)
		}
	}
}
