package saga

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sagaflow/sagaflow/message"
)

// TracerName is the instrumentation name of the engine's spans.
const TracerName = "github.com/sagaflow/sagaflow/saga"

var w3c = propagation.TraceContext{}

// Tracer is the engine's tracer: Config.Tracer, or a no-op one.
func (e *Engine) Tracer() trace.Tracer { return e.tracer() }

func (e *Engine) tracer() trace.Tracer {
	if e.cfg.Tracer != nil {
		return e.cfg.Tracer
	}
	return noop.NewTracerProvider().Tracer(TracerName)
}

// TraceContext extracts the trace context of a traceparent and tracestate
// into ctx (unchanged when traceparent is not a valid W3C one).
func TraceContext(ctx context.Context, traceparent, tracestate string) context.Context {
	if !message.ValidTraceParent(traceparent) {
		return ctx
	}
	c := propagation.MapCarrier{message.HeaderTraceParent: traceparent}
	if ts := message.CleanTraceState(tracestate); ts != "" {
		c[message.HeaderTraceState] = ts
	}
	return w3c.Extract(ctx, c)
}

// injectTrace writes the span context of ctx into headers as traceparent
// and tracestate (nothing when it has none).
func injectTrace(ctx context.Context, headers map[string]string) {
	w3c.Inject(ctx, propagation.MapCarrier(headers))
}

// startTrace gives a new saga its trace context: with tracing on, a
// "saga start" span, child of the request's traceparent or the root of a
// new trace; off, the request's traceparent as it came (when valid).
func (e *Engine) startTrace(in *Instance, req StartRequest) {
	if e.cfg.Tracer == nil {
		if message.ValidTraceParent(req.TraceParent) {
			in.TraceParent, in.TraceState = req.TraceParent, message.CleanTraceState(req.TraceState)
		}
		return
	}
	ctx := TraceContext(context.Background(), req.TraceParent, req.TraceState)
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
// of the saga's, else the saga's own.
func (e *Engine) commandHeaders(in *Instance, c message.Command, participant string) map[string]string {
	h := message.Headers(c.MessageID, c.SagaID)
	if in.TraceParent == "" {
		return h
	}
	if e.cfg.Tracer == nil {
		h[message.HeaderTraceParent] = in.TraceParent
		if in.TraceState != "" {
			h[message.HeaderTraceState] = in.TraceState
		}
		return h
	}
	ctx := TraceContext(context.Background(), in.TraceParent, in.TraceState)
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
func traceAttr(in *Instance) slog.Attr {
	return slog.String("trace_id", message.TraceID(in.TraceParent))
}

// Tracing reports whether the engine makes spans (Config.Tracer is set).
func (e *Engine) Tracing() bool { return e.cfg.Tracer != nil }
