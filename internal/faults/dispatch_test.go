package faults_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/internal/kafkaclient"
	"github.com/sagaflow/sagaflow/internal/outboxdb"
	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/orchestrator"
)

// crashingDispatcher stands for an orchestrator process that dies right
// after its commit: before it publishes the rows it just committed
// (publish false), or after publishing them and before deleting them
// (publish true). Either way the rows stay in the outbox, leased.
type crashingDispatcher struct {
	t       *testing.T
	publish bool
	w       *kafka.Writer
	lease   time.Duration
	mu      sync.Mutex
	sent    atomic.Int64
	ids     []int64
}

func (d *crashingDispatcher) Lease() time.Duration { return d.lease }
func (d *crashingDispatcher) Active() bool         { return true }

func (d *crashingDispatcher) Send(p *outboxdb.Pending) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ids = append(d.ids, p.IDs...)
	if !d.publish {
		return
	}
	var msgs []kafka.Message
	for _, m := range p.Msgs {
		km := kafka.Message{Topic: m.Topic, Key: []byte(m.Key), Value: m.Value}
		for k, v := range m.Headers {
			km.Headers = append(km.Headers, kafka.Header{Key: k, Value: []byte(v)})
		}
		msgs = append(msgs, km)
	}
	// Outcome records have no consumer here (nothing dedupes them): only
	// commands count as the copies the participants must drop.
	consumed := int64(0)
	for _, m := range p.Msgs {
		if m.Topic != orchestrator.OutcomeTopicDefault {
			consumed++
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.w.WriteMessages(ctx, msgs...); err != nil {
		d.t.Errorf("crashing dispatcher: publish: %v", err)
		return
	}
	d.sent.Add(consumed)
}

// runWithCrashingDispatcher runs every saga of the plan with the
// orchestrator's commands handed to d instead of the real dispatcher, and
// checks they all end and the invariants hold: the relay published the
// rows d left behind once their lease ended.
func runWithCrashingDispatcher(t *testing.T, publish bool) (*env, *crashingDispatcher) {
	e := newEnv(t, envOpts{orders: 8, seed: 23})
	w := &kafka.Writer{Addr: kafka.TCP(e.brokers...), Balancer: kafkaclient.Balancer(), BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
	t.Cleanup(func() { _ = w.Close() })
	d := &crashingDispatcher{t: t, publish: publish, w: w, lease: 300 * time.Millisecond}
	ctx := testkit.Context(t, 2*time.Minute)
	svc := e.serviceOn(e.pool(), orchestrator.DefaultRun, func(c *orchestrator.Config) {
		c.Engine.Dispatcher = d
		c.Relay.PollInterval = 50 * time.Millisecond
	})
	e.run("orchestrator", svc.Run)
	e.runParticipants(e.participants())
	e.startAll(ctx)
	e.waitTerminal(settle)
	e.checkInvariants(false)
	d.mu.Lock()
	n := len(d.ids)
	d.mu.Unlock()
	if n == 0 {
		t.Fatal("no command went through the dispatcher")
	}
	// Every row the dispatcher did not delete was published by the relay
	// and is gone (or, kept sent, marked).
	left := e.count(`SELECT count(*) FROM ` + e.schemas.Orchestrator + `.outbox WHERE sent_at IS NULL`)
	if left != 0 {
		t.Fatalf("%d commands still unsent after every saga ended", left)
	}
	return e, d
}

// Window: the orchestrator dies between the commit of a transition and
// the publish of its command. The row was leased to it; once the lease
// ends the relay publishes it and the saga goes on.
func TestWindowDispatchCrashAfterCommitBeforePublish(t *testing.T) {
	t.Parallel()
	_, d := runWithCrashingDispatcher(t, false)
	if d.sent.Load() != 0 {
		t.Fatal("the crashing dispatcher published")
	}
}

// Window: the orchestrator dies after publishing a command and before
// deleting its row. The relay publishes it again after the lease; the
// participant's inbox dedupes the copy (same message id): every effect
// happens once, and the invariants hold.
func TestWindowDispatchCrashAfterPublishBeforeDelete(t *testing.T) {
	t.Parallel()
	e, d := runWithCrashingDispatcher(t, true)
	if d.sent.Load() == 0 {
		t.Fatal("the dispatcher published nothing")
	}
	// Each command the dispatcher published, the relay published again
	// after its lease: a duplicate the participants' inboxes skipped.
	testkit.Eventually(t, settle, "the relay's copies reached the participants and were deduped", func() (bool, error) {
		return e.metric("sagaflow_inbox_duplicates_total") >= float64(d.sent.Load()), nil
	})
}
