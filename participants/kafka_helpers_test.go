package participants_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/internal/kafkaclient"
	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/participants"
)

// kafkaParticipant is a participant "pt" over the Kafka protocol: its
// command topic (cmdParts partitions), a reply topic of one partition, its
// migrations and a pt.effects table for the tests' handlers.
type kafkaParticipant struct {
	p                 *participants.Participant
	pool              *pgxpool.Pool
	brokers           []string
	cmdTopic, replies string
	ctx               context.Context
}

func newKafkaParticipant(t *testing.T, prefix string, cmdParts int) *kafkaParticipant {
	t.Helper()
	k := &kafkaParticipant{pool: testkit.Pool(t), brokers: testkit.Brokers(t)}
	k.cmdTopic = testkit.Topic(t, k.brokers, prefix+"-commands", cmdParts)
	k.replies = testkit.Topic(t, k.brokers, prefix+"-replies", 1)
	p, err := participants.New(k.pool, &participants.Config{
		Name: "pt", Brokers: k.brokers, CommandTopic: k.cmdTopic,
		GroupID: prefix + "-" + testkit.RandomSuffix(4), ReplyTopics: []string{k.replies},
	})
	if err != nil {
		t.Fatal(err)
	}
	k.p = p
	testkit.Migrate(t, k.pool, testkit.MustSets(t)(p.Migrations()))
	k.ctx = testkit.Context(t, 60*time.Second)
	if _, err := k.pool.Exec(k.ctx, `CREATE TABLE pt.effects (saga_id uuid NOT NULL, step text NOT NULL, action text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return k
}

// run runs the participant until the test ends, and fails the test if Run
// returns an error then.
func (k *kafkaParticipant) run(t *testing.T) {
	t.Helper()
	runCtx, stop := context.WithCancel(k.ctx)
	runErr := make(chan error, 1)
	go func() { runErr <- k.p.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-runErr; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// writer is a kafka-go Writer to the command topic, closed with the test.
func (k *kafkaParticipant) writer(t *testing.T) *kafka.Writer {
	t.Helper()
	tr := &kafka.Transport{}
	w := &kafka.Writer{Addr: kafka.TCP(k.brokers...), Topic: k.cmdTopic, Balancer: kafkaclient.Balancer(), BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll, Transport: tr}
	t.Cleanup(func() {
		_ = w.Close()
		tr.CloseIdleConnections()
	})
	return w
}

// toKafka is cmd as the record the orchestrator publishes.
func toKafka(t *testing.T, c message.Command) kafka.Message {
	t.Helper()
	r := record(t, c, message.Headers(c.MessageID, c.SagaID))
	m := kafka.Message{Key: r.Key, Value: r.Value}
	for _, h := range r.Headers {
		m.Headers = append(m.Headers, kafka.Header(h))
	}
	return m
}
