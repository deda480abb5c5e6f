package participants_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/participants"
)

func record(t *testing.T, cmd message.Command, headers map[string]string) message.Record {
	t.Helper()
	v, err := message.EncodeCommand(cmd)
	if err != nil {
		t.Fatalf("encode command: %v", err)
	}
	m := message.Record{Topic: "pt.commands", Key: []byte(cmd.AggregateID), Value: v}
	for k, h := range headers {
		m.Headers = append(m.Headers, message.Header{Key: k, Value: []byte(h)})
	}
	return m
}

func TestHandleMessageEnqueuesReply(t *testing.T) {
	t.Parallel()
	f := setup(t)
	if err := f.p.Handle("reserve", effect(participants.Success(map[string]string{"reservation": "r-9"}), nil), nil); err != nil {
		t.Fatal(err)
	}
	saga := uuid.New()
	cmd := command(saga, "reserve", message.Forward)
	cmd.ReplyTo = "orders.replies"
	m := record(t, cmd, message.Headers(cmd.MessageID, cmd.SagaID))
	if err := pgx.BeginFunc(f.ctx, f.pool, func(tx pgx.Tx) error { return f.p.HandleMessage(f.ctx, tx, m) }); err != nil {
		t.Fatalf("HandleMessage: %v", err)
	}
	var (
		topic, key string
		value      []byte
		headers    map[string]string
		n          int
	)
	if err := f.pool.QueryRow(f.ctx, `SELECT topic, key, value, headers, count(*) OVER () FROM pt.outbox`).Scan(&topic, &key, &value, &headers, &n); err != nil {
		t.Fatalf("read outbox: %v", err)
	}
	if n != 1 || topic != "orders.replies" || key != saga.String() {
		t.Fatalf("outbox has %d rows, topic %q key %q; want 1 row to orders.replies keyed %s", n, topic, key, saga)
	}
	reply, err := message.DecodeReply(value)
	if err != nil {
		t.Fatalf("outbox value is not a valid reply: %v", err)
	}
	if reply.InReplyTo != cmd.MessageID || reply.SagaID != saga || reply.Step != "reserve" || reply.Action != message.Forward || reply.Outcome != message.Success {
		t.Fatalf("reply %+v does not answer %+v", reply, cmd)
	}
	var out map[string]string
	if err := json.Unmarshal(reply.Payload, &out); err != nil || out["reservation"] != "r-9" {
		t.Fatalf("reply payload %s (%v)", reply.Payload, err)
	}
	if headers[message.HeaderMessageID] != reply.MessageID.String() || headers[message.HeaderSagaID] != saga.String() || headers[message.HeaderContentType] != message.ContentTypeJSON {
		t.Fatalf("reply headers %v do not match reply %s", headers, reply.MessageID)
	}
	if n := f.effects(t, saga, message.Forward); n != 1 {
		t.Fatalf("%d effects, want 1", n)
	}
}

func TestHandleMessageRejectsInvalidRecords(t *testing.T) {
	t.Parallel()
	f := setup(t)
	if err := f.p.Handle("reserve", effect(participants.Success(nil), nil), nil); err != nil {
		t.Fatal(err)
	}
	cmd := command(uuid.New(), "reserve", message.Forward)
	unknown := command(uuid.New(), "unknown", message.Forward)
	elsewhere := command(uuid.New(), "reserve", message.Forward)
	elsewhere.ReplyTo = "attacker.topic" // a legal topic name, not a configured reply topic
	cases := map[string]message.Record{
		"reply_to not a reply topic": record(t, elsewhere, nil),
		"garbage":                    {Topic: "pt.commands", Value: []byte("not json")},
		"missing field":              {Topic: "pt.commands", Value: []byte(`{"message_id":"` + uuid.NewString() + `"}`)},
		"header mismatch":            record(t, cmd, message.Headers(uuid.New(), cmd.SagaID)),
		"unknown step":               record(t, unknown, nil),
	}
	for name, m := range cases {
		err := pgx.BeginFunc(f.ctx, f.pool, func(tx pgx.Tx) error { return f.p.HandleMessage(f.ctx, tx, m) })
		if !errors.Is(err, message.ErrInvalid) {
			t.Fatalf("%s: HandleMessage error %v, want ErrInvalid", name, err)
		}
	}
	var n int
	if err := f.pool.QueryRow(f.ctx, `SELECT (SELECT count(*) FROM pt.outbox) + (SELECT count(*) FROM pt.effects) + (SELECT count(*) FROM pt.barrier)`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d rows written for invalid records (%v), want 0", n, err)
	}
}
