package orchestrator

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/saga"
)

// TracerName is the instrumentation name of the engine's spans.
const TracerName = "github.com/sagaflow/sagaflow/saga"

var w3c = propagation.TraceContext{}

// tracer is the engine's tracer: EngineConfig.Tracer, or a no-op one.
func (e *Engine) tracer() trace.Tracer {
	if e.cfg.Tracer != nil {
		return e.cfg.Tracer
	}
	return noop.NewTracerProvider().Tracer(TracerName)
}

// traceContext extracts the trace context of a traceparent and tracestate
// into ctx (unchanged when traceparent is not one message.CheckTraceContext
// keeps; an invalid tracestate alone is left out).
func traceContext(ctx context.Context, traceparent, tracestate string) context.Context {
	tp, ts, _ := message.CheckTraceContext(traceparent, tracestate)
	if tp == "" {
		return ctx
	}
	c := propagation.MapCarrier{message.HeaderTraceParent: tp}
	if ts != "" {
		c[message.HeaderTraceState] = ts
	}
	return w3c.Extract(ctx, c)
}

// startHeadersProblem checks, before a start is committed, the headers
// its commands will carry: the envelope's and the trace context admitted
// at the door, within limit bytes (message.MaxSendHeadersBytes, what every
// participant accepts). The outbox refuses more in any case; here a start
// that would make such commands is refused alone, as the caller's mistake
// (an *InputError: 400), rather than failing its batch.
func startHeadersProblem(traceparent, tracestate string, limit int) error {
	h := message.Headers(uuid.Max, uuid.Max)
	if traceparent != "" {
		h[message.HeaderTraceParent] = traceparent
		if tracestate != "" {
			h[message.HeaderTraceState] = tracestate
		}
	}
	if err := message.CheckHeaderMap(h, message.HeaderLimits{MaxTotalBytes: limit}); err != nil {
		return &InputError{Field: "headers", Problem: "would make commands a participant must refuse: " + err.Error()}
	}
	return nil
}

// Where a dropped trace context came in (the where label of
// sagaflow_trace_context_dropped_total).
const (
	traceFromStart = "start"
	traceFromReply = "reply"
	traceFromSaga  = "saga" // a saga stored before the door checked it
)

// admitTrace is the door of a start's trace context (Start, StartTx and
// through them POST /sagas): what message.CheckTraceContext refuses is
// dropped before anything stores or sends it, counted and logged (sampled),
// and the start goes on without it.
func (e *Engine) admitTrace(req *StartRequest) {
	if req.TraceParent == "" && req.TraceState == "" {
		return
	}
	tp, ts, drops := message.CheckTraceContext(req.TraceParent, req.TraceState)
	req.TraceParent, req.TraceState = tp, ts
	for _, d := range drops {
		e.traceDropped(traceFromStart, req.Type, d)
	}
}

// traceDropped counts and logs (sampled: the first of each where, header
// and code, then at most one a minute with the number left out) a trace
// context header dropped where it came in. sagaType may be empty.
func (e *Engine) traceDropped(where, sagaType string, d message.TraceDrop) {
	if e.cfg.Metrics != nil && e.cfg.Metrics.traceDropped != nil {
		e.cfg.Metrics.traceDropped.WithLabelValues(where, d.Header, string(d.Code)).Inc()
	}
	ok, suppressed := e.traceDrops.keep(where + "/" + d.Header + "/" + string(d.Code))
	if !ok {
		return
	}
	attrs := []slog.Attr{slog.String("where", where), slog.String("header", d.Header), slog.String("code", string(d.Code)), slog.String("reason", d.Reason)}
	if sagaType != "" {
		attrs = append(attrs, slog.String("saga_type", sagaType))
	}
	if suppressed > 0 {
		attrs = append(attrs, slog.Int("suppressed_since_last", suppressed))
	}
	e.cfg.Logger.LogAttrs(context.Background(), slog.LevelWarn, "trace context dropped", attrs...)
}

// dropLogEvery is how often at most a dropped trace context of one kind is
// logged after the first.
const dropLogEvery = time.Minute

// dropSampler logs the first drop of each kind, then at most one per
// dropLogEvery, so that a client sending bad headers on every request
// cannot flood the log. Its keys are bounded by the codes.
type dropSampler struct {
	mu   sync.Mutex
	last map[string]time.Time
	left map[string]int
}

func (s *dropSampler) keep(key string) (bool, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last == nil {
		s.last, s.left = map[string]time.Time{}, map[string]int{}
	}
	now := time.Now()
	if last, seen := s.last[key]; seen && now.Sub(last) < dropLogEvery {
		s.left[key]++
		return false, 0
	}
	n := s.left[key]
	s.last[key], s.left[key] = now, 0
	return true, n
}

// injectTrace writes the span context of ctx into headers as traceparent
// and tracestate (nothing when it has none).
func injectTrace(ctx context.Context, headers map[string]string) {
	w3c.Inject(ctx, propagation.MapCarrier(headers))
}

// startTrace gives a new saga its trace context: with tracing on, a
// "saga start" span, child of the request's traceparent or the root of a
// new trace; off, the request's trace context as admitTrace kept it.
func (e *Engine) startTrace(in *saga.Instance, req StartRequest) {
	if e.cfg.Tracer == nil {
		in.TraceParent, in.TraceState, _ = message.CheckTraceContext(req.TraceParent, req.TraceState)
		return
	}
	ctx := traceContext(context.Background(), req.TraceParent, req.TraceState)
	_, span := e.cfg.Tracer.Start(ctx, "saga start", trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
		attribute.String("saga.id", in.ID.String()), attribute.String("saga.type", in.Type),
		attribute.String("saga.aggregate_id", in.AggregateID)))
	h := map[string]string{}
	injectTrace(trace.ContextWithSpan(context.Background(), span), h)
	span.End()
	in.TraceParent, in.TraceState = h[message.HeaderTraceParent], h[message.HeaderTraceState]
}

// commandHeaders are the headers of command c of saga in: the envelope's,
// and the trace context: with tracing on that of a "step send" span, child
// of the saga's, else the saga's own. The saga's is checked again, so a
// saga stored with a trace context the door would refuse today (before
// the door was strict) sends none.
func (e *Engine) commandHeaders(in *saga.Instance, c message.Command, participant string) map[string]string {
	h := message.Headers(c.MessageID, c.SagaID)
	if in.TraceParent == "" && in.TraceState == "" {
		return h
	}
	tp, ts, drops := message.CheckTraceContext(in.TraceParent, in.TraceState)
	for _, d := range drops {
		e.traceDropped(traceFromSaga, in.Type, d)
	}
	if e.cfg.Tracer == nil {
		if tp != "" {
			h[message.HeaderTraceParent] = tp
			if ts != "" {
				h[message.HeaderTraceState] = ts
			}
		}
		return h
	}
	ctx := traceContext(context.Background(), tp, ts)
	ctx, span := e.cfg.Tracer.Start(ctx, "step send "+c.Step, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(
		attribute.String("saga.id", c.SagaID.String()), attribute.String("saga.type", c.SagaType),
		attribute.String("saga.step", c.Step), attribute.String("saga.action", string(c.Action)),
		attribute.Int("saga.attempt", c.Attempt), attribute.String("saga.participant", participant),
		attribute.String(message.AttrMessageIDHash, message.IDHash(c.MessageID))))
	injectTrace(ctx, h)
	span.End()
	return h
}

// traceAttr is the trace_id log attribute of a saga (empty when it has no
// trace context).
func traceAttr(in *saga.Instance) slog.Attr {
	return slog.String("trace_id", message.TraceID(in.TraceParent))
}

// tracing reports whether the engine makes spans (EngineConfig.Tracer is set).
func (e *Engine) tracing() bool { return e.cfg.Tracer != nil }
