package orchestrator

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/saga"
)

// replySpans starts a "reply apply" span per reply, child of the trace
// context its record carries (the participant echoes the command's) when
// message.RecordTraceContext keeps it, and
// returns the function that ends them with the batch's error. Without a
// tracer it does nothing.
func (s *Service) replySpans(ms []message.Record, rs []message.Reply, idx []int) func(error) {
	if !s.engine.Tracing() {
		return func(error) {}
	}
	tr := s.engine.Tracer()
	spans := make([]trace.Span, 0, len(rs))
	for k, r := range rs {
		m := ms[idx[k]]
		// The door of a reply's trace context: what it refuses is dropped
		// (counted, logged) and the span starts a trace of its own.
		tp, ts, drops := message.RecordTraceContext(m)
		for _, d := range drops {
			s.engine.TraceDropped(saga.TraceFromReply, "", d)
		}
		_, span := tr.Start(saga.TraceContext(context.Background(), tp, ts), "reply apply "+r.Step,
			trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(
				attribute.String("saga.id", r.SagaID.String()), attribute.String("saga.step", r.Step),
				attribute.String("saga.action", string(r.Action)), attribute.String("saga.outcome", string(r.Outcome)),
				attribute.String("messaging.message.id", r.MessageID.String())))
		spans = append(spans, span)
	}
	return func(err error) {
		for _, sp := range spans {
			if err != nil && !errors.Is(err, saga.ErrBatchFallback) && !errors.Is(err, message.ErrInvalid) {
				sp.SetStatus(codes.Error, err.Error())
			}
			sp.End()
		}
	}
}
