package metricset_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sagaflow/sagaflow/internal/metricset"
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
		case strings.HasPrefix(name, metricset.Namespace+"_process_"):
			process = true
		}
	}
	if !goRuntime || !process {
		t.Errorf("runtime collectors missing: go %v, process %v", goRuntime, process)
	}
	if _, err := metricset.Register(s.Registry); err == nil {
		t.Fatal("registering the set twice on one registry: no error")
	}
	if _, err := metricset.Register(prometheus.NewRegistry()); err != nil {
		t.Fatalf("Register on a fresh registry: %v", err)
	}
}
