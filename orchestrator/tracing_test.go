package orchestrator_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

// commandHeaders reads the headers of every command in the outbox, oldest
// first.
func commandHeaders(t *testing.T, env *engineEnv, sagaID string) []map[string]string {
	t.Helper()
	rows, err := env.pool.Query(context.Background(), `SELECT headers FROM orch.outbox WHERE headers->>'saga-id' = $1 AND topic <> $2 ORDER BY id`,
		sagaID, orchestrator.OutcomeTopicDefault)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []map[string]string
	for rows.Next() {
		var b []byte
		if err := rows.Scan(&b); err != nil {
			t.Fatal(err)
		}
		var h map[string]string
		if err := json.Unmarshal(b, &h); err != nil {
			t.Fatal(err)
		}
		out = append(out, h)
	}
	return out
}

// With tracing off (no Config.Tracer) a saga keeps the traceparent and
// tracestate it was started with, and every command carries them: the
// first, and those decided on a reply. A start without one, or with an
// invalid one, sends no trace headers.
func TestTraceContextKeptWithTheSagaAndOnEveryCommand(t *testing.T) {
	t.Parallel()
	env := setupEngine(t)
	ctx := context.Background()
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	const ts = "vendor=abc"
	in, _, err := env.eng.Start(ctx, orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: "k1", AggregateID: "o1", Data: order("o1"),
		TraceParent: tp, TraceState: ts})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := get(t, env, in.ID)
	if got.TraceParent != tp || got.TraceState != ts {
		t.Fatalf("stored trace context %q %q, want %q %q", got.TraceParent, got.TraceState, tp, ts)
	}
	mustReply(t, env, lastCommand(t, env), message.Success, orderapi.ReserveInventoryResult{ReservationID: "r1"})
	mustReply(t, env, lastCommand(t, env), message.Failure, nil) // lock-coupon fails: compensations follow
	hs := commandHeaders(t, env, in.ID.String())
	if len(hs) < 3 {
		t.Fatalf("%d commands, want the forward, the next forward and a compensation", len(hs))
	}
	for i, h := range hs {
		if h[message.HeaderTraceParent] != tp || h[message.HeaderTraceState] != ts {
			t.Errorf("command %d headers %v, want traceparent %s and tracestate %s", i, h, tp, ts)
		}
	}

	for key, bad := range map[string]string{"k2": "", "k3": "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "k4": "not a traceparent"} {
		in, _, err := env.eng.Start(ctx, orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: key, AggregateID: key, Data: order(key), TraceParent: bad})
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range commandHeaders(t, env, in.ID.String()) {
			if _, ok := h[message.HeaderTraceParent]; ok {
				t.Errorf("start with traceparent %q: command carries %v", bad, h)
			}
		}
	}
}

// TestTraceContextPoisonDroppedAtTheDoor: a start whose traceparent is a
// later version (kept raw before: 20 KiB, or invalid UTF-8 that Postgres
// refuses) or whose tracestate breaks the grammar still starts, alone and
// in a batch with good starts; nothing refused is stored or sent, and each
// drop is counted by where, header and reason.
func TestTraceContextPoisonDroppedAtTheDoor(t *testing.T) {
	t.Parallel()
	env := setupEngine(t)
	ctx := context.Background()
	var logs syncBuffer
	eng, err := orchestrator.NewEngine(env.pool, env.eng.Registry(), &orchestrator.EngineConfig{Schema: "orch", Metrics: env.metrics, Advanced: orchestrator.Advanced{StartLanes: 1},
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	const good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ids := "-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-"
	cases := []struct {
		key, tp, ts string
		wantTP      string
		wantTS      string
	}{
		{"p-ff", "ff" + ids + strings.Repeat("f", 20<<10), "", "", ""},
		{"p-01-big", "01" + ids + strings.Repeat("a", 20<<10), "a=1", "", ""},
		{"p-01-utf8", "01" + ids + "\xff\xfe\xfd", "", "", ""},
		{"p-00-utf8", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902\xff\xfe-01", "", "", ""},
		{"p-ts-utf8", good, "a=\xff", good, ""},
		{"p-ts-big", good, "a=" + strings.Repeat("b", 20<<10), good, ""},
		{"p-ts-ok", good, " a=1 , b=2", good, "a=1,b=2"},
	}
	// all at once: one start batch, which must stay on its fast path
	errs := make(chan error, len(cases))
	for _, c := range cases {
		go func() {
			_, _, err := eng.Start(ctx, orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: c.key, AggregateID: c.key, Data: order(c.key),
				TraceParent: c.tp, TraceState: c.ts})
			errs <- err
		}()
	}
	for range cases {
		if err := <-errs; err != nil {
			t.Fatalf("start: %v", err)
		}
	}
	for _, c := range cases {
		var id string
		var tp, ts string
		if err := env.pool.QueryRow(ctx, `SELECT id::text, traceparent, tracestate FROM orch.sagas WHERE idempotency_key = $1`, c.key).Scan(&id, &tp, &ts); err != nil {
			t.Fatalf("%s: %v", c.key, err)
		}
		if tp != c.wantTP || ts != c.wantTS {
			t.Errorf("%s: stored trace context %.70q %.40q, want %q %q", c.key, tp, ts, c.wantTP, c.wantTS)
		}
		for _, h := range commandHeaders(t, env, id) {
			if h[message.HeaderTraceParent] != c.wantTP || h[message.HeaderTraceState] != c.wantTS {
				t.Errorf("%s: command headers %.200v, want traceparent %q tracestate %q", c.key, h, c.wantTP, c.wantTS)
			}
		}
	}
	out := logs.String()
	if strings.Contains(out, "starting each alone") {
		t.Errorf("a start batch left its fast path:\n%s", out)
	}
	if !strings.Contains(out, "trace context dropped") || !strings.Contains(out, "only version 00 is kept") || strings.Contains(out, strings.Repeat("a", 100)) {
		t.Errorf("log: want the drops with their reasons, without the values:\n%.2000s", out)
	}
	for _, w := range []struct {
		header string
		code   message.TraceDropCode
		n      float64
	}{
		{message.HeaderTraceParent, message.TraceDropVersion, 3},
		{message.HeaderTraceParent, message.TraceDropFormat, 1},
		{message.HeaderTraceState, message.TraceDropNoParent, 1},
		{message.HeaderTraceState, message.TraceDropFormat, 1},
		{message.HeaderTraceState, message.TraceDropSize, 1},
	} {
		if got := env.droppedTotal("start", w.header, string(w.code)); got != w.n {
			t.Errorf("trace_context_dropped_total{where=start,header=%s,reason=%s} = %v, want %v", w.header, w.code, got, w.n)
		}
	}
}

// TestStoredPoisonTraceContextNotSent: a saga stored before the door was
// strict, with a raw later-version traceparent, sends its next commands
// without it.
func TestStoredPoisonTraceContextNotSent(t *testing.T) {
	t.Parallel()
	env := setupEngine(t)
	ctx := context.Background()
	in, _, err := env.eng.Start(ctx, orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: "old", AggregateID: "old", Data: order("old")})
	if err != nil {
		t.Fatal(err)
	}
	poison := "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-" + strings.Repeat("x", 20<<10)
	if _, err := env.pool.Exec(ctx, `UPDATE orch.sagas SET traceparent = $2, tracestate = 'a=1' WHERE id = $1`, in.ID, poison); err != nil {
		t.Fatal(err)
	}
	mustReply(t, env, lastCommand(t, env), message.Success, orderapi.ReserveInventoryResult{ReservationID: "r1"})
	hs := commandHeaders(t, env, in.ID.String())
	if len(hs) != 2 {
		t.Fatalf("%d commands, want 2", len(hs))
	}
	if _, ok := hs[1][message.HeaderTraceParent]; ok {
		t.Fatalf("command after the reply carries traceparent %.80q", hs[1][message.HeaderTraceParent])
	}
	if _, ok := hs[1][message.HeaderTraceState]; ok {
		t.Fatalf("command after the reply carries a tracestate without its traceparent")
	}
	if got := env.droppedTotal("saga", message.HeaderTraceParent, string(message.TraceDropVersion)); got != 1 {
		t.Errorf("trace_context_dropped_total{where=saga} = %v, want 1", got)
	}
}

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestTraceContextPoisonWithTracingOn: with tracing on, a start whose
// traceparent the door refuses begins a trace of its own, and its commands
// carry a fresh valid traceparent of that trace, nothing of the refused
// one.
func TestTraceContextPoisonWithTracingOn(t *testing.T) {
	t.Parallel()
	env := setupEngine(t)
	ctx := context.Background()
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	eng, err := orchestrator.NewEngine(env.pool, env.eng.Registry(), &orchestrator.EngineConfig{Schema: "orch", Tracer: tp.Tracer(orchestrator.TracerName)})
	if err != nil {
		t.Fatal(err)
	}
	poison := "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-" + strings.Repeat("\xff", 20<<10)
	in, _, err := eng.Start(ctx, orchestrator.StartRequest{Type: orderapi.SagaType, IdempotencyKey: "on", AggregateID: "on", Data: order("on"),
		TraceParent: poison, TraceState: "a=1"})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := get(t, env, in.ID)
	trace := message.TraceID(got.TraceParent)
	if trace == "" || trace == "4bf92f3577b34da6a3ce929d0e0e4736" || got.TraceState != "" {
		t.Fatalf("stored %q %q; want a trace of its own without the refused tracestate", got.TraceParent, got.TraceState)
	}
	for _, h := range commandHeaders(t, env, in.ID.String()) {
		if c := h[message.HeaderTraceParent]; message.TraceID(c) != trace || len(c) != message.TraceParentBytes {
			t.Errorf("command traceparent %.80q, want a valid one of trace %s", c, trace)
		}
	}
}
