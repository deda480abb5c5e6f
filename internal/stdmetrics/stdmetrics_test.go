package stdmetrics_test

import (
	"runtime"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sagaflow/sagaflow/internal/stdmetrics"
)

func TestRegisterExportsStandardNamesAndBuildInfo(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	if err := stdmetrics.Register(reg, "sagaflow"); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, mf := range mfs {
		got[mf.GetName()] = true
		if mf.GetName() != "sagaflow_build_info" {
			continue
		}
		m := mf.GetMetric()[0]
		if m.GetGauge().GetValue() != 1 {
			t.Errorf("sagaflow_build_info = %v, want 1", m.GetGauge().GetValue())
		}
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["goversion"] != runtime.Version() || labels["version"] == "" || labels["revision"] == "" {
			t.Errorf("sagaflow_build_info labels %v, want goversion %s and a version and revision", labels, runtime.Version())
		}
	}
	for _, name := range []string{"process_cpu_seconds_total", "process_resident_memory_bytes", "go_goroutines", "go_memstats_alloc_bytes", "sagaflow_build_info"} {
		if !got[name] {
			t.Errorf("%s not exported", name)
		}
	}
	if err := stdmetrics.Register(reg, "sagaflow"); err == nil {
		t.Error("a second Register on the same registry succeeded, want the duplicate refused")
	}
}
