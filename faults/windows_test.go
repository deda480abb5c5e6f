package faults_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/orderapi"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/testkit"
)

const (
	orders  = 12
	settle  = 60 * time.Second
	noRelay = "replies+timers"
)

// Row: crash after state commit, before publish. The orchestrator runs
// without its relay, so the first commands are committed in its outbox and
// never published; it is then stopped (the crash) and a new orchestrator
// process on a new pool publishes them.
func TestWindowCrashAfterStateCommitBeforePublish(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{orders: orders, seed: 11})
	ctx := testkit.Context(t, 2*time.Minute)
	first := e.run("orchestrator without relay", e.service(orchestrator.RunSet{Replies: true, Timers: true}).Run)
	parts := e.run("participants", e.participants().Run)
	e.startAll(ctx)
	if n := e.count(`SELECT count(*) FROM ` + e.schemas.Orchestrator + `.outbox WHERE sent_at IS NULL`); n < orders {
		t.Fatalf("%d unsent commands after start, want %d", n, orders)
	}
	first.stop(t) // crash: the commands were never published
	if n := e.count(`SELECT count(*) FROM ` + e.schemas.Inventory + `.barrier`); n != 0 {
		t.Fatalf("participant executed %d commands that were never published", n)
	}
	e.run("orchestrator restarted", e.service(orchestrator.DefaultRun).Run)
	e.waitTerminal(settle)
	e.checkInvariants(false)
	_ = parts
}

// Row: crash after publish, before mark sent. Everything runs to the end;
// then both sides' outbox rows are marked unsent, as a relay that
// published and crashed before marking leaves them, and processes restart:
// every command and reply is published again and the inboxes drop the
// copies (no effect, no transition).
func TestWindowCrashAfterPublishBeforeMark(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{orders: orders, seed: 12})
	ctx := testkit.Context(t, 2*time.Minute)
	o, p := e.runAll()
	e.startAll(ctx)
	e.waitTerminal(settle)
	e.waitOutboxesDrained()
	o.stop(t)
	p.stop(t)
	before := e.checkInvariants(false)
	barrier := e.barrierRows()
	journal := e.count(`SELECT count(*) FROM ` + e.schemas.Orchestrator + `.journal`)
	var rows int
	for _, s := range e.allSchemas() {
		tag, err := e.check.Exec(ctx, `UPDATE `+s+`.outbox SET sent_at = NULL`)
		if err != nil {
			t.Fatal(err)
		}
		rows += int(tag.RowsAffected())
	}
	dups := e.metric("sagaflow_inbox_duplicates_total")
	e.runAll()
	e.waitOutboxesDrained()
	testkit.Eventually(t, settle, "every re-published record dropped as a duplicate", func() (bool, error) {
		return e.metric("sagaflow_inbox_duplicates_total")-dups >= float64(rows), nil
	})
	after := e.checkInvariants(false)
	if after.Completed != before.Completed || after.Compensated != before.Compensated {
		t.Fatalf("outcomes changed by re-publishing: before %+v after %+v", before, after)
	}
	if got := e.barrierRows(); got != barrier {
		t.Fatalf("barrier rows %d after re-publish, %d before: a command executed twice", got, barrier)
	}
	if got := e.count(`SELECT count(*) FROM ` + e.schemas.Orchestrator + `.journal`); got != journal {
		t.Fatalf("journal grew from %d to %d on re-published replies", journal, got)
	}
}

func (e *env) barrierRows() int {
	n := 0
	for _, s := range e.allSchemas()[1:] {
		n += e.count(`SELECT count(*) FROM ` + s + `.barrier`)
	}
	return n
}

// Row: participant crash after its commit, before its reply is published.
// The participants run without their reply relays: commands execute and the
// replies stay in their outboxes; then they stop (crash) and restart in
// full: the replies are sent and the sagas finish, each command executed
// once.
func TestWindowParticipantCrashBeforeReplyPublished(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{orders: orders, seed: 13})
	ctx := testkit.Context(t, 2*time.Minute)
	e.run("orchestrator", e.service(orchestrator.DefaultRun).Run)
	set := e.participants()
	half := e.run("participants without relay", e.inboxOnly(set, testkit.PoolURL(t, e.url)))
	e.startAll(ctx)
	testkit.Eventually(t, settle, "first step executed for every order, replies unsent", func() (bool, error) {
		return e.count(`SELECT count(*) FROM `+e.schemas.Inventory+`.barrier`) == orders, nil
	})
	if n := e.count(`SELECT count(*) FROM ` + e.schemas.Inventory + `.outbox WHERE sent_at IS NULL`); n != orders {
		t.Fatalf("%d unsent replies, want %d", n, orders)
	}
	half.stop(t) // crash before the replies are published
	if n := e.count(`SELECT count(*) FROM ` + e.schemas.Orchestrator + `.sagas WHERE current_step <> $1 OR state <> 'running'`, orderapi.StepReserveInventory); n != 0 {
		t.Fatalf("%d sagas moved without a reply", n)
	}
	e.run("participants restarted", e.participants().Run)
	e.waitTerminal(settle)
	e.checkInvariants(false)
}

// Row: reply consumed twice / offset commit lost. After every saga ends,
// every reply ever produced is produced again: the orchestrator's inbox
// drops each copy and no saga changes.
func TestWindowReplyConsumedTwice(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{orders: orders, seed: 14})
	ctx := testkit.Context(t, 2*time.Minute)
	e.runAll()
	e.startAll(ctx)
	e.waitTerminal(settle)
	e.checkInvariants(false)
	journal := e.count(`SELECT count(*) FROM ` + e.schemas.Orchestrator + `.journal`)
	versions := e.count(`SELECT coalesce(sum(version), 0)::int FROM ` + e.schemas.Orchestrator + `.sagas`)
	replies := e.readAll(e.replies, orders)
	dups := e.metric("sagaflow_inbox_duplicates_total")
	e.produce(e.replies, replies...)
	testkit.Eventually(t, settle, "every replayed reply dropped as a duplicate", func() (bool, error) {
		return e.metric("sagaflow_inbox_duplicates_total")-dups >= float64(len(replies)), nil
	})
	e.checkInvariants(false)
	if got := e.count(`SELECT count(*) FROM ` + e.schemas.Orchestrator + `.journal`); got != journal {
		t.Fatalf("journal grew from %d to %d on %d duplicate replies", journal, got, len(replies))
	}
	if got := e.count(`SELECT coalesce(sum(version), 0)::int FROM ` + e.schemas.Orchestrator + `.sagas`); got != versions {
		t.Fatalf("saga versions moved (%d -> %d) on duplicate replies", versions, got)
	}
}

// Row: two starts with the same idempotency key. Many goroutines on two
// engines (two pools) start the same order at once: one saga exists, every
// caller gets its id, exactly one was told it created it.
func TestWindowTwoStartsSameKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{orders: 1, seed: 15})
	ctx := testkit.Context(t, time.Minute)
	engines := []*saga.Engine{e.engine, e.service(orchestrator.DefaultRun).Engine()}
	o := e.plan.Orders[0]
	const n = 16
	var wg sync.WaitGroup
	ids := make([]uuid.UUID, n)
	created := make([]bool, n)
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			in, c, err := engines[i%2].Start(ctx, saga.StartRequest{Type: orderapi.SagaType, IdempotencyKey: o.OrderID, AggregateID: o.OrderID, Data: o})
			ids[i], created[i], errs[i] = in.ID, c, err
		}()
	}
	close(start)
	wg.Wait()
	nCreated := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("start %d: %v", i, errs[i])
		}
		if ids[i] != ids[0] {
			t.Fatalf("start %d got saga %s, start 0 got %s", i, ids[i], ids[0])
		}
		if created[i] {
			nCreated++
		}
	}
	if nCreated != 1 {
		t.Fatalf("%d callers were told they created the saga, want 1", nCreated)
	}
	if got := e.count(`SELECT count(*) FROM ` + e.schemas.Orchestrator + `.sagas`); got != 1 {
		t.Fatalf("%d sagas for one idempotency key", got)
	}
	if got := e.count(`SELECT count(*) FROM ` + e.schemas.Orchestrator + `.outbox`); got != 1 {
		t.Fatalf("%d first commands enqueued for one saga, want 1", got)
	}
	e.runAll()
	e.waitTerminal(settle)
	e.checkInvariants(false)
}

// silence unused imports until the remaining tests use them.
var _ = json.Marshal
var _ = message.ErrInvalid
var _ kafka.Message
var _ = context.Background
