package metricset_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sagaflow/sagaflow/internal/metricset"
	"github.com/sagaflow/sagaflow/internal/retention"
)

// New registers every component and the runtime collectors under the one
// namespace; Register on a registry that has them already fails.
func TestNewAndRegister(t *testing.T) {
	t.Parallel()
	s, err := metricset.New()
	if err != nil {
		t.Fatal(err)
	}
	if s.Registry == nil || s.Saga == nil || s.Inbox == nil || s.Relay == nil || s.Retention == nil {
		t.Fatalf("incomplete set: %+v", s)
	}
	mfs, err := s.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var goRuntime, process bool
	for _, mf := range mfs {
		switch name := mf.GetName(); {
		case strings.HasPrefix(name, "go_"):
			goRuntime = true
		case strings.HasPrefix(name, "process_"):
			process = true
		}
	}
	if !goRuntime || !process {
		t.Errorf("runtime collectors missing: go %v, process %v", goRuntime, process)
	}
	if _, err := metricset.Register(s.Registry); err == nil {
		t.Fatal("registering the set twice on one registry: no error")
	}
	// Register leaves retention's metrics to whoever registered them.
	reg := prometheus.NewRegistry()
	if _, err := retention.NewMetrics(reg, metricset.Namespace); err != nil {
		t.Fatal(err)
	}
	s2, err := metricset.Register(reg)
	if err != nil {
		t.Fatalf("Register beside retention's metrics: %v", err)
	}
	if s2.Retention != nil || s2.Registry != nil {
		t.Errorf("Register set Retention or Registry: %+v", s2)
	}
}
