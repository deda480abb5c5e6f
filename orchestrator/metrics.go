package orchestrator

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/saga"
)

// Metrics are the engine's Prometheus collectors.
type Metrics struct {
	started      *prometheus.CounterVec
	finished     *prometheus.CounterVec
	transitions  *prometheus.CounterVec
	stepDuration *prometheus.HistogramVec
	sagaDuration *prometheus.HistogramVec
	late         *prometheus.CounterVec
	illegal      *prometheus.CounterVec
	retries      *prometheus.CounterVec
	conflicts    prometheus.Counter
	// keptSagas counts the sagas of reply batches by where they came from
	// (sagacache.go): hit (kept, not loaded), miss (loaded), discarded
	// (kept, then loaded because the batch ran again).
	keptSagas    *prometheus.CounterVec
	flagged      *prometheus.CounterVec
	inFlight     *prometheus.GaugeVec
	traceDropped *prometheus.CounterVec
	// unauthenticated counts replies not signed by their step's
	// participant (signing.go), by participant and outcome.
	unauthenticated *prometheus.CounterVec
	// events counts external events by saga type and result (recorded,
	// duplicate, refused); waitsTimedOut wait steps whose deadline passed;
	// cancels client cancels by result (accepted, refused).
	events        *prometheus.CounterVec
	waitsTimedOut *prometheus.CounterVec
	cancels       *prometheus.CounterVec
	// outcomes counts the outcome records written, by saga type and state
	// (completed, compensated, failed, or flagged); kafkaStarts and
	// kafkaEvents the records of the start and event topics, by result.
	outcomes    *prometheus.CounterVec
	kafkaStarts *prometheus.CounterVec
	kafkaEvents *prometheus.CounterVec
	// The backlog (backlog.go), refreshed with the in-flight gauge: the
	// orchestrator outbox's unsent rows and oldest unsent age by topic,
	// its dead rows by error class, the oldest compensating and flagged
	// saga's age by type.
	outboxTopicPending, outboxTopicOldest *prometheus.GaugeVec
	outboxDeadByClass                     *prometheus.GaugeVec
	oldestCompensating, oldestFlagged     *prometheus.GaugeVec
	// The per-type consistency windows (slo.go): the window, the open
	// sagas past it, and the finished sagas that met or missed it.
	sloWindow, sloBreaches *prometheus.GaugeVec
	sloTotal               *prometheus.CounterVec
	slo                    atomic.Pointer[SLO]
}

// SagaDurationBuckets are the buckets of sagaflow_saga_duration_seconds,
// from 50 ms to 6 h: a saga is consistent again once it is terminal, and the
// slow tail (retries, deadlines, operators) is what the SLO watches.
var SagaDurationBuckets = []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 21600}

// NewMetrics registers the engine's collectors on reg under namespace ns.
// Their labels are bounded by the registered definitions: type is a
// registered saga type, step one of its step names, action and outcome
// small enums; no label takes a saga id, key or reason.
func NewMetrics(reg prometheus.Registerer, ns string) (*Metrics, error) {
	m := &Metrics{
		started: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "sagas_started_total",
			Help: "Sagas started, by type."}, []string{"type"}),
		finished: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "sagas_finished_total",
			Help: "Sagas that reached a terminal state (completed, compensated, failed), by type and state."}, []string{"type", "state"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "saga_transitions_total",
			Help: "State transitions applied, by saga type and event kind."}, []string{"type", "event"}),
		stepDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "step_duration_seconds",
			Help:    "Time from a step action's first send to its definite answer, by saga type, step, action and outcome.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}}, []string{"type", "step", "action", "outcome"}),
		sagaDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "saga_duration_seconds",
			Help: "Time from a saga's start to its terminal state (the consistency window), by type and terminal state; " +
				"a failed saga resolved by an operator is observed again under its final state.",
			Buckets: SagaDurationBuckets}, []string{"type", "state"}),
		late: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "late_replies_total",
			Help: "Replies for a step no longer awaited, journaled and ignored, by saga type."}, []string{"type"}),
		illegal: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "illegal_transitions_total",
			Help: "Events the transition table does not allow, journaled and ignored, by saga type."}, []string{"type"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "step_retries_total",
			Help: "Commands re-sent (after a retry answer, a timeout or an operator), by saga type, step and action."}, []string{"type", "step", "action"}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "saga_version_conflicts_total",
			Help: "Conditional updates that found the saga moved by someone else (reloaded and re-decided)."}),
		flagged: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "sagas_flagged_total",
			Help: "Sagas flagged for an operator while still retrying, by type."}, []string{"type"}),
		unauthenticated: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "replies_unauthenticated_total",
			Help: "Replies not signed by their step's participant, by participant and outcome: taken (unsigned, allowed during a migration) or refused (dead-lettered)."}, []string{"participant", "outcome"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "sagas_in_flight",
			Help: "Non-terminal sagas, by state."}, []string{"state"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "events_received_total",
			Help: "External events sent to sagas (POST /sagas/{id}/events), by saga type and result: recorded, duplicate (same event_id again, no-op) or refused."}, []string{"type", "result"}),
		waitsTimedOut: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "waits_timed_out_total",
			Help: "Wait steps whose deadline passed without their event, by saga type."}, []string{"type"}),
		cancels: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "sagas_cancelled_total",
			Help: "Client cancels (POST /sagas/{id}/cancel), by saga type and result: accepted or refused (at or after the pivot)."}, []string{"type", "result"}),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "outcomes_written_total",
			Help: "Outcome records written to the outcome topic's outbox, by saga type and state: completed, compensated, failed (an end) or flagged."}, []string{"type", "state"}),
		kafkaStarts: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "kafka_starts_total",
			Help: "Records of the start topic, by result: created (a new saga), existing (its type and idempotency key had one) or dead_lettered."}, []string{"result"}),
		kafkaEvents: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "kafka_events_total",
			Help: "Records of the event topic, by result: recorded, duplicate (same event_id again, no-op) or dead_lettered."}, []string{"result"}),
		outboxTopicPending: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "outbox_topic_pending",
			Help: "Unsent live rows of the orchestrator outbox, by topic (topics with none have no series)."}, []string{"topic"}),
		outboxTopicOldest: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "outbox_topic_oldest_unsent_seconds",
			Help: "Age of the oldest unsent live row of the orchestrator outbox, by topic."}, []string{"topic"}),
		outboxDeadByClass: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "outbox_dead_by_class",
			Help: "Dead rows of the orchestrator outbox, by class of their last error (too_large, unknown_topic, not_authorized, invalid_record, timeout, other)."}, []string{"class"}),
		oldestCompensating: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "saga_oldest_compensating_seconds",
			Help: "Age of the oldest compensating saga, by type; 0 when none is."}, []string{"type"}),
		oldestFlagged: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "saga_oldest_flagged_seconds",
			Help: "Age of the oldest open saga flagged for an operator, by type; 0 when none is."}, []string{"type"}),
		sloWindow: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "saga_slo_seconds",
			Help: "The consistency window of a saga type (sagas.<type>.slo), for the types that have one."}, []string{"type"}),
		sloBreaches: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "saga_slo_breaches",
			Help: "Open sagas (running, compensating, failed) started longer ago than their type's consistency window, by type; each of the in-flight and failed counts stops after 10,001 (Advanced.StatsExactLimit+1)."}, []string{"type"}),
		sloTotal: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "sagas_slo_total",
			Help: "Sagas of a type with a consistency window that reached a terminal state, by type and result: met (within the window) or missed."}, []string{"type", "result"}),
		keptSagas: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "reply_saga_cache_total",
			Help: "Sagas of reply batches by result: hit (the engine's kept copy of its last write, no load), miss (loaded with the batch), discarded (a kept copy set aside because the batch ran again loading it)."}, []string{"result"}),
		traceDropped: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "trace_context_dropped_total",
			Help: "Trace context headers dropped where they came in (never stored or sent), by where (start, reply, saga), header and reason code."},
			[]string{"where", "header", "reason"}),
	}
	// A second NewMetrics on the same registry shares the collectors
	// registered first, so both record into what is exported.
	adopt := func(c prometheus.Collector) (prometheus.Collector, error) {
		err := reg.Register(c)
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			return are.ExistingCollector, nil
		}
		return c, err
	}
	counterVecs := []**prometheus.CounterVec{&m.started, &m.finished, &m.transitions, &m.late, &m.illegal, &m.retries, &m.flagged, &m.traceDropped, &m.unauthenticated, &m.events, &m.waitsTimedOut, &m.cancels, &m.outcomes, &m.kafkaStarts, &m.kafkaEvents, &m.sloTotal, &m.keptSagas}
	for _, f := range counterVecs {
		c, err := adopt(*f)
		if err != nil {
			return nil, err
		}
		cv, ok := c.(*prometheus.CounterVec)
		if !ok {
			return nil, fmt.Errorf("saga: NewMetrics: a different collector is registered under the name of %T", c)
		}
		*f = cv
	}
	var err error
	var c prometheus.Collector
	if c, err = adopt(m.stepDuration); err != nil {
		return nil, err
	}
	if m.stepDuration, _ = c.(*prometheus.HistogramVec); m.stepDuration == nil {
		return nil, errors.New("saga: NewMetrics: step_duration_seconds is registered as another collector type")
	}
	if c, err = adopt(m.sagaDuration); err != nil {
		return nil, err
	}
	if m.sagaDuration, _ = c.(*prometheus.HistogramVec); m.sagaDuration == nil {
		return nil, errors.New("saga: NewMetrics: saga_duration_seconds is registered as another collector type")
	}
	if c, err = adopt(m.conflicts); err != nil {
		return nil, err
	}
	if m.conflicts, _ = c.(prometheus.Counter); m.conflicts == nil {
		return nil, errors.New("saga: NewMetrics: saga_version_conflicts_total is registered as another collector type")
	}
	for _, g := range []**prometheus.GaugeVec{&m.inFlight, &m.outboxTopicPending, &m.outboxTopicOldest, &m.outboxDeadByClass, &m.oldestCompensating, &m.oldestFlagged, &m.sloWindow, &m.sloBreaches} {
		if c, err = adopt(*g); err != nil {
			return nil, err
		}
		gv, ok := c.(*prometheus.GaugeVec)
		if !ok {
			return nil, fmt.Errorf("saga: NewMetrics: a different collector is registered under the name of a gauge (%T)", c)
		}
		*g = gv
	}
	return m, nil
}

// InitTypes creates the per-type series of sagaTypes at zero (started,
// finished by terminal state, late replies, illegal transitions, flagged),
// so that a scrape shows 0 instead of no data before the first event and
// rate() and alerts work from the start. Call it with Registry.Types().
func (m *Metrics) InitTypes(sagaTypes ...string) {
	if m == nil {
		return
	}
	for _, t := range sagaTypes {
		m.started.WithLabelValues(t)
		for _, st := range []saga.State{saga.Completed, saga.Compensated, saga.Failed} {
			m.finished.WithLabelValues(t, string(st))
		}
		m.late.WithLabelValues(t)
		m.illegal.WithLabelValues(t)
		m.flagged.WithLabelValues(t)
		m.waitsTimedOut.WithLabelValues(t)
		for _, r := range []string{"recorded", "duplicate", "refused"} {
			m.events.WithLabelValues(t, r)
		}
		for _, r := range []string{"accepted", "refused"} {
			m.cancels.WithLabelValues(t, r)
		}
		for _, st := range []string{string(saga.Completed), string(saga.Compensated), string(saga.Failed), "flagged"} {
			m.outcomes.WithLabelValues(t, st)
		}
	}
	for _, r := range []string{kafkaCreated, kafkaExisting, kafkaDeadLettered} {
		m.kafkaStarts.WithLabelValues(r)
	}
	for _, r := range []string{kafkaRecorded, kafkaDuplicate, kafkaDeadLettered} {
		m.kafkaEvents.WithLabelValues(r)
	}
}

// Results of the kafka_starts_total and kafka_events_total counters.
const (
	kafkaCreated      = "created"
	kafkaExisting     = "existing"
	kafkaRecorded     = "recorded"
	kafkaDuplicate    = "duplicate"
	kafkaDeadLettered = "dead_lettered"
)

// countStart and countEvent count one record of the start or event topic
// by result.
func (m *Metrics) countStart(result string) {
	if m != nil {
		m.kafkaStarts.WithLabelValues(result).Inc()
	}
}

func (m *Metrics) countEvent(result string) {
	if m != nil {
		m.kafkaEvents.WithLabelValues(result).Inc()
	}
}

func (m *Metrics) observe(sagaType string, ev saga.EventKind, prev saga.Instance, d saga.Decision) {
	if m == nil {
		return
	}
	if d.Late {
		m.late.WithLabelValues(sagaType).Inc()
	}
	if d.Illegal {
		m.illegal.WithLabelValues(sagaType).Inc()
	}
	if d.Duplicate {
		m.events.WithLabelValues(sagaType, "duplicate").Inc()
	}
	if !d.Changed {
		return
	}
	if ev == saga.EventExternal {
		m.events.WithLabelValues(sagaType, "recorded").Inc()
	}
	if d.WaitsTimedOut > 0 {
		m.waitsTimedOut.WithLabelValues(sagaType).Add(float64(d.WaitsTimedOut))
	}
	m.transitions.WithLabelValues(sagaType, string(ev)).Inc()
	if ev == saga.EventStart {
		m.started.WithLabelValues(sagaType).Inc()
	}
	if d.Next.State.Terminal() && d.Next.State != prev.State {
		m.finished.WithLabelValues(sagaType, string(d.Next.State)).Inc()
		if end := d.Next.FinishedAt; end != nil {
			took := max(end.Sub(d.Next.CreatedAt), 0)
			m.sagaDuration.WithLabelValues(sagaType, string(d.Next.State)).Observe(took.Seconds())
			if slo := m.slo.Load(); slo != nil {
				if w, ok := (*slo)[sagaType]; ok {
					m.sloTotal.WithLabelValues(sagaType, sloResult(took, w)).Inc()
				}
			}
		}
	}
	if d.Next.Flag != "" && prev.Flag == "" {
		m.flagged.WithLabelValues(sagaType).Inc()
	}
	if o, ok := outcomeOf(&d); ok {
		st := o.State
		if o.Kind == message.OutcomeFlagged {
			st = "flagged"
		}
		m.outcomes.WithLabelValues(sagaType, st).Inc()
	}
	for _, s := range d.Settled {
		m.stepDuration.WithLabelValues(sagaType, s.Step, string(s.Action), string(s.Outcome)).Observe(s.Duration.Seconds())
	}
	for _, o := range d.Send {
		if o.Command.Attempt > 1 {
			m.retries.WithLabelValues(sagaType, o.Command.Step, string(o.Command.Action)).Inc()
		}
	}
}

// watchSLO makes m count finished sagas against slo's windows, and
// creates their series at zero.
func (m *Metrics) watchSLO(slo SLO) {
	if m == nil || len(slo) == 0 {
		return
	}
	c := SLO{}
	for t, w := range slo {
		c[t] = w
		m.sloWindow.WithLabelValues(t).Set(w.Seconds())
		m.sloBreaches.WithLabelValues(t)
		m.sloTotal.WithLabelValues(t, SLOMet)
		m.sloTotal.WithLabelValues(t, SLOMissed)
	}
	m.slo.Store(&c)
}

// countKept counts n sagas of reply batches as result (hit, miss,
// discarded); m may be nil.
func (m *Metrics) countKept(result string, n int) {
	if m == nil || n == 0 {
		return
	}
	m.keptSagas.WithLabelValues(result).Add(float64(n))
}
