package saga_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

// commandHeaders reads the headers of every command in the outbox, oldest
// first.
func commandHeaders(t *testing.T, env *engineEnv, sagaID string) []map[string]string {
	t.Helper()
	rows, err := env.pool.Query(context.Background(), `SELECT headers FROM orch.outbox WHERE headers->>'saga-id' = $1 ORDER BY id`, sagaID)
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
	in, _, err := env.eng.Start(ctx, saga.StartRequest{Type: orderapi.SagaType, IdempotencyKey: "k1", AggregateID: "o1", Data: order("o1"),
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
		in, _, err := env.eng.Start(ctx, saga.StartRequest{Type: orderapi.SagaType, IdempotencyKey: key, AggregateID: key, Data: order(key), TraceParent: bad})
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
