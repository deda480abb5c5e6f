package relay

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics holds the relay's collectors. Every collector has an "outbox" label
// set to the outbox schema, so one *Metrics serves every relay of a process.
type Metrics struct {
	published     *prometheus.CounterVec
	publishErrors *prometheus.CounterVec
	publishTime   *prometheus.HistogramVec
	batchSize     *prometheus.HistogramVec
	pending       *prometheus.GaugeVec
	oldestUnsent  *prometheus.GaugeVec
	dead          *prometheus.GaugeVec
}

// NewMetrics creates the relay collectors under namespace ns and registers
// them on reg:
//
//	<ns>_relay_published_total{outbox}        rows published
//	<ns>_relay_publish_errors_total{outbox}   rows whose publish failed
//	<ns>_relay_publish_seconds{outbox}        latency of one batch publish
//	<ns>_relay_batch_size{outbox}             rows per published batch
//	<ns>_outbox_pending{outbox}               unsent rows
//	<ns>_outbox_oldest_unsent_seconds{outbox} age of the oldest unsent row
//	<ns>_outbox_dead{outbox}                  rows parked as dead
func NewMetrics(reg prometheus.Registerer, ns string) (*Metrics, error) {
	if reg == nil {
		return nil, fmt.Errorf("relay: NewMetrics: reg is nil")
	}
	l := []string{"outbox"}
	m := &Metrics{
		published: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: "relay", Name: "published_total",
			Help: "Outbox rows published to Kafka."}, l),
		publishErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: "relay", Name: "publish_errors_total",
			Help: "Outbox rows whose publish to Kafka failed (each failed attempt counts)."}, l),
		publishTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: "relay", Name: "publish_seconds",
			Help: "Latency of one batch publish to Kafka.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}, l),
		batchSize: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: "relay", Name: "batch_size",
			Help: "Rows per published batch.", Buckets: prometheus.ExponentialBuckets(1, 2, 12)}, l),
		pending: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: "outbox", Name: "pending",
			Help: "Unsent outbox rows (dead rows included)."}, l),
		oldestUnsent: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: "outbox", Name: "oldest_unsent_seconds",
			Help: "Age of the oldest unsent outbox row in seconds."}, l),
		dead: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: "outbox", Name: "dead",
			Help: "Outbox rows parked as dead after too many failed publishes; they need an operator."}, l),
	}
	for _, c := range []prometheus.Collector{m.published, m.publishErrors, m.publishTime, m.batchSize, m.pending, m.oldestUnsent, m.dead} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("relay: NewMetrics: register collectors under namespace %q: %w", ns, err)
		}
	}
	return m, nil
}

// outboxMetrics are the collectors of one outbox; the zero value (nil
// pointers) records nothing.
type outboxMetrics struct {
	published, publishErrors prometheus.Counter
	publishTime, batchSize   prometheus.Observer
	pending, oldest, dead    prometheus.Gauge
}

func (m *Metrics) forOutbox(schema string) *outboxMetrics {
	if m == nil {
		return nil
	}
	return &outboxMetrics{
		published:     m.published.WithLabelValues(schema),
		publishErrors: m.publishErrors.WithLabelValues(schema),
		publishTime:   m.publishTime.WithLabelValues(schema),
		batchSize:     m.batchSize.WithLabelValues(schema),
		pending:       m.pending.WithLabelValues(schema),
		oldest:        m.oldestUnsent.WithLabelValues(schema),
		dead:          m.dead.WithLabelValues(schema),
	}
}
