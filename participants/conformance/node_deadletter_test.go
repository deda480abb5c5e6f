package conformance_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/internal/kafkaclient"
	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/message"
)

// TestNodeParticipantShortensRefusedDeadLetter: with a dead-letter topic
// whose max.message.bytes is 16 KiB, a 100 KB command that does not decode
// is dead-lettered as a shortened record (dlq-shortened true, the first
// 1 KiB of key and value, the original coordinates and the reason), as the
// Go inbox does; a command whose 20 KB of headers keep even the shortened
// record over the limit is logged and skipped; and the valid command after
// both on the same partition is answered: the partition is not wedged.
func TestNodeParticipantShortensRefusedDeadLetter(t *testing.T) {
	nodeDeps(t)
	brokers := testkit.Brokers(t)
	dbURL := testkit.Database(t)
	name := "dlqshort_" + testkit.RandomSuffix(3)
	commands, replies := message.CommandTopic("", name), name+".replies"
	dlq := commands + ".dlq"
	ctx := testkit.Context(t, 3*time.Minute)
	if err := kafkaclient.EnsureTopics(ctx, brokers, 1, 1, commands, replies); err != nil {
		t.Fatalf("create topics: %v", err)
	}
	const dlqMax = 16 << 10
	cl := &kafka.Client{Addr: kafka.TCP(brokers...)}
	res, err := cl.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{
		Topic: dlq, NumPartitions: 1, ReplicationFactor: 1,
		ConfigEntries: []kafka.ConfigEntry{{ConfigName: "max.message.bytes", ConfigValue: fmt.Sprint(dlqMax)}},
	}}})
	if err == nil {
		err = res.Errors[dlq]
	}
	if err != nil {
		t.Fatalf("create %s: %v", dlq, err)
	}

	p := startNode(t,
		"SAGAFLOW_KAFKA_BROKERS="+strings.Join(brokers, ","), "SAGAFLOW_DATABASE_URL="+dbURL,
		"SAGAFLOW_PARTICIPANT="+name, "SAGAFLOW_REPLY_TOPIC="+replies, "SAGAFLOW_KAFKA_PARTITIONS=1",
	)
	ids := func() []kafka.Header {
		return []kafka.Header{{Key: message.HeaderMessageID, Value: []byte(uuid.NewString())}, {Key: message.HeaderSagaID, Value: []byte(uuid.NewString())}}
	}
	bigKey := bytes.Repeat([]byte("k"), 3000)
	bigValue := append([]byte("not json "), bytes.Repeat([]byte("v"), 100_000)...)
	manyHeaders := ids()
	for i := range 200 {
		manyHeaders = append(manyHeaders, kafka.Header{Key: fmt.Sprintf("h%03d", i), Value: bytes.Repeat([]byte("x"), 100)})
	}
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Balancer: kafkaclient.Balancer(), RequiredAcks: kafka.RequireAll,
		BatchTimeout: time.Millisecond, BatchBytes: 4 << 20}
	defer w.Close()
	if err := w.WriteMessages(ctx,
		kafka.Message{Topic: commands, Key: bigKey, Value: bigValue, Headers: ids()},
		kafka.Message{Topic: commands, Key: []byte("many-headers"), Value: []byte("{}"), Headers: manyHeaders},
	); err != nil {
		t.Fatalf("produce the poison commands: %v", err)
	}
	cmd, value := conformanceCommand(t, replies, "after-the-dead-letters")
	writeCommand(ctx, t, w, commands, cmd, value)

	// The valid command after them is answered.
	rctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: brokers, Topic: replies, Partition: 0, MinBytes: 1, MaxBytes: 1 << 20,
		MaxWait: 100 * time.Millisecond, StartOffset: kafka.FirstOffset,
	})
	defer r.Close()
	for {
		m, err := r.ReadMessage(rctx)
		if err != nil {
			t.Fatalf("no reply on %s to the command after the refused dead letters: %v (participant exited: %v); its output:\n%s",
				replies, err, p.exitedErr(), p.out.String())
		}
		if rep, err := message.DecodeReply(m.Value); err == nil && rep.InReplyTo == cmd.MessageID {
			if rep.Outcome != message.Success {
				t.Fatalf("reply %+v, want a success", rep)
			}
			break
		}
	}

	// The dead-letter topic holds the shortened record of the first, and
	// nothing of the second (refused even shortened).
	dr := kafka.NewReader(kafka.ReaderConfig{
		Brokers: brokers, Topic: dlq, Partition: 0, MinBytes: 1, MaxBytes: 1 << 20,
		MaxWait: 100 * time.Millisecond, StartOffset: kafka.FirstOffset,
	})
	defer dr.Close()
	d, err := dr.ReadMessage(rctx)
	if err != nil {
		t.Fatalf("read %s: %v", dlq, err)
	}
	header := func(k string) string {
		for _, h := range d.Headers {
			if h.Key == k {
				return string(h.Value)
			}
		}
		return ""
	}
	if header("dlq-shortened") != "true" || !bytes.Equal(d.Value, bigValue[:1024]) || !bytes.Equal(d.Key, bigKey[:1024]) {
		t.Errorf("dead letter: dlq-shortened %q, key %d bytes, value %d bytes (%.20q); want a shortened record with the first 1024 bytes of key and value",
			header("dlq-shortened"), len(d.Key), len(d.Value), d.Value)
	}
	if header("dlq-original-topic") != commands || header("dlq-original-partition") != "0" || header("dlq-original-offset") != "0" {
		t.Errorf("dead letter coordinates %q/%q/%q, want %s/0/0", header("dlq-original-topic"), header("dlq-original-partition"), header("dlq-original-offset"), commands)
	}
	if reason := header("dlq-reason"); !strings.Contains(reason, "not JSON") {
		t.Errorf("dead letter reason %q, want the decoding error (not JSON)", reason)
	}
	if header(message.HeaderMessageID) == "" {
		t.Errorf("dead letter headers %v: the original message-id is not kept", d.Headers)
	}
	conn, err := kafka.DialLeader(ctx, "tcp", brokers[0], dlq, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if last, err := conn.ReadLastOffset(); err != nil || last != 1 {
		t.Errorf("%s holds %d records (%v), want 1: the shortened dead letter only", dlq, last, err)
	}
	p.stop(t)
	out := p.out.String()
	for _, want := range []string{
		`"msg":"the broker refused a dead-letter record; sending a shortened one","topic":"` + commands + `","partition":0,"offset":"0"`,
		`"msg":"the broker refused a dead-letter record; sending a shortened one","topic":"` + commands + `","partition":0,"offset":"1"`,
		`"level":"error","msg":"the broker refused even the shortened dead-letter record; the command is skipped and only this log line keeps it","topic":"` + commands + `","partition":0,"offset":"1"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %s:\n%s", want, out)
		}
	}
}
