// Package metricset registers the Prometheus metrics of one sagaflow
// process: the saga engine's, the inbox consumers', the relays' and
// retention's, under one namespace. The binary's commands (internal/cli),
// the benchmark (internal/bench) and the demo (internal/demo) all build
// their metrics here, so a metric has the same name wherever it is scraped.
package metricset

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sagaflow/sagaflow/inbox"
	"github.com/sagaflow/sagaflow/internal/retention"
	"github.com/sagaflow/sagaflow/internal/stdmetrics"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/relay"
)

// Namespace prefixes every metric name.
const Namespace = "sagaflow"

// Set is the metrics of every component of a process.
type Set struct {
	// Registry holds them all (nil when the Set was made by Register).
	Registry *prometheus.Registry
	Saga     *orchestrator.Metrics
	Inbox    *inbox.Metrics
	Relay    *relay.Metrics
	// Retention and Reconcile are nil when the Set was made by Register.
	Retention *retention.Metrics
	Reconcile *orchestrator.ReconcileMetrics
}

// New returns the Set of a process on a registry of its own: the
// pipeline's metrics (Register), retention's, the reconciler's, and the
// standard Go runtime and process collectors with sagaflow_build_info
// (stdmetrics; what /metrics serves).
func New() (*Set, error) {
	reg := prometheus.NewRegistry()
	if err := stdmetrics.Register(reg, Namespace); err != nil {
		return nil, err
	}
	s, err := Register(reg)
	if err != nil {
		return nil, err
	}
	if s.Retention, err = retention.NewMetrics(reg, Namespace); err != nil {
		return nil, err
	}
	if s.Reconcile, err = orchestrator.NewReconcileMetrics(reg, Namespace); err != nil {
		return nil, err
	}
	s.Registry = reg
	return s, nil
}

// Register registers the metrics of the pipeline (the engine, the inbox
// consumers and the relays) on reg, which may hold others (retention's, the
// runtime's) already.
func Register(reg prometheus.Registerer) (*Set, error) {
	s := &Set{}
	var err error
	if s.Saga, err = orchestrator.NewMetrics(reg, Namespace); err != nil {
		return nil, err
	}
	if s.Inbox, err = inbox.NewMetrics(reg, Namespace); err != nil {
		return nil, err
	}
	if s.Relay, err = relay.NewMetrics(reg, Namespace); err != nil {
		return nil, err
	}
	return s, nil
}
