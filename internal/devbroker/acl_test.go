package devbroker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl/plain"

	"github.com/sagaflow/sagaflow/internal/devbroker"
)

// With principals the broker enforces the sagaflow ACLs: each principal
// does what its row of the table allows (the orchestrator writes a command
// topic and the outcome topic and reads the reply, start and event topics,
// a participant writes the reply topic
// and reads its own command topic) and is refused the rest (a participant
// writing another participant's command topic or reading the reply topic;
// a user without ACLs anything).
func TestPrincipalWithoutACLIsRefused(t *testing.T) {
	t.Parallel()
	layout := devbroker.Layout{Participants: []string{"inventory", "payment"}}
	var principals []devbroker.Principal
	for _, u := range []string{devbroker.OrchestratorName, "inventory", "payment"} {
		principals = append(principals, devbroker.Principal{User: u, Password: u + "-pw", ACLs: devbroker.SagaflowACLs(layout, u)})
	}
	principals = append(principals, devbroker.Principal{User: "nobody", Password: "nobody-pw"})
	b, err := devbroker.Start(devbroker.Config{
		Partitions: 1, Topics: []string{"saga.replies", "inventory.commands", "payment.commands", "saga.outcomes", "saga.starts", "saga.events"},
		SASL: devbroker.SASL{Mechanism: "PLAIN", User: "admin", Password: "admin-pw"}, Principals: principals,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client := func(user string) *kafka.Client {
		tr := &kafka.Transport{SASL: plain.Mechanism{Username: user, Password: user + "-pw"}}
		t.Cleanup(tr.CloseIdleConnections)
		return &kafka.Client{Addr: kafka.TCP(b.Addrs()...), Transport: tr}
	}
	produce := func(user, topic string) error {
		res, err := client(user).Produce(ctx, &kafka.ProduceRequest{Topic: topic, Partition: 0, RequiredAcks: kafka.RequireAll,
			Records: kafka.NewRecordReader(kafka.Record{Value: kafka.NewBytes([]byte("{}"))})})
		if err != nil {
			return err
		}
		return res.Error
	}
	fetch := func(user, topic string) error {
		res, err := client(user).Fetch(ctx, &kafka.FetchRequest{Topic: topic, Partition: 0, Offset: 0, MaxBytes: 1 << 20, MaxWait: 10 * time.Millisecond})
		if err != nil {
			return err
		}
		return res.Error
	}
	// Denied: an authorization error, or the topic hidden from the
	// principal's metadata (kafka-go's client then says it is not found;
	// the allowed cases show every topic exists).
	denied := func(err error) bool {
		return errors.Is(err, kafka.TopicAuthorizationFailed) || (err != nil && strings.Contains(err.Error(), "topic not found"))
	}
	for _, c := range []struct {
		what    string
		err     error
		allowed bool
	}{
		{"orchestrator writes inventory.commands", produce("orchestrator", "inventory.commands"), true},
		{"orchestrator reads saga.replies", fetch("orchestrator", "saga.replies"), true},
		{"inventory writes saga.replies", produce("inventory", "saga.replies"), true},
		{"inventory reads inventory.commands", fetch("inventory", "inventory.commands"), true},
		{"inventory writes payment.commands", produce("inventory", "payment.commands"), false},
		{"inventory reads payment.commands", fetch("inventory", "payment.commands"), false},
		{"inventory reads saga.replies", fetch("inventory", "saga.replies"), false},
		{"payment reads inventory.commands", fetch("payment", "inventory.commands"), false},
		{"nobody writes saga.replies", produce("nobody", "saga.replies"), false},
		{"orchestrator writes saga.outcomes", produce("orchestrator", "saga.outcomes"), true},
		{"orchestrator reads saga.starts", fetch("orchestrator", "saga.starts"), true},
		{"orchestrator reads saga.events", fetch("orchestrator", "saga.events"), true},
		{"inventory writes saga.outcomes", produce("inventory", "saga.outcomes"), false},
	} {
		switch {
		case c.allowed && c.err != nil:
			t.Errorf("%s: %v, want allowed", c.what, c.err)
		case !c.allowed && !denied(c.err):
			t.Errorf("%s: %v, want a topic authorization failure", c.what, c.err)
		}
	}
	// A participant consumes its command topic in its consumer group (the
	// group ACL), as the SDK's inbox does.
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: b.Addrs(), GroupID: "inventory", Topic: "inventory.commands", StartOffset: kafka.FirstOffset,
		MaxWait: 50 * time.Millisecond, Dialer: &kafka.Dialer{SASLMechanism: plain.Mechanism{Username: "inventory", Password: "inventory-pw"}, Timeout: 10 * time.Second}})
	defer r.Close()
	m, err := r.FetchMessage(ctx)
	if err != nil || string(m.Value) != "{}" {
		t.Fatalf("inventory consuming its command topic in its group: %q %v", m.Value, err)
	}
	if err := r.CommitMessages(ctx, m); err != nil {
		t.Fatalf("inventory committing its offset: %v", err)
	}
	if _, err := devbroker.Start(devbroker.Config{Principals: principals}); err == nil {
		t.Fatal("principals without SASL were accepted")
	}
}
