package inbox_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/inbox"
	"github.com/sagaflow/sagaflow/internal/devbroker"
	"github.com/sagaflow/sagaflow/internal/faultproxy"
	"github.com/sagaflow/sagaflow/internal/kafkaclient"
	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/migrations"
)

// A consumer cut off from the broker keeps running and resumes soon after
// the broker is back: its old group member (which could not leave) is
// dropped after Config.SessionTimeout, not after kafka-go's 30s default.
func TestBrokerCutConsumerResumesAfterSessionTimeout(t *testing.T) {
	t.Parallel()
	const session = 3 * time.Second
	pool := testkit.Pool(t)
	testkit.Migrate(t, pool, testkit.MustSets(t)(migrations.Participant("p")))
	ctx := testkit.Context(t, 2*time.Minute)
	if _, err := pool.Exec(ctx, `CREATE TABLE effects (message_id uuid NOT NULL, body text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	proxy, err := faultproxy.New("127.0.0.1:0", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	b, err := devbroker.Start(devbroker.Config{Addr: addr, AdvertiseAddr: proxy.Addr(), Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	brokers := []string{proxy.Addr()}
	topic := "cut-" + testkit.RandomSuffix(4)
	if err := kafkaclient.EnsureTopics(ctx, brokers, 2, 1, topic); err != nil {
		t.Fatal(err)
	}
	e := &env{pool: pool, brokers: brokers, topic: topic, group: "g-" + testkit.RandomSuffix(4)}
	e.w = &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, Balancer: kafkaclient.Balancer(), BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
	t.Cleanup(func() { _ = e.w.Close() })
	cfg := e.config(newMetrics(t))
	cfg.SessionTimeout = session
	c, err := inbox.New(pool, inbox.EachMessage(writeEffect), cfg)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run = %v after cancel, want nil", err)
			}
		case <-time.After(wait):
			t.Errorf("Run did not return within %s", wait)
		}
	})
	handled := func(ids ...uuid.UUID) func() (bool, error) {
		return func() (bool, error) {
			return count(t, pool, `SELECT count(*) FROM effects WHERE message_id = ANY($1)`, ids) == len(ids), nil
		}
	}
	first := []uuid.UUID{uuid.New(), uuid.New()}
	e.produce(t, record(first[0], "a"), record(first[1], "b"))
	testkit.Eventually(t, wait, "messages before the cut handled", handled(first...))

	proxy.Cut()
	cutAt := time.Now()
	testkit.Eventually(t, wait, "broker cut for 2s", func() (bool, error) {
		select {
		case err := <-done:
			t.Fatalf("Run returned during the broker cut: %v", err)
		default:
		}
		return time.Since(cutAt) >= 2*time.Second, nil
	})
	proxy.Restore()
	restoredAt := time.Now()
	after := []uuid.UUID{uuid.New(), uuid.New(), uuid.New()}
	e.produce(t, record(after[0], "c"), record(after[1], "d"), record(after[2], "e"))
	// The session timeout plus kafka-go's join backoff (5s) and slack; with
	// the old 30s session this took more than 30s.
	testkit.Eventually(t, session+15*time.Second, "messages after the cut handled", handled(after...))
	t.Logf("resumed %s after the broker came back", time.Since(restoredAt).Round(time.Millisecond))
	effectsOncePerID(t, pool, append(first, after...))
}
