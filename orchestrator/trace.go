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

// Span attributes of "reply apply" spans: how the reply's batch was applied
// (AttrReplyRetried: a saga of the batch was moved by someone else after
// it was loaded, and the batch was decided again) and AttrReplyStray on a
// stray reply, left out of its batch alone and dead-lettered.
const (
	AttrReplyRetried = "sagaflow.reply.retried"
	AttrReplyStray   = "sagaflow.reply.stray"
)

// replyTrace ends the "reply apply" spans of a batch.
type replyTrace struct {
	spans []trace.Span
}

// refused marks reply k's span as refused by its content (err), stray or
// not.
func (rt *replyTrace) refused(k int, err error) {
	if rt == nil {
		return
	}
	sp := rt.spans[k]
	sp.SetAttributes(attribute.Bool(AttrReplyStray, errors.Is(err, saga.ErrStrayReply)))
	sp.SetStatus(codes.Error, err.Error())
}

// retried marks every span of the batch as decided again after a version
// conflict.
func (rt *replyTrace) retried() {
	if rt == nil {
		return
	}
	for _, sp := range rt.spans {
		sp.SetAttributes(attribute.Bool(AttrReplyRetried, true))
	}
}

// end ends the spans with the batch's error.
func (rt *replyTrace) end(err error) {
	if rt == nil {
		return
	}
	for _, sp := range rt.spans {
		if err != nil {
			sp.SetStatus(codes.Error, err.Error())
		}
		sp.End()
	}
}

// replySpans starts a "reply apply" span per reply, child of the trace
// context its record carries (the participant echoes the command's) when
// message.RecordTraceContext keeps it, and returns what ends them. Without a tracer it returns nil, whose methods
// do nothing. The reply's message id is shown as its hash
// (message.IDHash), as every message id in logs and spans.
func (s *Service) replySpans(ms []message.Record, rs []message.Reply, idx []int) *replyTrace {
	if !s.engine.tracing() {
		return nil
	}
	tr := s.engine.tracer()
	rt := &replyTrace{spans: make([]trace.Span, 0, len(rs))}
	for k, r := range rs {
		m := ms[idx[k]]
		// The door of a reply's trace context: what it refuses is dropped
		// (counted, logged) and the span starts a trace of its own.
		tp, ts, drops := message.RecordTraceContext(m)
		for _, d := range drops {
			s.engine.traceDropped(traceFromReply, "", d)
		}
		_, span := tr.Start(traceContext(context.Background(), tp, ts), "reply apply "+r.Step,
			trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(
				attribute.String("saga.id", r.SagaID.String()), attribute.String("saga.step", r.Step),
				attribute.String("saga.action", string(r.Action)), attribute.String("saga.outcome", string(r.Outcome)),
				attribute.String(message.AttrMessageIDHash, message.IDHash(r.MessageID))))
		rt.spans = append(rt.spans, span)
	}
	return rt
}
