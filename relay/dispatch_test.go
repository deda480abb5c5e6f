package relay_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sagaflow/sagaflow/internal/outboxdb"
	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/outbox"
	"github.com/sagaflow/sagaflow/relay"
)

// enqueueDirect commits msgs leased for lease and returns their Pending.
func (f *fixture) enqueueDirect(t testing.TB, lease time.Duration, msgs ...outbox.Message) *outboxdb.Pending {
	t.Helper()
	ctx := testkit.Context(t, 30*time.Second)
	tx, err := f.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	p, err := outboxdb.For(f.ob.Schema()).EnqueueDirect(ctx, tx, lease, msgs...)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if len(p.IDs) != len(msgs) {
		t.Fatalf("%d ids for %d messages", len(p.IDs), len(msgs))
	}
	return p
}

// runDispatching runs r and waits for its dispatch mode to be active.
func runDispatching(t *testing.T, r *relay.Relay) {
	t.Helper()
	if r.Active() {
		t.Fatal("a relay that does not run reports its dispatch active")
	}
	start(t, r)
	testkit.Eventually(t, 10*time.Second, "dispatch running", func() (bool, error) { return r.Active(), nil })
}

// Committed rows handed to the dispatch reach Kafka at once, in order per
// key, and are deleted; the sweep, with a lease of an hour, has nothing to
// do. Rows not handed over (the process died after its commit) wait for
// their lease and then the sweep publishes them.
func TestDispatchPublishesAtOnceAndTheSweepCatchesTheRest(t *testing.T) {
	t.Parallel()
	f := setup(t)
	c := consume(t, f.brokers, f.topic)
	d := f.newRelay(t, relay.Config{})
	runDispatching(t, d)
	var sent []*outboxdb.Pending
	for i := range 10 {
		sent = append(sent, f.enqueueDirect(t, time.Hour, msg(f.topic, "k", fmt.Sprintf(`{"n":%d}`, i))))
	}
	for _, p := range sent {
		d.Send(p)
	}
	testkit.Eventually(t, 30*time.Second, "10 messages on Kafka", func() (bool, error) { return c.count() >= 10, nil })
	for i, m := range c.snapshot() {
		if want := fmt.Sprintf(`{"n":%d}`, i); string(m.Value) != want {
			t.Fatalf("message %d is %s, want %s: the key's order", i, m.Value, want)
		}
	}
	testkit.Eventually(t, 30*time.Second, "published rows deleted", func() (bool, error) {
		return f.scalar(t, `SELECT count(*) FROM orch.outbox`) == 0, nil
	})

	// Left behind: committed, never handed over, lease short.
	f.enqueueDirect(t, 200*time.Millisecond, msg(f.topic, "orphan", `{"n":"orphan"}`))
	testkit.Eventually(t, 30*time.Second, "the sweep published the orphan after its lease", func() (bool, error) {
		return c.count() == 11 && f.scalar(t, `SELECT count(*) FROM orch.outbox`) == 0, nil
	})
}

// Published, then the process died before the delete: the row stays, and
// the sweep publishes it again after the lease (receivers dedupe by
// message-id).
func TestDispatchCrashAfterPublishBeforeDelete(t *testing.T) {
	t.Parallel()
	f := setup(t)
	c := consume(t, f.brokers, f.topic)
	d := f.newRelay(t, relay.Config{})
	relay.SetAfterDispatch(d, func() error { return errors.New("crash") })
	runDispatching(t, d)
	d.Send(f.enqueueDirect(t, 3*time.Second, msg(f.topic, "k", `{"n":1}`)))
	testkit.Eventually(t, 30*time.Second, "published by the dispatch", func() (bool, error) { return c.count() == 1, nil })
	if n := f.scalar(t, `SELECT count(*) FROM orch.outbox`); n != 1 {
		t.Fatalf("%d rows after the crash before the delete, want 1", n)
	}
	testkit.Eventually(t, 30*time.Second, "published again by the sweep after the lease", func() (bool, error) {
		return c.count() == 2 && f.scalar(t, `SELECT count(*) FROM orch.outbox`) == 0, nil
	})
	s := c.snapshot()
	if header(s[0], "message-id") != header(s[1], "message-id") {
		t.Fatal("the relay's copy has another message id: receivers could not dedupe it")
	}
}

// A row the dispatch cannot publish (here: a topic that does not exist) is
// released to the sweep at once, not left for its lease of an hour (due
// now, or already tried by the sweep, which claims only due rows); a row
// of the same batch that Kafka took is published and deleted.
func TestDispatchReleasesWhatItCannotPublish(t *testing.T) {
	t.Parallel()
	f := setup(t)
	c := consume(t, f.brokers, f.topic)
	d := f.newRelay(t, relay.Config{WriteTimeout: 2 * time.Second})
	runDispatching(t, d)
	d.Send(f.enqueueDirect(t, time.Hour, msg("no-such-topic-"+testkit.RandomSuffix(4), "k", `{"n":1}`), msg(f.topic, "k", `{"n":2}`)))
	testkit.Eventually(t, 30*time.Second, "the row released to the sweep", func() (bool, error) {
		return f.scalar(t, `SELECT count(*) FROM orch.outbox WHERE available_at <= now() OR attempts > 0`) == 1, nil
	})
	testkit.Eventually(t, 30*time.Second, "the other row published and deleted", func() (bool, error) {
		return c.count() == 1 && f.scalar(t, `SELECT count(*) FROM orch.outbox WHERE topic = $1`, f.topic) == 0, nil
	})
}
