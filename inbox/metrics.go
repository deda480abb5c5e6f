package inbox

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the inbox consumer's Prometheus collectors, labelled by
// consumer (Config.Name). One Metrics may be shared by several consumers.
type Metrics struct {
	messages     *prometheus.CounterVec
	duplicates   *prometheus.CounterVec
	dlq          *prometheus.CounterVec
	handleErrors *prometheus.CounterVec
	batchSize    *prometheus.HistogramVec
	recordWait   *prometheus.HistogramVec
	batchTime    *prometheus.HistogramVec
	restarts     *prometheus.CounterVec
	isolated     *prometheus.CounterVec
	shortened    *prometheus.CounterVec
	lost         *prometheus.CounterVec
	paused       *prometheus.CounterVec
	commits      *prometheus.CounterVec
	commitErrors *prometheus.CounterVec
	reruns       *prometheus.CounterVec
}

// NewMetrics creates the inbox collectors under namespace ns and registers
// them on reg:
//
//	<ns>_inbox_messages_total{consumer}       messages handled (committed)
//	<ns>_inbox_duplicates_total{consumer}     messages skipped as already seen
//	<ns>_dlq_messages_total{consumer}         messages sent to the dead-letter topic
//	<ns>_inbox_handle_errors_total{consumer}  transient handler/db errors (batch retried)
//	<ns>_inbox_batch_size{consumer}           messages per committed transaction
//	<ns>_inbox_record_wait_seconds{consumer}  record timestamp (producer's write) to the start of its batch
//	<ns>_inbox_batch_seconds{consumer}        start of a batch to its database commit, retries included
//	<ns>_inbox_reader_restarts_total{consumer} group memberships closed and recreated (watchdog, failures)
//	<ns>_inbox_batch_splits_total{consumer}   batches split to isolate a failing message
//	<ns>_dlq_shortened_total{consumer}        dead letters replaced by a shortened record
//	<ns>_dlq_lost_total{consumer}             dead letters the broker refused even shortened (logged only)
//	<ns>_inbox_partition_pauses_total{consumer} times a partition's queue was full and its fetch paused
//	<ns>_inbox_offset_commits_total{consumer} offset commits to the group (each covers the batches since the last)
//	<ns>_inbox_offset_commit_errors_total{consumer} offset commits that failed (retried with the next)
//	<ns>_inbox_batch_reruns_total{consumer}   batches, or handler calls, run again at once with nothing deferred (not errors: see Consumer.process)
func NewMetrics(reg prometheus.Registerer, ns string) (*Metrics, error) {
	if reg == nil {
		return nil, errors.New("inbox: NewMetrics: registerer is nil")
	}
	labels := []string{"consumer"}
	m := &Metrics{
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "inbox_messages_total",
			Help: "Messages handled and committed by the inbox consumer.",
		}, labels),
		duplicates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "inbox_duplicates_total",
			Help: "Messages skipped because their message id was already in the inbox.",
		}, labels),
		dlq: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "dlq_messages_total",
			Help: "Messages sent to the dead-letter topic (bad id, permanent handler error or panic).",
		}, labels),
		handleErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "inbox_handle_errors_total",
			Help: "Transient handler or database errors; the batch was rolled back and retried.",
		}, labels),
		batchSize: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Name: "inbox_batch_size",
			Help:    "Messages per committed inbox transaction.",
			Buckets: []float64{1, 2, 5, 10, 20, 50, 100, 200, 500},
		}, labels),
		recordWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Name: "inbox_record_wait_seconds",
			Help:    "Time from a record's timestamp (its producer's write) to the start of the batch that handles it: the consumer's lag in time. Clocks of other machines skew it, and record timestamps are whole milliseconds, so it reads up to 1 ms high.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, labels),
		batchTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Name: "inbox_batch_seconds",
			Help:    "Time from the start of a batch to its database commit, retries included.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, labels),
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "inbox_reader_restarts_total",
			Help: "Consumer group memberships the inbox consumer closed and recreated because joins or commits kept failing or the group stopped consuming while it had lag.",
		}, labels),
		isolated: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "inbox_batch_splits_total",
			Help: "Batches (or parts of one) split in two to isolate a message that fails: permanently, or transiently for longer than the consumer's IsolateAfter attempts.",
		}, labels),
		shortened: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "dlq_shortened_total",
			Help: "Dead-letter records replaced by a shortened one (first KB of the value, headers cut) because they were too large or the broker refused them.",
		}, labels),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "dlq_lost_total",
			Help: "Dead-letter records the broker refused even shortened: the message was skipped and is only in the error log. Alert on any.",
		}, labels),
		paused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "inbox_partition_pauses_total",
			Help: "Times a partition's fetch-ahead queue was full (its lane busy) and fetching of that partition paused.",
		}, labels),
		commits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "inbox_offset_commits_total",
			Help: "Offset commits to the consumer group; one covers every batch handled since the one before (at most one per CommitInterval).",
		}, labels),
		commitErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "inbox_offset_commit_errors_total",
			Help: "Offset commits that failed; their offsets go with the next commit (a crash before it redelivers the batches, which the inbox dedupes).",
		}, labels),
		reruns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "inbox_batch_reruns_total",
			Help: "Batches run again at once with their message ids recorded first and nothing deferred to the commit: a deferred write failed (an engine version conflict, a barrier row a copy recorded first), or a batch that records its ids at the end met a copy or a handler that did not apply every message; and handler calls made again in their transaction with nothing deferred (txhooks.ErrRerun: a participant's forwards not all kept). Not errors; a high rate means many redeliveries or conflicts.",
		}, labels),
	}
	for _, c := range []prometheus.Collector{m.messages, m.duplicates, m.dlq, m.handleErrors, m.batchSize, m.recordWait, m.batchTime, m.restarts, m.isolated, m.shortened, m.lost, m.paused, m.commits, m.commitErrors, m.reruns} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("inbox: NewMetrics: register under namespace %q: %w", ns, err)
		}
	}
	return m, nil
}

// Messages returns the counter of handled messages for consumer.
func (m *Metrics) Messages(consumer string) prometheus.Counter {
	return m.messages.WithLabelValues(consumer)
}

// Duplicates returns the counter of duplicate messages for consumer.
func (m *Metrics) Duplicates(consumer string) prometheus.Counter {
	return m.duplicates.WithLabelValues(consumer)
}

// DeadLettered returns the counter of dead-lettered messages for consumer.
func (m *Metrics) DeadLettered(consumer string) prometheus.Counter {
	return m.dlq.WithLabelValues(consumer)
}

// HandleErrors returns the counter of transient errors for consumer.
func (m *Metrics) HandleErrors(consumer string) prometheus.Counter {
	return m.handleErrors.WithLabelValues(consumer)
}

// Restarts returns the counter of reader restarts for consumer.
func (m *Metrics) Restarts(consumer string) prometheus.Counter {
	return m.restarts.WithLabelValues(consumer)
}

// PartitionPauses returns the counter of partition fetch pauses for consumer.
func (m *Metrics) PartitionPauses(consumer string) prometheus.Counter {
	return m.paused.WithLabelValues(consumer)
}

// OffsetCommits returns the counter of offset commits for consumer.
func (m *Metrics) OffsetCommits(consumer string) prometheus.Counter {
	return m.commits.WithLabelValues(consumer)
}

// OffsetCommitErrors returns the counter of failed offset commits for
// consumer.
func (m *Metrics) OffsetCommitErrors(consumer string) prometheus.Counter {
	return m.commitErrors.WithLabelValues(consumer)
}

// BatchSplits returns the counter of batch splits for consumer.
func (m *Metrics) BatchSplits(consumer string) prometheus.Counter {
	return m.isolated.WithLabelValues(consumer)
}

// BatchReruns returns the counter of batches run again at once with their
// ids recorded first and nothing deferred, for consumer.
func (m *Metrics) BatchReruns(consumer string) prometheus.Counter {
	return m.reruns.WithLabelValues(consumer)
}
