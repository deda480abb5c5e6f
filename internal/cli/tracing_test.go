package cli

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/spf13/viper"
)

// Off by default: no tracer, nothing exported. With tracing.otlp_endpoint
// set, spans reach that OTLP/HTTP endpoint (POST /v1/traces, protobuf)
// at the latest when tracing stops.
func TestTracingOffByDefaultAndExportsOverOTLP(t *testing.T) {
	t.Parallel()
	v := viper.New()
	for _, k := range Keys {
		v.SetDefault(k.Name, k.Default)
	}
	load := func() TracingConfig {
		t.Helper()
		c, err := Load(v)
		if err != nil {
			t.Fatal(err)
		}
		return c.Tracing
	}
	tr, stop, err := newTracing(context.Background(), load())
	if err != nil || tr != nil {
		t.Fatalf("default config: tracer %v, err %v; want none", tr, err)
	}
	stop()

	var mu sync.Mutex
	var paths []string
	var bodies [][]byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		paths, bodies = append(paths, r.Method+" "+r.URL.Path+" "+r.Header.Get("Content-Type")), append(bodies, b)
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	v.Set("tracing.otlp_endpoint", strings.TrimPrefix(srv.URL, "http://")) // host:port form
	tr, stop, err = newTracing(context.Background(), load())
	if err != nil || tr == nil {
		t.Fatalf("with an endpoint: tracer %v, err %v", tr, err)
	}
	_, span := tr.Start(context.Background(), "saga start")
	span.End()
	stop()
	mu.Lock()
	defer mu.Unlock()
	if len(paths) == 0 || paths[0] != "POST /v1/traces application/x-protobuf" {
		t.Fatalf("exporter requests %v, want POST /v1/traces application/x-protobuf", paths)
	}
	if !strings.Contains(string(bodies[0]), "saga start") || !strings.Contains(string(bodies[0]), "sagaflow-orchestrator") {
		t.Errorf("exported body lacks the span name or the service name: %q", bodies[0])
	}
}
