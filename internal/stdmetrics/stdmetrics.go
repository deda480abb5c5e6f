// Package stdmetrics registers the collectors every sagaflow process
// exports beside its own: Prometheus' standard process_* and go_* metrics,
// under their usual names so stock dashboards and alerts work, and
// <namespace>_build_info.
package stdmetrics

import (
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Register adds the Go runtime and process collectors (unprefixed:
// go_goroutines, process_cpu_seconds_total, ...) and the gauge
// <ns>_build_info{version,revision,goversion} = 1 to reg.
func Register(reg prometheus.Registerer, ns string) error {
	version, revision, goVersion := Build()
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: ns, Name: "build_info",
		Help:        "Always 1; the labels tell the build: module version, VCS revision and Go version.",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision, "goversion": goVersion},
	})
	info.Set(1)
	for _, c := range []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		info,
	} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// Build reads the binary's build information: the main module's version
// ("(devel)" for a build from a work tree), the VCS revision ("unknown"
// when the build did not stamp it, as with -buildvcs=false) with
// "-dirty" when the tree was modified, and the Go version.
func Build() (version, revision, goVersion string) {
	version, revision, goVersion = "unknown", "unknown", "unknown"
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return version, revision, goVersion
	}
	goVersion = bi.GoVersion
	if bi.Main.Version != "" {
		version = bi.Main.Version
	}
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if dirty && revision != "unknown" {
		revision += "-dirty"
	}
	return version, revision, goVersion
}
