package participants_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/participants"
)

// Run end to end over the Kafka protocol: commands in, replies out, garbage
// to the dead-letter topic without blocking the partition.
func TestRunAnswersCommandsAndDeadLettersGarbage(t *testing.T) {
	t.Parallel()
	k := newKafkaParticipant(t, "pt", 2)
	p, pool, brokers, cmdTopic, replyTopic, ctx := k.p, k.pool, k.brokers, k.cmdTopic, k.replies, k.ctx
	if err := p.Handle("reserve", effect(participants.Success(map[string]int{"qty": 2}), nil), nil); err != nil {
		t.Fatal(err)
	}

	runCtx, stop := context.WithCancel(ctx)
	runErr := make(chan error, 1)
	go func() { runErr <- p.Run(runCtx) }()
	stopped := false
	shutdown := func() {
		if stopped {
			return
		}
		stopped = true
		stop()
		select {
		case err := <-runErr:
			if err != nil {
				t.Errorf("Run returned %v after cancel, want nil", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("Run did not return within 30s of cancel")
		}
	}
	t.Cleanup(shutdown)

	first := command(uuid.New(), "reserve", message.Forward)
	second := command(uuid.New(), "reserve", message.Forward)
	first.ReplyTo, second.ReplyTo = replyTopic, replyTopic
	garbage := []byte(`{"message_id": "not-a-uuid", "saga_id": 42}`)
	w := k.writer(t)
	toRecord := func(c message.Command) kafka.Message { return toKafka(t, c) }
	// One key: all three land on one partition in this order, so the second
	// command is answered only if the garbage did not block the partition.
	garbageRec := kafka.Message{Key: []byte(first.AggregateID), Value: garbage,
		Headers: []kafka.Header{{Key: message.HeaderMessageID, Value: []byte(uuid.NewString())}}}
	if err := w.WriteMessages(ctx, toRecord(first), garbageRec, toRecord(second)); err != nil {
		t.Fatalf("produce commands: %v", err)
	}

	replies := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: replyTopic, GroupID: "r-" + testkit.RandomSuffix(4), StartOffset: kafka.FirstOffset, MaxWait: 50 * time.Millisecond})
	defer replies.Close()
	want := map[uuid.UUID]bool{first.MessageID: true, second.MessageID: true}
	for len(want) > 0 {
		m, err := replies.FetchMessage(ctx)
		if err != nil {
			t.Fatalf("fetch reply (still waiting for %d): %v", len(want), err)
		}
		r, err := message.DecodeReply(m.Value)
		if err != nil {
			t.Fatalf("reply record is not a valid reply: %v", err)
		}
		if !want[r.InReplyTo] {
			t.Fatalf("unexpected reply in_reply_to %s", r.InReplyTo)
		}
		if r.Outcome != message.Success || string(m.Key) != r.SagaID.String() {
			t.Fatalf("reply outcome %q key %q, want success keyed by saga %s", r.Outcome, m.Key, r.SagaID)
		}
		delete(want, r.InReplyTo)
	}

	dlq := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: cmdTopic + ".dlq", GroupID: "d-" + testkit.RandomSuffix(4), StartOffset: kafka.FirstOffset, MaxWait: 50 * time.Millisecond})
	defer dlq.Close()
	d, err := dlq.FetchMessage(ctx)
	if err != nil {
		t.Fatalf("fetch dead letter: %v", err)
	}
	reason := ""
	for _, h := range d.Headers {
		if h.Key == message.HeaderDLQReason {
			reason = string(h.Value)
		}
	}
	if string(d.Value) != string(garbage) || reason == "" {
		t.Fatalf("dead letter value %q reason %q, want the garbage record with a reason", d.Value, reason)
	}

	var effects int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pt.effects`).Scan(&effects); err != nil || effects != 2 {
		t.Fatalf("%d effects (%v), want 2", effects, err)
	}
	shutdown()
}

func TestRunNeedsBrokers(t *testing.T) {
	t.Parallel()
	p, err := participants.New(testkit.Pool(t), &participants.Config{Name: "pt"})
	if err != nil {
		t.Fatal(err)
	}
	err = p.Run(testkit.Context(t, 30*time.Second))
	if err == nil || !strings.Contains(err.Error(), "Config.Brokers") {
		t.Fatalf("Run without brokers: %v, want an error naming Config.Brokers", err)
	}
}
