package participants_test

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/inbox"
	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/participants"
)

var (
	orchKey  = message.Key{ID: "orch-1", Secret: []byte(strings.Repeat("o", 32))}
	replyKey = message.Key{ID: "pt-1", Secret: []byte(strings.Repeat("p", 32))}
)

// signedSetup is setup's participant verifying commands with orchKey
// (unless allowUnsigned takes unsigned ones) and signing with replyKey.
func signedSetup(t *testing.T, allowUnsigned bool) *fixture {
	t.Helper()
	pool := testkit.Pool(t)
	p, err := participants.New(pool, &participants.Config{Name: "pt", ReplyTopics: []string{"saga.replies"},
		CommandKeys: []message.Key{orchKey}, AllowUnsignedCommands: allowUnsigned, ReplyKey: replyKey})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	testkit.Migrate(t, pool, testkit.MustSets(t)(p.Migrations()))
	f := &fixture{pool: pool, p: p, ctx: testkit.Context(t, 60*time.Second)}
	if _, err := pool.Exec(f.ctx, `CREATE TABLE pt.effects (saga_id uuid NOT NULL, step text NOT NULL, action text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return f
}

func signedRecord(t *testing.T, cmd message.Command, k message.Key) message.Record {
	t.Helper()
	s, err := message.NewSigner(k)
	if err != nil {
		t.Fatal(err)
	}
	v, _ := message.EncodeCommand(cmd)
	h := message.Headers(cmd.MessageID, cmd.SagaID)
	s.Sign("pt.commands", []byte(cmd.AggregateID), v, h)
	return record(t, cmd, h)
}

// A participant that requires signed commands dead-letters, unexecuted,
// a command that is unsigned, signed with a key it does not know, or
// whose signed parts were changed (a payload swapped under a good
// signature), on the batch path and the one-by-one path alike; it
// executes the one signed with the orchestrator's key and signs its reply
// with its own.
func TestSDKRefusesBadlySignedCommand(t *testing.T) {
	t.Parallel()
	f := signedSetup(t, false)
	var calls atomic.Int32
	if err := f.p.Handle("reserve", effect(participants.Success(nil), &calls), nil); err != nil {
		t.Fatal(err)
	}
	good := command(uuid.New(), "reserve", message.Forward)
	unsigned := command(uuid.New(), "reserve", message.Forward)
	wrongKey := command(uuid.New(), "reserve", message.Forward)
	tampered := command(uuid.New(), "reserve", message.Forward)
	tamperedRec := signedRecord(t, tampered, orchKey)
	tampered.Payload = []byte(`{"qty":1000}`)
	tamperedRec.Value, _ = message.EncodeCommand(tampered)
	bad := []message.Record{
		record(t, unsigned, message.Headers(unsigned.MessageID, unsigned.SagaID)),
		signedRecord(t, wrongKey, message.Key{ID: orchKey.ID, Secret: []byte(strings.Repeat("x", 32))}),
		tamperedRec,
	}
	want := []string{"requires signed commands", "does not match", "does not match"}
	for i, m := range bad {
		var res []inbox.Result
		err := pgx.BeginFunc(f.ctx, f.pool, func(tx pgx.Tx) error {
			var err error
			res, err = f.p.HandleCommands(f.ctx, tx, []message.Record{m})
			return err
		})
		if err != nil || len(res) != 1 || res[0].Outcome != inbox.DeadLetter || !strings.Contains(res[0].Reason, want[i]) {
			t.Fatalf("bad command %d: %v %+v, want a dead letter saying %q", i, err, res, want[i])
		}
		err = pgx.BeginFunc(f.ctx, f.pool, func(tx pgx.Tx) error { return f.p.HandleMessage(f.ctx, tx, m) })
		if !errors.Is(err, message.ErrInvalid) || !strings.Contains(err.Error(), want[i]) {
			t.Fatalf("bad command %d one by one: %v", i, err)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("the handler ran %d times for badly signed commands", n)
	}
	if err := pgx.BeginFunc(f.ctx, f.pool, func(tx pgx.Tx) error {
		_, err := f.p.HandleCommands(f.ctx, tx, []message.Record{signedRecord(t, good, orchKey)})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("the handler ran %d times for the signed command, want 1", n)
	}
	var topic, key string
	var value []byte
	var headers map[string]string
	if err := f.pool.QueryRow(f.ctx, `SELECT topic, key, value, headers FROM pt.outbox`).Scan(&topic, &key, &value, &headers); err != nil {
		t.Fatal(err)
	}
	var ring message.Keyring
	_ = ring.Add("pt", replyKey)
	var hs []message.Header
	for k, v := range headers {
		hs = append(hs, message.Header{Key: k, Value: []byte(v)})
	}
	if owner, err := message.Verify(&ring, topic, []byte(key), value, hs); err != nil || owner != "pt" {
		t.Fatalf("the reply's signature: %q %v (headers %v)", owner, err, headers)
	}
}

// With AllowUnsignedCommands (a migration window) an unsigned command is
// executed, and a badly signed one is still refused.
func TestSDKAllowsUnsignedCommandsOnlyWhenSet(t *testing.T) {
	t.Parallel()
	f := signedSetup(t, true)
	if err := f.p.Handle("reserve", effect(participants.Success(nil), nil), nil); err != nil {
		t.Fatal(err)
	}
	unsigned := command(uuid.New(), "reserve", message.Forward)
	if err := pgx.BeginFunc(f.ctx, f.pool, func(tx pgx.Tx) error {
		return f.p.HandleMessage(f.ctx, tx, record(t, unsigned, message.Headers(unsigned.MessageID, unsigned.SagaID)))
	}); err != nil {
		t.Fatalf("unsigned command with AllowUnsignedCommands: %v", err)
	}
	forged := command(uuid.New(), "reserve", message.Forward)
	err := pgx.BeginFunc(f.ctx, f.pool, func(tx pgx.Tx) error {
		return f.p.HandleMessage(f.ctx, tx, signedRecord(t, forged, message.Key{ID: "someone", Secret: []byte(strings.Repeat("s", 32))}))
	})
	if !errors.Is(err, message.ErrBadSignature) {
		t.Fatalf("a command signed by an unknown key: %v, want ErrBadSignature", err)
	}
}

func TestSDKRefusesBadKeys(t *testing.T) {
	pool := testkit.Pool(t)
	for name, c := range map[string]participants.Config{
		"short command key": {Name: "pt", CommandKeys: []message.Key{{ID: "o", Secret: []byte("short")}}},
		"reply key no id":   {Name: "pt", ReplyKey: message.Key{Secret: make([]byte, 32)}},
	} {
		if _, err := participants.New(pool, &c); err == nil || !strings.Contains(err.Error(), "Config.") {
			t.Errorf("%s: %v, want an error naming the field", name, err)
		}
	}
}
