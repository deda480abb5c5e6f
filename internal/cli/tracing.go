package cli

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/sagaflow/sagaflow/orchestrator"
)

// newTracing builds the tracer of `serve` from tracing.*: with an empty
// tracing.otlp_endpoint, none (nil: the engine makes no spans, no exporter
// runs); else a tracer provider that batches spans to that OTLP/HTTP
// endpoint. stop flushes and shuts it down, bounded by a few seconds.
func newTracing(ctx context.Context, tc TracingConfig) (tr trace.Tracer, stop func(), err error) {
	ep := strings.TrimSpace(tc.OTLPEndpoint)
	if ep == "" {
		return nil, func() {}, nil
	}
	if !strings.Contains(ep, "://") {
		ep = "http://" + ep
	}
	u, err := url.Parse(ep)
	if err != nil || u.Host == "" {
		return nil, nil, fmt.Errorf("tracing.otlp_endpoint %q: want http(s)://host:port[/path] or host:port", ep)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/traces" // the OTLP/HTTP default path
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(u.String()))
	if err != nil {
		return nil, nil, fmt.Errorf("tracing.otlp_endpoint %q: %w", ep, err)
	}
	res := resource.NewSchemaless(semconv.ServiceName(tc.ServiceName))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	stop = func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tp.Shutdown(sctx)
	}
	return tp.Tracer(orchestrator.TracerName), stop, nil
}
