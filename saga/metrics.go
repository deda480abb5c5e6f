package saga

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the engine's Prometheus collectors.
type Metrics struct {
	started      *prometheus.CounterVec
	finished     *prometheus.CounterVec
	transitions  *prometheus.CounterVec
	stepDuration *prometheus.HistogramVec
	late         *prometheus.CounterVec
	illegal      *prometheus.CounterVec
	retries      *prometheus.CounterVec
	conflicts    prometheus.Counter
	flagged      *prometheus.CounterVec
	inFlight     *prometheus.GaugeVec
}

// NewMetrics registers the engine's collectors on reg under namespace ns.
func NewMetrics(reg prometheus.Registerer, ns string) (*Metrics, error) {
	m := &Metrics{
		started: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "sagas_started_total",
			Help: "Sagas started, by type."}, []string{"type"}),
		finished: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "sagas_finished_total",
			Help: "Sagas that reached a terminal state (completed, compensated, failed), by type and state."}, []string{"type", "state"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "saga_transitions_total",
			Help: "State transitions applied, by saga type and event kind."}, []string{"type", "event"}),
		stepDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "step_duration_seconds",
			Help:    "Time from a step action's first send to its definite answer, by step, action and outcome.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}}, []string{"step", "action", "outcome"}),
		late: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "late_replies_total",
			Help: "Replies for a step no longer awaited, journaled and ignored, by saga type."}, []string{"type"}),
		illegal: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "illegal_transitions_total",
			Help: "Events the transition table does not allow, journaled and ignored, by saga type."}, []string{"type"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "step_retries_total",
			Help: "Commands re-sent (after a retry answer, a timeout or an operator), by step and action."}, []string{"step", "action"}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "saga_version_conflicts_total",
			Help: "Conditional updates that found the saga moved by someone else (reloaded and re-decided)."}),
		flagged: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "sagas_flagged_total",
			Help: "Sagas flagged for an operator while still retrying, by type."}, []string{"type"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "sagas_in_flight",
			Help: "Non-terminal sagas, by state."}, []string{"state"}),
	}
	for _, c := range []prometheus.Collector{m.started, m.finished, m.transitions, m.stepDuration, m.late, m.illegal, m.retries, m.conflicts, m.flagged, m.inFlight} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				continue
			}
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) observe(sagaType string, ev EventKind, prev Instance, d Decision) {
	if m == nil {
		return
	}
	if d.Late {
		m.late.WithLabelValues(sagaType).Inc()
	}
	if d.Illegal {
		m.illegal.WithLabelValues(sagaType).Inc()
	}
	if !d.Changed {
		return
	}
	m.transitions.WithLabelValues(sagaType, string(ev)).Inc()
	if ev == EventStart {
		m.started.WithLabelValues(sagaType).Inc()
	}
	if d.Next.State.Terminal() && d.Next.State != prev.State {
		m.finished.WithLabelValues(sagaType, string(d.Next.State)).Inc()
	}
	if d.Next.Flag != "" && prev.Flag == "" {
		m.flagged.WithLabelValues(sagaType).Inc()
	}
	for _, s := range d.Settled {
		m.stepDuration.WithLabelValues(s.Step, string(s.Action), string(s.Outcome)).Observe(s.Duration.Seconds())
	}
	for _, o := range d.Send {
		if o.Command.Attempt > 1 {
			m.retries.WithLabelValues(o.Command.Step, string(o.Command.Action)).Inc()
		}
	}
}
