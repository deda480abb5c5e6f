package outbox_test

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/inbox"
	"github.com/sagaflow/sagaflow/internal/outboxdb"
	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/migrations"
	"github.com/sagaflow/sagaflow/outbox"
)

// TestOutboxRefusesHeadersConsumersRefuse: a message whose headers are
// over message.MaxSendHeadersBytes as a whole, or not text, is refused by
// Enqueue (and by the batched and direct forms) with an error naming the
// bound, and no row is written; up to the bound it is stored.
func TestOutboxRefusesHeadersConsumersRefuse(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	pool := testkit.Pool(t)
	testkit.Migrate(t, pool, testkit.MustSets(t)(migrations.Orchestrator("orch")))
	o, err := outbox.New("orch")
	if err != nil {
		t.Fatal(err)
	}
	base := message.Headers([16]byte{1}, [16]byte{2})
	size := 0
	for k, v := range base {
		size += len(k) + len(v)
	}
	with := func(k, v string) map[string]string {
		h := map[string]string{}
		for a, b := range base {
			h[a] = b
		}
		h[k] = v
		return h
	}
	room := message.MaxSendHeadersBytes - size - len("traceparent")
	fits := with("traceparent", strings.Repeat("a", room))
	over := with("traceparent", strings.Repeat("a", room+1))
	poison := with("traceparent", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-"+strings.Repeat("x", 20<<10))
	notText := with("traceparent", "00-\xff\xfe")

	count := func() int {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM orch.outbox`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for name, h := range map[string]map[string]string{"over by one": over, "20 KiB traceparent": poison, "invalid UTF-8": notText} {
		msg := outbox.Message{Topic: "inventory.commands", Key: "k", Value: []byte(`{}`), Headers: h}
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return o.Enqueue(ctx, tx, msg) })
		if !errors.Is(err, message.ErrInvalid) || !strings.Contains(err.Error(), "inventory.commands") {
			t.Errorf("%s: Enqueue = %v; want an ErrInvalid naming the topic", name, err)
		}
		if name != "invalid UTF-8" && !strings.Contains(err.Error(), "more than the 16384 a consumer accepts") {
			t.Errorf("%s: Enqueue error %q does not name the bound", name, err)
		}
		b := &pgx.Batch{}
		if err := outboxdb.For("orch").QueueEnqueue(b, msg); !errors.Is(err, message.ErrInvalid) {
			t.Errorf("%s: QueueEnqueue = %v; want ErrInvalid", name, err)
		}
		if _, err := outboxdb.For("orch").QueueEnqueueDirect(b, time.Second, msg); !errors.Is(err, message.ErrInvalid) {
			t.Errorf("%s: QueueEnqueueDirect = %v; want ErrInvalid", name, err)
		}
		if b.Len() != 0 {
			t.Errorf("%s: %d statements queued for a refused message", name, b.Len())
		}
	}
	if n := count(); n != 0 {
		t.Fatalf("%d rows written for refused messages", n)
	}
	msg := outbox.Message{Topic: "inventory.commands", Key: "k", Value: []byte(`{}`), Headers: fits}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return o.Enqueue(ctx, tx, msg) }); err != nil {
		t.Fatalf("headers of exactly %d bytes: %v", message.MaxSendHeadersBytes, err)
	}
	if n := count(); n != 1 {
		t.Fatalf("%d rows, want the one within the bound", n)
	}
}

// TestWhatTheOutboxTakesAConsumerTakes: for random header maps, every one
// the outbox's bound accepts passes the check a Go inbox consumer (a
// participant, the orchestrator's reply consumer) runs on a record with its
// default limits: no saga or participant can store a record its consumers
// must refuse for its headers.
func TestWhatTheOutboxTakesAConsumerTakes(t *testing.T) {
	t.Parallel()
	if message.MaxSendHeadersBytes > inbox.MaxHeaderBytesDefault || message.MaxSendHeadersBytes > message.MaxHeadersBytesDefault {
		t.Fatalf("MaxSendHeadersBytes %d is over a consumer's default (inbox %d, message %d)", message.MaxSendHeadersBytes, inbox.MaxHeaderBytesDefault, message.MaxHeadersBytesDefault)
	}
	rng := rand.New(rand.NewPCG(27, 2))
	keys := []string{message.HeaderMessageID, message.HeaderSagaID, message.HeaderContentType, "traceparent", "tracestate", "x-sig", "dlq-reason"}
	accepted, refused := 0, 0
	for range 3000 {
		h := map[string]string{}
		for range 1 + rng.IntN(5) {
			n := []int{0, 10, 1000, 1025, 4000, 9000, 16384}[rng.IntN(7)]
			v := []byte(strings.Repeat("v", n))
			if n > 0 && rng.IntN(8) == 0 {
				v[rng.IntN(n)] = 0xff
			}
			h[keys[rng.IntN(len(keys))]] = string(v)
		}
		if err := message.CheckHeaderMap(h, message.HeaderLimits{MaxTotalBytes: message.MaxSendHeadersBytes}); err != nil {
			refused++
			continue
		}
		accepted++
		var hs []message.Header
		for k, v := range h {
			hs = append(hs, message.Header{Key: k, Value: []byte(v)})
		}
		if err := message.CheckRecordHeadersLimits(hs, message.HeaderLimits{MaxTotalBytes: inbox.MaxHeaderBytesDefault}); err != nil {
			t.Fatalf("headers the outbox takes, a consumer refuses: %v", err)
		}
	}
	if accepted < 100 || refused < 100 {
		t.Fatalf("accepted %d, refused %d: the sample tests too little", accepted, refused)
	}
}
