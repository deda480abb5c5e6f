package conformance

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/sagaflow/sagaflow/internal/dburl"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/inbox"
	"github.com/sagaflow/sagaflow/internal/devbroker"
	"github.com/sagaflow/sagaflow/internal/kafkaclient"
	"github.com/sagaflow/sagaflow/message"
)

// Defaults of Config.
const (
	// TimeoutDefault bounds each wait for one answer.
	TimeoutDefault = 10 * time.Second
	// StartTimeoutDefault bounds the wait for the participant's first
	// answer after it was started.
	StartTimeoutDefault = 90 * time.Second
	// probeEvery is how often the start probe is sent again.
	probeEvery = time.Second
)

// Partitioners a reply's partition is checked against.
const (
	// PartitionerMurmur2 is the Java client's default (kafka-go
	// Murmur2Balancer, kafkajs' default partitioner): the wire contract's.
	PartitionerMurmur2 = "murmur2"
	// PartitionerFNV1a is kafka-go's Hash balancer, what the Go relay used
	// before the wire contract named murmur2.
	PartitionerFNV1a = "fnv1a"
)

// Config configures a run.
type Config struct {
	// Participant is the participant's name: commands go to
	// "<Participant>.commands". Required.
	Participant string
	// Command starts the participant (run with /bin/sh -c, in a process
	// group of its own). Required.
	Command string
	// Dir is the participant's working directory. Defaults to the kit's.
	Dir string
	// DatabaseURL is the Postgres server on which the run's scratch
	// database is created (and dropped at the end). Required.
	DatabaseURL string
	// Brokers, if set, are used instead of an embedded broker (which the
	// kit starts and stops otherwise). The participant's command topic and
	// the kit's topics ("conformance.<participant>.*") must be new: give
	// each run on shared brokers a participant name of its own.
	Brokers []string
	// Timeout bounds each wait for one answer. Defaults to TimeoutDefault.
	Timeout time.Duration
	// StartTimeout bounds the wait for the first answer. Defaults to
	// StartTimeoutDefault.
	StartTimeout time.Duration
	// Partitioner the replies' partitions must follow (keyed by saga id).
	// Defaults to PartitionerMurmur2.
	Partitioner string
	// Output, if set, receives the participant's stdout and stderr.
	Output io.Writer
	// Logger logs the kit's progress. Defaults to discarding.
	Logger *slog.Logger
}

// WithDefaults returns c with its zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.Timeout = cmp.Or(c.Timeout, TimeoutDefault)
	c.StartTimeout = cmp.Or(c.StartTimeout, StartTimeoutDefault)
	c.Partitioner = cmp.Or(c.Partitioner, PartitionerMurmur2)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	if err := message.CheckTopicName(message.CommandTopic("", c.Participant) + inbox.DLQSuffixDefault); c.Participant == "" || err != nil {
		errs = append(errs, fmt.Errorf("Config.Participant %q: want a name that makes legal Kafka topic names (%v)", c.Participant, err))
	}
	if strings.TrimSpace(c.Command) == "" {
		errs = append(errs, errors.New("Config.Command is empty: give the command that starts the participant"))
	}
	if c.DatabaseURL == "" {
		errs = append(errs, errors.New("Config.DatabaseURL is empty"))
	}
	if c.Timeout < 0 || c.StartTimeout < 0 {
		errs = append(errs, fmt.Errorf("Config.Timeout %s and StartTimeout %s must not be negative", c.Timeout, c.StartTimeout))
	}
	if c.Partitioner != PartitionerMurmur2 && c.Partitioner != PartitionerFNV1a {
		errs = append(errs, fmt.Errorf("Config.Partitioner %q: want %s or %s", c.Partitioner, PartitionerMurmur2, PartitionerFNV1a))
	}
	return errors.Join(errs...)
}

// run is the state of one run.
type run struct {
	cfg     Config
	brokers []string
	// The participant's topics, and the kit's: its reply topic and the
	// topic nobody may write to.
	commandTopic, dlqTopic, replyTopic, elsewhere string
	writer                                        *kafka.Writer
	transport                                     *kafka.Transport
	col                                           *collector
	proc                                          *process
	// before is the record count of every topic before the participant
	// started (topicRecords).
	before map[string]int64

	// signer signs the kit's commands with its orchestrator key;
	// replyKeys holds the participant's key, which its replies must be
	// signed with (signing.go).
	signer    *message.Signer
	orchKey   message.Key
	replyKeys *message.Keyring

	mu       sync.Mutex
	commands map[uuid.UUID]message.Command // every command sent, by message id
	report   Report
}

// Verify runs the kit against the participant cfg.Command starts and
// returns the report (Run is the form for a Go test). An error means the kit itself could not run (broker,
// database, the participant would not start); a participant that runs but
// breaks the contract is a Report with failed checks.
func Verify(ctx context.Context, cfg Config) (rep Report, err error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return Report{}, fmt.Errorf("conformance: %w", err)
	}
	log := cfg.Logger
	r := &run{
		cfg: cfg, commandTopic: message.CommandTopic("", cfg.Participant),
		replyTopic: TopicPrefix + cfg.Participant + ".replies", elsewhere: TopicPrefix + cfg.Participant + ".elsewhere",
		commands: map[uuid.UUID]message.Command{}, report: Report{Participant: cfg.Participant},
	}
	r.dlqTopic = r.commandTopic + inbox.DLQSuffixDefault
	partKey, err := r.makeKeys()
	if err != nil {
		return Report{}, fmt.Errorf("conformance: %w", err)
	}

	r.brokers = cfg.Brokers
	if len(r.brokers) == 0 {
		b, err := devbroker.Start(devbroker.Config{Partitions: topicPartitions})
		if err != nil {
			return Report{}, fmt.Errorf("conformance: %w", err)
		}
		defer b.Close()
		r.brokers = b.Addrs()
	}
	topics := []string{r.commandTopic, r.dlqTopic, r.replyTopic, r.elsewhere}
	if err := kafkaclient.EnsureTopics(ctx, r.brokers, topicPartitions, 1, topics...); err != nil {
		return Report{}, fmt.Errorf("conformance: create topics: %w", err)
	}

	dbURL, drop, err := scratchDatabase(ctx, cfg.DatabaseURL)
	if err != nil {
		return Report{}, err
	}
	defer func() { err = errors.Join(err, drop()) }()

	// A transport of its own: the shared default one caches metadata from
	// before the topics existed.
	r.transport = &kafka.Transport{}
	defer r.transport.CloseIdleConnections()
	r.writer = &kafka.Writer{
		Addr: kafka.TCP(r.brokers...), Balancer: &kafka.Murmur2Balancer{}, RequiredAcks: kafka.RequireAll,
		BatchTimeout: time.Millisecond, MaxAttempts: 3, Transport: r.transport,
	}
	defer r.writer.Close()
	r.col = startCollector(r.brokers, r.replyTopic, r.dlqTopic, r.elsewhere)
	defer r.col.stop()

	if r.before, err = r.topicRecords(ctx); err != nil {
		return Report{}, fmt.Errorf("conformance: %w", err)
	}
	log.Info("starting the participant", slog.String("command", cfg.Command), slog.String("brokers", strings.Join(r.brokers, ",")))
	r.proc, err = startProcess(cfg.Command, cfg.Dir, []string{
		EnvBrokers + "=" + strings.Join(r.brokers, ","), EnvDatabaseURL + "=" + dbURL,
		EnvParticipant + "=" + cfg.Participant, EnvReplyTopic + "=" + r.replyTopic,
		EnvOrchestratorKeys + "=" + r.orchKey.Format(), EnvParticipantKeys + "=" + cfg.Participant + ":" + partKey.Format(),
	}, cfg.Output)
	if err != nil {
		return Report{}, err
	}
	defer r.proc.stop()

	if err := r.waitReady(ctx); err != nil {
		r.report.add(Check{Name: CheckAnswers, Why: err.Error()})
		return r.report, nil
	}
	r.report.add(Check{Name: CheckAnswers, Passed: true})
	r.runChecks(ctx)
	r.report.add(r.checkNothingElsewhere(ctx))
	r.checkReplies()
	if ctx.Err() != nil {
		return r.report, ctx.Err()
	}
	if err := r.proc.exitedEarly(); err != nil {
		r.report.add(Check{Name: CheckKeepsRunning, Why: fmt.Sprintf("%v; its output ends:\n%s", err, r.proc.out)})
	}
	return r.report, nil
}

// waitReady sends a query for a fresh saga every probeEvery until one is
// answered (the participant has joined its consumer group, whatever offset
// it starts from), up to StartTimeout.
func (r *run) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(r.cfg.StartTimeout)
	var ids []uuid.UUID
	for {
		if err := r.proc.exitedEarly(); err != nil {
			return fmt.Errorf("%v before it answered; its output ends:\n%s", err, r.proc.out)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer within %s (start timeout) to %d probe queries on %s; its output ends:\n%s", r.cfg.StartTimeout, len(ids), r.commandTopic, r.proc.out)
		}
		saga := uuid.New()
		cmd := r.newCommand(saga, "probe-"+saga.String()[:8], message.Query, 1, nil)
		if _, err := r.send(ctx, cmd); err != nil {
			return err
		}
		ids = append(ids, cmd.MessageID)
		_, err := r.col.wait(ctx, probeEvery, r.replyTopic, func(rec record) bool {
			rep, err := message.DecodeReply(rec.value)
			return err == nil && containsID(ids, rep.InReplyTo)
		})
		if err == nil {
			r.cfg.Logger.Info("the participant answers", slog.Int("probes", len(ids)))
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

func containsID(ids []uuid.UUID, id uuid.UUID) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// scratchDatabase creates a fresh database on the server of base and
// returns its URL and a function that drops it.
func scratchDatabase(ctx context.Context, base string) (string, func() error, error) {
	name := "sfconformance_" + strings.ReplaceAll(uuid.NewString(), "-", "")[:16]
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return "", nil, fmt.Errorf("conformance: connect to Postgres at %s for the scratch database: %w", dburl.Redact(base), err)
	}
	defer conn.Close(context.Background())
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+ident); err != nil {
		return "", nil, fmt.Errorf("conformance: create scratch database %s: %w", name, err)
	}
	url, err := dburl.WithDatabase(base, name)
	drop := func() error {
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(dctx, base)
		if err != nil {
			return fmt.Errorf("conformance: drop scratch database %s: %w", name, err)
		}
		defer c.Close(dctx)
		if _, err := c.Exec(dctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
			return fmt.Errorf("conformance: drop scratch database %s: %w", name, err)
		}
		return nil
	}
	if err != nil {
		return "", nil, errors.Join(err, drop())
	}
	return url, drop, nil
}
