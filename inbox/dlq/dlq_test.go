package dlq_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/inbox"
	"github.com/sagaflow/sagaflow/inbox/dlq"
	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/migrations"
	"github.com/sagaflow/sagaflow/outbox"
	"github.com/sagaflow/sagaflow/relay"
)

const wait = 30 * time.Second

func runBG(t *testing.T, what string, run func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s: %v", what, err)
			}
		case <-time.After(wait):
			t.Errorf("%s did not stop", what)
		}
	})
}

// A record the handler dead-letters is kept in dead_letters with its
// original topic, key, value and headers; redriven once its cause is
// fixed, it comes back through the relay and the consumer with the same
// message id and is handled once; a second redrive is refused, the dead
// letter is kept and marked, and the action is audited.
func TestRedriveGoesThroughTheConsumerOnce(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	const schema = "p"
	testkit.Migrate(t, pool, testkit.MustSets(t)(migrations.Participant(schema)))
	ctx := testkit.Context(t, wait)
	if _, err := pool.Exec(ctx, `CREATE TABLE effects (message_id uuid NOT NULL, body text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	brokers := testkit.Brokers(t)
	topic := testkit.Topic(t, brokers, "dlq", 1)

	var fixed atomic.Bool
	handler := func(ctx context.Context, tx pgx.Tx, rs []message.Record) ([]inbox.Result, error) {
		out := make([]inbox.Result, len(rs))
		for i, r := range rs {
			id, _ := r.Header(message.HeaderMessageID)
			if strings.HasPrefix(string(r.Value), "poison") && !fixed.Load() {
				out[i] = inbox.Result{Outcome: inbox.DeadLetter, Reason: "cannot handle poison yet"}
				continue
			}
			if _, err := tx.Exec(ctx, `INSERT INTO effects VALUES ($1, $2)`, id, string(r.Value)); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	c, err := inbox.New(pool, handler, &inbox.Config{Brokers: brokers, GroupID: "g-" + testkit.RandomSuffix(4), Topics: []string{topic}, Schema: schema, Name: "dlqtest",
		Advanced: inbox.Advanced{BackoffInitial: 5 * time.Millisecond, BackoffMax: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	runBG(t, "consumer", c.Run)
	ob, err := outbox.New(schema)
	if err != nil {
		t.Fatal(err)
	}
	rl, err := relay.New(pool, ob, &relay.Config{Brokers: brokers})
	if err != nil {
		t.Fatal(err)
	}
	runBG(t, "relay", rl.Run)

	id := uuid.New()
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
	defer w.Close()
	if err := w.WriteMessages(ctx, kafka.Message{Key: []byte("order-7"), Value: []byte("poison pill"),
		Headers: []kafka.Header{{Key: message.HeaderMessageID, Value: []byte(id.String())}, {Key: "trace", Value: []byte("abc")}}}); err != nil {
		t.Fatal(err)
	}

	st, err := dlq.New(pool, schema, topic)
	if err != nil {
		t.Fatal(err)
	}
	var dl dlq.DeadLetter
	testkit.Eventually(t, wait, "the dead letter is recorded", func() (bool, error) {
		ls, _, err := st.List(ctx, dlq.Filter{})
		if len(ls) == 1 {
			dl = ls[0]
		}
		return len(ls) == 1, err
	})
	if dl.Topic != topic || dl.Key != "order-7" || dl.MessageID != id.String() || dl.Headers["trace"] != "abc" || dl.Reason != "cannot handle poison yet" || dl.ValueBytes != len("poison pill") {
		t.Fatalf("dead letter = %+v, want the original topic, key, headers, message id and the reason", dl)
	}
	full, err := st.Get(ctx, dl.ID)
	if err != nil || string(full.Value) != "poison pill" {
		t.Fatalf("Get = %q, %v; want the original value", full.Value, err)
	}
	if _, err := st.Get(ctx, dl.ID+1000); !errors.Is(err, dlq.ErrNotFound) {
		t.Fatalf("Get(unknown) err = %v, want ErrNotFound", err)
	}
	if _, err := st.Redrive(ctx, []int64{dl.ID}, dlq.Audit{Actor: "alice"}); !errors.Is(err, dlq.ErrInvalidInput) {
		t.Fatalf("Redrive without a reason err = %v, want ErrInvalidInput", err)
	}

	fixed.Store(true)
	a := dlq.Audit{Actor: "alice@ops", Reason: "handler fixed in v2"}
	done, err := st.Redrive(ctx, []int64{dl.ID}, a)
	if err != nil || len(done) != 1 {
		t.Fatalf("Redrive = %v, %v; want the one dead letter", done, err)
	}
	testkit.Eventually(t, wait, "the redriven record is handled", func() (bool, error) {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM effects WHERE message_id = $1`, id).Scan(&n)
		return n == 1, err
	})
	again, err := st.Redrive(ctx, []int64{dl.ID}, a)
	if err != nil || len(again) != 0 {
		t.Fatalf("second Redrive = %v, %v; want nothing redriven", again, err)
	}
	if ls, _, _ := st.List(ctx, dlq.Filter{}); len(ls) != 0 {
		t.Fatalf("open dead letters after the redrive = %d, want 0", len(ls))
	}
	ls, _, err := st.List(ctx, dlq.Filter{Redriven: true})
	if err != nil || len(ls) != 1 || ls[0].RedrivenAt == nil || ls[0].RedrivenBy != "alice@ops" || ls[0].RedriveReason != a.Reason {
		t.Fatalf("redriven dead letters = %+v, %v; want the one kept and marked", ls, err)
	}
	log, err := st.AuditLog(ctx, 10)
	if err != nil || len(log) != 1 || log[0].Action != dlq.ActionRedrive || log[0].Actor != "alice@ops" || !strings.Contains(string(log[0].Detail), id.String()) {
		t.Fatalf("audit = %+v, %v; want one redrive entry", log, err)
	}
	// The same record replayed once more (e.g. from Kafka) is a duplicate.
	if err := w.WriteMessages(ctx, kafka.Message{Value: []byte("poison pill"), Headers: []kafka.Header{{Key: message.HeaderMessageID, Value: []byte(id.String())}}}); err != nil {
		t.Fatal(err)
	}
	marker := uuid.New()
	if err := w.WriteMessages(ctx, kafka.Message{Value: []byte("after"), Headers: []kafka.Header{{Key: message.HeaderMessageID, Value: []byte(marker.String())}}}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, wait, "the marker after the replay is handled", func() (bool, error) {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM effects WHERE message_id = $1`, marker).Scan(&n)
		return n == 1, err
	})
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM effects WHERE message_id = $1`, id).Scan(&n); err != nil || n != 1 {
		t.Fatalf("effects of the redriven message = %d, %v; want exactly 1", n, err)
	}
}

// TestRedriveOnlyToConsumedTopics: a redrive publishes only to the topics
// the schema consumes. A dead letter naming any other topic (a row written
// by hand, or a topic the consumer no longer reads) is refused by id and in
// bulk, with the topic and the allowed ones named, and nothing is enqueued
// or marked; a bulk redrive filtered to an allowed topic goes ahead; a
// store told no topic refuses every redrive.
func TestRedriveOnlyToConsumedTopics(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	const schema = "rt"
	testkit.Migrate(t, pool, testkit.MustSets(t)(migrations.Participant(schema)))
	ctx := testkit.Context(t, wait)
	var good, foreign int64
	if err := pool.QueryRow(ctx, `INSERT INTO rt.dead_letters (topic, partition, "offset", key, value, headers, message_id, reason)
VALUES ('shop.commands', 0, 1, 'k', 'v', '{}', 'm-1', 'r') RETURNING id`).Scan(&good); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `INSERT INTO rt.dead_letters (topic, partition, "offset", key, value, headers, message_id, reason)
VALUES ('payments.ledger', 0, 2, 'k', 'v', '{}', 'm-2', 'r') RETURNING id`).Scan(&foreign); err != nil {
		t.Fatal(err)
	}
	st, err := dlq.New(pool, schema, "shop.commands")
	if err != nil {
		t.Fatal(err)
	}
	a := dlq.Audit{Actor: "alice", Reason: "fixed"}
	enqueued := func() int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM rt.outbox`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	named := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, dlq.ErrTopicNotConsumed) || !strings.Contains(err.Error(), `"payments.ledger"`) || !strings.Contains(err.Error(), "shop.commands") {
			t.Fatalf("%s: err %v; want ErrTopicNotConsumed naming the topic and the allowed one", what, err)
		}
		if n := enqueued(); n != 0 {
			t.Fatalf("%s: %d outbox rows; want nothing enqueued", what, n)
		}
	}
	_, err = st.Redrive(ctx, []int64{good, foreign}, a)
	named("Redrive of both", err)
	_, err = st.RedriveMatching(ctx, dlq.Filter{}, a)
	named("RedriveMatching of all", err)
	_, err = st.RedriveMatching(ctx, dlq.Filter{Topic: "payments.ledger"}, a)
	named("RedriveMatching filtered to the foreign topic", err)
	if !errors.Is(err, dlq.ErrInvalidInput) {
		t.Fatalf("RedriveMatching filtered to the foreign topic: err %v; want ErrInvalidInput too (a bad filter)", err)
	}
	var marked int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM rt.dead_letters WHERE redriven_at IS NOT NULL`).Scan(&marked); err != nil || marked != 0 {
		t.Fatalf("%d dead letters marked redriven (%v), want 0", marked, err)
	}
	done, err := st.RedriveMatching(ctx, dlq.Filter{Topic: "shop.commands"}, a)
	if err != nil || len(done) != 1 || done[0] != good {
		t.Fatalf("RedriveMatching filtered to the consumed topic = %v, %v; want the one dead letter", done, err)
	}
	var topic string
	if err := pool.QueryRow(ctx, `SELECT topic FROM rt.outbox`).Scan(&topic); err != nil || topic != "shop.commands" {
		t.Fatalf("outbox topic %q (%v), want shop.commands", topic, err)
	}
	none, err := dlq.New(pool, schema)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := none.Redrive(ctx, []int64{foreign}, a); !errors.Is(err, dlq.ErrTopicNotConsumed) || !strings.Contains(err.Error(), "no consumed topic") {
		t.Fatalf("Redrive with no consumed topic configured: err %v; want ErrTopicNotConsumed saying none is", err)
	}
}

// Dead outbox rows are listed, requeued (dead mark and attempts cleared,
// the relay publishes them) and audited; live rows are left alone.
func TestRequeueDeadOutboxRows(t *testing.T) {
	t.Parallel()
	pool := testkit.Pool(t)
	const schema = "o"
	testkit.Migrate(t, pool, testkit.MustSets(t)(migrations.Participant(schema)))
	ctx := testkit.Context(t, wait)
	ob, err := outbox.New(schema)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b", "c"} {
		if err := ob.Enqueue(ctx, pool, outbox.Message{Topic: "t", Key: k, Value: []byte(k)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `UPDATE o.outbox SET dead_at = now(), attempts = 20, last_error = 'broker said no' WHERE key IN ('a', 'b')`); err != nil {
		t.Fatal(err)
	}
	st, err := dlq.New(pool, schema)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := st.DeadOutbox(ctx, 0, 10)
	if err != nil || len(rows) != 2 || rows[0].LastError != "broker said no" || rows[0].Attempts != 20 {
		t.Fatalf("DeadOutbox = %+v, %v; want the two dead rows", rows, err)
	}
	if c, err := st.Count(ctx); err != nil || c.DeadOutbox != 2 {
		t.Fatalf("Count = %+v, %v; want 2 dead outbox rows", c, err)
	}
	live := rows[1].ID + 1
	done, err := st.Requeue(ctx, []int64{rows[0].ID, live}, dlq.Audit{Actor: "bob", Reason: "topic created"})
	if err != nil || len(done) != 1 || done[0] != rows[0].ID {
		t.Fatalf("Requeue = %v, %v; want only the dead row", done, err)
	}
	all, err := st.RequeueAll(ctx, dlq.Audit{Actor: "bob", Reason: "topic created"})
	if err != nil || len(all) != 1 || all[0] != rows[1].ID {
		t.Fatalf("RequeueAll = %v, %v; want the other dead row", all, err)
	}
	var dead, fresh int
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE dead_at IS NOT NULL), count(*) FILTER (WHERE dead_at IS NULL AND attempts = 0) FROM o.outbox`).Scan(&dead, &fresh); err != nil || dead != 0 || fresh != 3 {
		t.Fatalf("outbox: %d dead, %d due with 0 attempts, %v; want 0 and 3", dead, fresh, err)
	}
	log, err := st.AuditLog(ctx, 10)
	if err != nil || len(log) != 2 || log[0].Action != dlq.ActionRequeue || log[0].Target != "outbox/"+itoa(rows[1].ID) {
		t.Fatalf("audit = %+v, %v; want two requeue entries, newest first", log, err)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
