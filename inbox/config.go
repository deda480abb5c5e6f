package inbox

import (
	"cmp"
	"errors"
	"fmt"
	"github.com/sagaflow/sagaflow/internal/txhooks"
	"log/slog"
	"time"

	"github.com/segmentio/kafka-go"
)

// Defaults filled in by New for zero Config fields.
const (
	DLQSuffixDefault = ".dlq"
	BatchSizeDefault = 100
	// MaxWaitDefault is the fetch wait, as long as the Java consumer's
	// default. It does not delay messages (a fetch returns as soon as one
	// byte is there); it bounds how often an idle partition is polled and,
	// with kafka-go, how late a fetch answer may come: kafka-go asks the
	// broker to wait three quarters of MaxWait and drops the connection at
	// MaxWait (then waits 100 ms and reconnects), so a short MaxWait on a
	// busy machine cuts connections (measured:
	// docs/perf/figures.md#inbox-max-wait); an idle consumer also polls a
	// tenth as often at 500 ms as at 50 ms.
	MaxWaitDefault        = 500 * time.Millisecond
	BackoffInitialDefault = 100 * time.Millisecond
	BackoffMaxDefault     = 10 * time.Second
	// LanesDefault is the number of partition lanes processed concurrently.
	// One: concurrent batches of a handler that updates shared rows (a
	// stock counter, say) in varying order deadlock and retry.
	LanesDefault = 1
	// DLQPartitionsDefault is the partition count Run uses when it creates a
	// missing dead-letter topic.
	DLQPartitionsDefault = 1
	// SessionTimeoutDefault is the consumer group session timeout. A
	// consumer whose broker connection was cut cannot leave its group; when
	// it reconnects it joins as a new member, and the group does not settle
	// until the coordinator drops the old member after this long (kafka-go's
	// own default of 30s held every partition of the group that long after
	// a broker outage).
	SessionTimeoutDefault = 6 * time.Second
	// HeartbeatIntervalMax caps the default heartbeat interval (a third of
	// the session timeout): members learn of a rebalance at their next
	// heartbeat, so a short interval lets a group settle sooner.
	HeartbeatIntervalMax = time.Second
	// RebalanceTimeoutDefault is how long the coordinator waits for the
	// members to rejoin during a rebalance (kafka-go's default is 30s). A
	// member that does not rejoin in time is dropped and rejoins later.
	RebalanceTimeoutDefault = 5 * time.Second
	// StallTimeoutDefault: when this consumer has waited this long for a
	// message with no batch in flight, and the group has lag that its
	// committed offsets then do not reduce for half as long again, the
	// Kafka reader is closed and recreated (kafka-go's group session does not always recover from a
	// cut connection or a coordinator that stopped answering).
	StallTimeoutDefault = 20 * time.Second
	// CommitIntervalDefault is the most often the consumer commits its
	// offsets to the group: a batch's offsets are committed right after it
	// when no commit happened for this long, else with the next commit,
	// together with the batches handled in between. The batch is in the
	// database before its offsets are handed over, so a crash only makes
	// the group redeliver (and the inbox dedupe) what was handled since the
	// last commit.
	CommitIntervalDefault = 100 * time.Millisecond
	// RestartAfterErrorsDefault is the number of consecutive fetch (or
	// offset commit) failures after which the reader is recreated.
	RestartAfterErrorsDefault = 5
	// BatchBytesDefault bounds a batch's bytes.
	BatchBytesDefault = 8 << 20
	// QueueBytesDefault bounds what is fetched ahead per partition.
	QueueBytesDefault = 4 << 20
	// FetchBytesDefault is the most one partition fetch asks for.
	FetchBytesDefault = 1 << 20
	// IsolateAfterDefault: failed attempts of a batch before it is split.
	IsolateAfterDefault = 3
	// MaxHeaderBytesDefault bounds one record's headers.
	MaxHeaderBytesDefault = 16 << 10
	// DeadLetterBytesDefault bounds a dead-letter record.
	DeadLetterBytesDefault = 900 << 10
	// DeadLetterValueBytesDefault is how much of the original value a
	// shortened dead-letter record keeps.
	DeadLetterValueBytesDefault = 1 << 10
	// MaxReasonBytes bounds a dead-letter reason.
	MaxReasonBytes = 1 << 10
	// MaxDeadHeaderBytes bounds one header value copied into a dead letter.
	MaxDeadHeaderBytes = 1 << 10
	// CommitTimeoutDefault bounds the offset commit and dead-letter publish
	// of a batch, which run even while Run's context is being cancelled.
	CommitTimeoutDefault = 30 * time.Second
)

// Config configures a Consumer.
type Config struct {
	Brokers []string
	GroupID string
	Topics  []string
	// Schema is the Postgres schema holding the inbox table (the
	// "messaging" migration set).
	Schema string
	// Name labels metrics and logs; default GroupID.
	Name string
	// DLQSuffix is appended to a topic's name to name its dead-letter
	// topic; default DLQSuffixDefault.
	DLQSuffix string
	// BatchSize is the maximum number of messages per transaction; default
	// BatchSizeDefault.
	BatchSize int
	// BatchBytes bounds the bytes (keys, values and headers) of one batch;
	// a single larger message still makes a batch of one. Default
	// BatchBytesDefault.
	BatchBytes int
	// Dialer, if set, is used for every connection to the brokers (TLS,
	// SASL); nil uses kafka-go's default dialer.
	Dialer *kafka.Dialer
	// Lanes is the number of batches processed concurrently, each in its
	// own transaction. A partition always belongs to the same lane, so the
	// order within a partition (and so per key) is kept; default
	// LanesDefault (1: every batch one after another). Raise it when the
	// handler's transactions do not contend for shared rows, e.g. the
	// orchestrator's reply handler (one saga row per key): lanes let
	// Postgres group the commits of concurrent batches. When transactions of
	// different lanes lock the same rows in different order, they deadlock
	// and are retried (correct, but slow).
	Lanes int
	// Logger receives the consumer's logs; nil discards them.
	Logger *slog.Logger
	// Metrics receives the consumer's metrics; nil keeps them on a private
	// registry.
	Metrics *Metrics
	// Advanced holds the tuning knobs (fetching, queues, isolation, dead
	// letters, backoff, consumer-group timers); their defaults suit most
	// deployments. Its fields are promoted: cfg.SessionTimeout works.
	Advanced

	// prefetch queues the handler's first reads in the round trip that
	// begins each batch transaction (txhooks.SetPrefetch).
	prefetch txhooks.Prefetch
}

// Advanced are the inbox's tuning knobs. Zero fields take their defaults.
type Advanced struct {
	// MaxWait is kafka-go's fetch MaxWait; default MaxWaitDefault.
	MaxWait time.Duration
	// QueueMessages and QueueBytes bound what is fetched ahead for one
	// partition and not yet handled. A partition whose queue is full stops
	// fetching (it is paused) until its lane has taken some; other
	// partitions go on. The memory the consumer holds is about the number of
	// assigned partitions times (QueueBytes + FetchBytes). Defaults: twice
	// BatchSize, QueueBytesDefault.
	QueueMessages, QueueBytes int
	// FetchBytes is the most one fetch of a partition asks the broker for;
	// default FetchBytesDefault. (A record larger than this is still
	// returned whole, alone.)
	FetchBytes int
	// IsolateAfter is how many times a batch is retried after transient
	// handler errors before it is split to find the message that keeps
	// failing (which is then dead-lettered with its last error, so the rest
	// goes through); default IsolateAfterDefault. Errors that say the
	// database is unavailable are retried for as long as it takes and never
	// dead-letter a message.
	IsolateAfter int
	// MaxHeaderBytes bounds the headers of one record (keys and values
	// together); a record with more is dead-lettered unhandled. Default
	// MaxHeaderBytesDefault.
	MaxHeaderBytes int
	// DeadLetterBytes bounds a dead-letter record: reason and copied
	// headers are truncated, and a record still larger (or one the broker
	// refuses as too large or invalid) is replaced by a shortened one that
	// keeps the original coordinates, the headers cut to fit, the first
	// DeadLetterValueBytesDefault bytes of the value and the reason.
	// Default DeadLetterBytesDefault (below Kafka's default
	// message.max.bytes of 1 MiB).
	DeadLetterBytes int
	// BackoffInitial and BackoffMax bound the capped exponential backoff
	// (with jitter) between retries of a batch that failed transiently;
	// defaults BackoffInitialDefault and BackoffMaxDefault.
	BackoffInitial, BackoffMax time.Duration
	// SessionTimeout is the consumer group session timeout: how long the
	// coordinator keeps a member that stopped heartbeating (a crashed
	// process, or one cut off from the broker) before giving its partitions
	// to the others; default SessionTimeoutDefault. Heartbeats are sent
	// every third of it, at most every 3s.
	SessionTimeout time.Duration
	// HeartbeatInterval is the consumer group heartbeat interval; default a
	// third of SessionTimeout, at most HeartbeatIntervalMax.
	HeartbeatInterval time.Duration
	// RebalanceTimeout bounds how long the coordinator waits for members to
	// rejoin in a rebalance; default RebalanceTimeoutDefault.
	RebalanceTimeout time.Duration
	// StallTimeout: see StallTimeoutDefault (the default).
	StallTimeout time.Duration
	// RestartAfterErrors: see RestartAfterErrorsDefault (the default).
	RestartAfterErrors int
	// CommitInterval: see CommitIntervalDefault (the default).
	CommitInterval time.Duration
}

// WithDefaults returns c with its zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	out := c
	out.Name = cmp.Or(out.Name, out.GroupID)
	out.DLQSuffix = cmp.Or(out.DLQSuffix, DLQSuffixDefault)
	out.BatchSize = cmp.Or(out.BatchSize, BatchSizeDefault)
	out.MaxWait = cmp.Or(out.MaxWait, MaxWaitDefault)
	out.Lanes = cmp.Or(out.Lanes, LanesDefault)
	out.BackoffInitial = cmp.Or(out.BackoffInitial, BackoffInitialDefault)
	out.BackoffMax = cmp.Or(out.BackoffMax, BackoffMaxDefault)
	out.SessionTimeout = cmp.Or(out.SessionTimeout, SessionTimeoutDefault)
	out.HeartbeatInterval = cmp.Or(out.HeartbeatInterval, min(HeartbeatIntervalMax, out.SessionTimeout/3))
	out.RebalanceTimeout = cmp.Or(out.RebalanceTimeout, RebalanceTimeoutDefault)
	out.StallTimeout = cmp.Or(out.StallTimeout, StallTimeoutDefault)
	out.CommitInterval = cmp.Or(out.CommitInterval, CommitIntervalDefault)
	out.RestartAfterErrors = cmp.Or(out.RestartAfterErrors, RestartAfterErrorsDefault)
	out.BatchBytes = cmp.Or(out.BatchBytes, BatchBytesDefault)
	out.QueueMessages = cmp.Or(out.QueueMessages, 2*out.BatchSize)
	out.QueueBytes = cmp.Or(out.QueueBytes, QueueBytesDefault)
	out.FetchBytes = cmp.Or(out.FetchBytes, FetchBytesDefault)
	out.IsolateAfter = cmp.Or(out.IsolateAfter, IsolateAfterDefault)
	out.MaxHeaderBytes = cmp.Or(out.MaxHeaderBytes, MaxHeaderBytesDefault)
	out.DeadLetterBytes = cmp.Or(out.DeadLetterBytes, DeadLetterBytesDefault)
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	out.Topics = append([]string(nil), out.Topics...)
	out.Brokers = append([]string(nil), out.Brokers...)
	return out
}

// validate checks c as given (zero fields stand for their defaults); the
// error names the field.
func (c *Config) validate() error {
	switch {
	case len(c.Brokers) == 0:
		return errors.New("inbox: Config.Brokers is empty")
	case c.GroupID == "":
		return errors.New("inbox: Config.GroupID is required")
	case len(c.Topics) == 0:
		return errors.New("inbox: Config.Topics is empty")
	case c.Schema == "":
		return errors.New("inbox: Config.Schema is required")
	case c.BatchSize < 0:
		return fmt.Errorf("inbox: Config.BatchSize is %d, want > 0", c.BatchSize)
	case c.Lanes < 0:
		return fmt.Errorf("inbox: Config.Lanes is %d, want > 0", c.Lanes)
	case c.MaxWait < 0:
		return fmt.Errorf("inbox: Config.MaxWait is %s, want > 0", c.MaxWait)
	case c.BackoffInitial < 0:
		return fmt.Errorf("inbox: Config.BackoffInitial is %s, want > 0", c.BackoffInitial)
	case c.BackoffMax < 0:
		return fmt.Errorf("inbox: Config.BackoffMax is %s, want > 0", c.BackoffMax)
	case cmp.Or(c.BackoffMax, BackoffMaxDefault) < cmp.Or(c.BackoffInitial, BackoffInitialDefault):
		return fmt.Errorf("inbox: Config.BackoffMax (%s) is less than Config.BackoffInitial (%s)",
			cmp.Or(c.BackoffMax, BackoffMaxDefault), cmp.Or(c.BackoffInitial, BackoffInitialDefault))
	case c.SessionTimeout < 0 || (c.SessionTimeout > 0 && c.SessionTimeout < time.Second):
		return fmt.Errorf("inbox: Config.SessionTimeout is %s, want at least 1s", c.SessionTimeout)
	case c.HeartbeatInterval < 0:
		return fmt.Errorf("inbox: Config.HeartbeatInterval is %s, want > 0", c.HeartbeatInterval)
	case c.HeartbeatInterval > 0 && c.HeartbeatInterval >= cmp.Or(c.SessionTimeout, SessionTimeoutDefault):
		return fmt.Errorf("inbox: Config.HeartbeatInterval (%s) is not less than the session timeout", c.HeartbeatInterval)
	case c.RebalanceTimeout < 0 || (c.RebalanceTimeout > 0 && c.RebalanceTimeout < time.Second):
		return fmt.Errorf("inbox: Config.RebalanceTimeout is %s, want at least 1s", c.RebalanceTimeout)
	case c.StallTimeout < 0 || (c.StallTimeout > 0 && c.StallTimeout < time.Second):
		return fmt.Errorf("inbox: Config.StallTimeout is %s, want at least 1s", c.StallTimeout)
	case c.CommitInterval < 0 || c.CommitInterval > time.Minute:
		return fmt.Errorf("inbox: Config.CommitInterval is %s, want between 0 (the default) and 1m", c.CommitInterval)
	case c.RestartAfterErrors < 0:
		return fmt.Errorf("inbox: Config.RestartAfterErrors is %d, want > 0", c.RestartAfterErrors)
	case c.BatchBytes < 0:
		return fmt.Errorf("inbox: Config.BatchBytes is %d, want > 0", c.BatchBytes)
	case c.QueueMessages < 0:
		return fmt.Errorf("inbox: Config.QueueMessages is %d, want > 0", c.QueueMessages)
	case c.QueueBytes < 0:
		return fmt.Errorf("inbox: Config.QueueBytes is %d, want > 0", c.QueueBytes)
	case c.FetchBytes < 0:
		return fmt.Errorf("inbox: Config.FetchBytes is %d, want > 0", c.FetchBytes)
	case c.IsolateAfter < 0:
		return fmt.Errorf("inbox: Config.IsolateAfter is %d, want > 0", c.IsolateAfter)
	case c.MaxHeaderBytes < 0:
		return fmt.Errorf("inbox: Config.MaxHeaderBytes is %d, want > 0", c.MaxHeaderBytes)
	case c.DeadLetterBytes < 0 || (c.DeadLetterBytes > 0 && c.DeadLetterBytes < 16<<10):
		return fmt.Errorf("inbox: Config.DeadLetterBytes is %d, want at least 16 KiB", c.DeadLetterBytes)
	}
	for i, t := range c.Topics {
		if t == "" {
			return fmt.Errorf("inbox: Config.Topics[%d] is empty", i)
		}
	}
	return nil
}
