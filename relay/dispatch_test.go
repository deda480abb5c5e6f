package relay_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/outbox"
	"github.com/sagaflow/sagaflow/relay"
)

// enqueueDirect commits msgs leased for lease and returns their Pending.
func (f *fixture) enqueueDirect(t testing.TB, lease time.Duration, msgs ...outbox.Message) *outbox.Pending {
	t.Helper()
	ctx := testkit.Context(t, 30*time.Second)
	tx, err := f.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	p, err := f.ob.EnqueueDirect(ctx, tx, lease, msgs...)
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

func runDispatcher(t *testing.T, d *relay.Dispatcher) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	testkit.Eventually(t, 10*time.Second, "dispatcher running", func() (bool, error) { return d.Active(), nil })
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("dispatcher Run: %v", err)
		}
	})
}

// Committed rows handed to the dispatcher reach Kafka at once, in order per
// key, and are deleted; the relay, with a lease of an hour, has nothing to
// do. Rows not handed over (the process died after its commit) wait for
// their lease and then the relay publishes them.
func TestDispatcherPublishesAtOnceAndTheRelayCatchesTheRest(t *testing.T) {
	t.Parallel()
	f := setup(t)
	c := consume(t, f.brokers, f.topic)
	d, err := relay.NewDispatcher(f.pool, f.ob, &relay.Config{Brokers: f.brokers, Metrics: f.metrics})
	if err != nil {
		t.Fatal(err)
	}
	if d.Active() {
		t.Fatal("a dispatcher that does not run reports active")
	}
	runDispatcher(t, d)
	var sent []*outbox.Pending
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
	r := f.newRelay(t, relay.Config{})
	start(t, r)
	testkit.Eventually(t, 30*time.Second, "the relay published the orphan after its lease", func() (bool, error) {
		return c.count() == 11 && f.scalar(t, `SELECT count(*) FROM orch.outbox`) == 0, nil
	})
}

// Published, then the process died before the delete: the row stays, and
// the relay publishes it again after the lease (receivers dedupe by
// message-id).
func TestDispatcherCrashAfterPublishBeforeDelete(t *testing.T) {
	t.Parallel()
	f := setup(t)
	c := consume(t, f.brokers, f.topic)
	d, err := relay.NewDispatcher(f.pool, f.ob, &relay.Config{Brokers: f.brokers})
	if err != nil {
		t.Fatal(err)
	}
	relay.SetDispatchAfterPublish(d, func() error { return errors.New("crash") })
	runDispatcher(t, d)
	d.Send(f.enqueueDirect(t, 300*time.Millisecond, msg(f.topic, "k", `{"n":1}`)))
	testkit.Eventually(t, 30*time.Second, "published by the dispatcher", func() (bool, error) { return c.count() == 1, nil })
	if n := f.scalar(t, `SELECT count(*) FROM orch.outbox`); n != 1 {
		t.Fatalf("%d rows after the crash before the delete, want 1", n)
	}
	r := f.newRelay(t, relay.Config{})
	start(t, r)
	testkit.Eventually(t, 30*time.Second, "published again by the relay after the lease", func() (bool, error) {
		return c.count() == 2 && f.scalar(t, `SELECT count(*) FROM orch.outbox`) == 0, nil
	})
	s := c.snapshot()
	if header(s[0], "message-id") != header(s[1], "message-id") {
		t.Fatal("the relay's copy has another message id: receivers could not dedupe it")
	}
}

// A row the dispatcher cannot publish (here: a topic that does not exist)
// is released to the relay at once, not left for its lease of an hour.
func TestDispatcherReleasesWhatItCannotPublish(t *testing.T) {
	t.Parallel()
	f := setup(t)
	d, err := relay.NewDispatcher(f.pool, f.ob, &relay.Config{Brokers: f.brokers, WriteTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	runDispatcher(t, d)
	d.Send(f.enqueueDirect(t, time.Hour, msg("no-such-topic-"+testkit.RandomSuffix(4), "k", `{"n":1}`)))
	testkit.Eventually(t, 30*time.Second, "the row released to the relay", func() (bool, error) {
		return f.scalar(t, `SELECT count(*) FROM orch.outbox WHERE available_at <= now()`) == 1, nil
	})
}
