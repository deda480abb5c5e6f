package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/inbox"
	"github.com/sagaflow/sagaflow/internal/kafkaclient"
	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/message"
)

// dlq creates the dead-letter topic of e (optionally with a small
// max.message.bytes) and returns a function reading n records from it.
func (e *env) dlq(t *testing.T, maxMessageBytes int) func(n int) []kafka.Message {
	t.Helper()
	topic := e.topic + inbox.DLQSuffixDefault
	ctx := testkit.Context(t, wait)
	if maxMessageBytes > 0 {
		cl := &kafka.Client{Addr: kafka.TCP(e.brokers...)}
		res, err := cl.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{
			Topic: topic, NumPartitions: 1, ReplicationFactor: 1,
			ConfigEntries: []kafka.ConfigEntry{{ConfigName: "max.message.bytes", ConfigValue: strconv.Itoa(maxMessageBytes)}},
		}}})
		if err != nil {
			t.Fatalf("create %s: %v", topic, err)
		}
		if err := res.Errors[topic]; err != nil {
			t.Fatalf("create %s: %v", topic, err)
		}
	} else if err := kafkaclient.EnsureTopics(ctx, e.brokers, 1, 1, topic); err != nil {
		t.Fatal(err)
	}
	return func(n int) []kafka.Message {
		t.Helper()
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: e.brokers, Topic: topic, Partition: 0, MaxWait: 50 * time.Millisecond, MaxBytes: 4 << 20})
		defer r.Close()
		ctx := testkit.Context(t, wait)
		out := make([]kafka.Message, 0, n)
		for range n {
			d, err := r.ReadMessage(ctx)
			if err != nil {
				t.Fatalf("read dead-letter record %d of %d: %v", len(out)+1, n, err)
			}
			out = append(out, d)
		}
		return out
	}
}

// storeBody writes the record's value into a text column: Postgres refuses
// a NUL (22021) or invalid UTF-8 (22021) there, which no decode step of this
// handler foresaw.
func storeBody(ctx context.Context, tx pgx.Tx, ms []message.Record) ([]inbox.Result, error) {
	for _, m := range ms {
		id, err := uuid.Parse(rheader(m, message.HeaderMessageID))
		if err != nil {
			return nil, inbox.Permanent(err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO effects (message_id, body) VALUES ($1, $2)`, id, string(m.Value)); err != nil {
			return nil, err
		}
	}
	return make([]inbox.Result, len(ms)), nil
}

// A value Postgres refuses for a reason the handler did not foresee (a NUL,
// invalid UTF-8) fails the batch with SQLSTATE class 22: the inbox splits
// the batch until the offender stands alone, dead-letters it with
// Postgres's error, and applies every other message in the same
// transaction; nothing is retried.
func TestPostgresRefusalIsDeadLetteredAndTheRestApplied(t *testing.T) {
	t.Parallel()
	e := setup(t, 1)
	read := e.dlq(t, 0)
	m := newMetrics(t)
	c, err := inbox.New(e.pool, storeBody, e.config(m))
	if err != nil {
		t.Fatal(err)
	}
	run(t, c)
	var good []uuid.UUID
	var msgs []kafka.Message
	bad := map[int]string{3: "nul\x00inside", 11: "bad utf-8 \xff\xfe"}
	for i := range 16 {
		id := uuid.New()
		body, isBad := bad[i]
		if !isBad {
			body = "ok" + strconv.Itoa(i)
			good = append(good, id)
		}
		msgs = append(msgs, record(id, body))
	}
	e.produce(t, msgs...)
	waitCounter(t, m.DeadLettered("test"), 2, "both refused messages dead-lettered")
	waitCounter(t, m.Messages("test"), float64(len(good)), "every other message applied")
	effectsOncePerID(t, e.pool, good)
	if got := testutil.ToFloat64(m.HandleErrors("test")); got != 0 {
		t.Fatalf("handle_errors_total = %v, want 0 (a data error is isolated in the same transaction)", got)
	}
	for _, d := range read(2) {
		reason := header(d, message.HeaderDLQReason)
		if !strings.Contains(reason, "SQLSTATE 22") {
			t.Errorf("dead letter %q: reason %q, want Postgres's data error", d.Value, reason)
		}
	}
}

// A message whose handler keeps failing with a transient error is retried
// IsolateAfter times, then isolated and dead-lettered with its last error;
// the messages around it are applied. A database that is unavailable never
// dead-letters anything.
func TestMessageThatKeepsFailingIsIsolatedAfterAttempts(t *testing.T) {
	t.Parallel()
	e := setup(t, 1)
	read := e.dlq(t, 0)
	m := newMetrics(t)
	var calls atomic.Int32
	h := func(ctx context.Context, tx pgx.Tx, ms []message.Record) ([]inbox.Result, error) {
		for _, msg := range ms {
			if string(msg.Value) == "stuck" {
				calls.Add(1)
				return nil, errors.New("lock not available for this one")
			}
		}
		return storeBody(ctx, tx, ms)
	}
	cfg := e.config(m)
	cfg.IsolateAfter = 2
	c, err := inbox.New(e.pool, h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	run(t, c)
	good := []uuid.UUID{uuid.New(), uuid.New(), uuid.New()}
	e.produce(t, record(good[0], "a"), record(good[1], "b"), record(uuid.New(), "stuck"), record(good[2], "c"))
	waitCounter(t, m.DeadLettered("test"), 1, "the stuck message dead-lettered")
	waitCounter(t, m.Messages("test"), 3, "the others applied")
	effectsOncePerID(t, e.pool, good)
	d := read(1)[0]
	if reason := header(d, message.HeaderDLQReason); string(d.Value) != "stuck" || !strings.Contains(reason, "kept failing") || !strings.Contains(reason, "lock not available") {
		t.Fatalf("dead letter %q with reason %q, want the stuck message with its last error", d.Value, reason)
	}
	if got := testutil.ToFloat64(m.HandleErrors("test")); got != 2 {
		t.Fatalf("handle_errors_total = %v, want 2 (IsolateAfter attempts, then isolation)", got)
	}
}

func TestRetryLaterResultRetriesThenIsolates(t *testing.T) {
	t.Parallel()
	e := setup(t, 1)
	read := e.dlq(t, 0)
	m := newMetrics(t)
	var mu sync.Mutex
	tries := map[string]int{}
	h := func(ctx context.Context, tx pgx.Tx, ms []message.Record) ([]inbox.Result, error) {
		out, err := storeBody(ctx, tx, ms)
		if err != nil {
			return nil, err
		}
		mu.Lock()
		defer mu.Unlock()
		for i, msg := range ms {
			tries[string(msg.Value)]++
			switch {
			case string(msg.Value) == "later" && tries["later"] <= 2:
				out[i] = inbox.Result{Outcome: inbox.RetryLater, Reason: "not yet"}
			case string(msg.Value) == "never":
				out[i] = inbox.Result{Outcome: inbox.RetryLater, Reason: "the stock service is gone"}
			}
		}
		return out, nil
	}
	cfg := e.config(m)
	cfg.IsolateAfter = 3
	c, err := inbox.New(e.pool, h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	run(t, c)
	later := uuid.New()
	e.produce(t, record(later, "later"))
	waitCounter(t, m.Messages("test"), 1, "the message applied once it could be")
	effectsOncePerID(t, e.pool, []uuid.UUID{later})
	e.produce(t, record(uuid.New(), "never"))
	waitCounter(t, m.DeadLettered("test"), 1, "the message that can never be handled dead-lettered")
	if reason := header(read(1)[0], message.HeaderDLQReason); !strings.Contains(reason, "the stock service is gone") {
		t.Fatalf("dead-letter reason %q, want the handler's last reason", reason)
	}
}

// Oversize headers and values, and NUL or invalid UTF-8 in the envelope's
// headers, are dead-lettered before the handler sees them; the dead letter
// of a 700 KB header fits (the copied header is cut), and one the broker
// still refuses (a dead-letter topic whose max.message.bytes is small) is
// replaced by a shortened record that keeps the coordinates and the reason.
// Good messages on the same partition are applied; nothing is retried.
func TestBadHeadersAndUnwritableDeadLettersNeverStall(t *testing.T) {
	t.Parallel()
	e := setup(t, 1)
	read := e.dlq(t, 40_000)
	m := newMetrics(t)
	var seen sync.Map
	h := func(ctx context.Context, tx pgx.Tx, ms []message.Record) ([]inbox.Result, error) {
		out := make([]inbox.Result, len(ms))
		for i, msg := range ms {
			seen.Store(string(msg.Key), true)
			if strings.HasPrefix(string(msg.Key), "refuse") {
				out[i] = inbox.Result{Outcome: inbox.DeadLetter, Reason: "refused by the handler: " + strings.Repeat("é", 5000)}
				continue
			}
			if _, err := storeBody(ctx, tx, []message.Record{{Headers: msg.Headers, Value: []byte("ok")}}); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	w := &kafka.Writer{Addr: kafka.TCP(e.brokers...), Topic: e.topic, BatchTimeout: time.Millisecond, BatchBytes: 4 << 20}
	t.Cleanup(func() { _ = w.Close() })
	c, err := inbox.New(e.pool, h, e.config(m))
	if err != nil {
		t.Fatal(err)
	}
	run(t, c)
	withHeader := func(key string, hs ...kafka.Header) kafka.Message {
		return kafka.Message{Key: []byte(key), Value: []byte(key), Headers: append([]kafka.Header{{Key: message.HeaderMessageID, Value: []byte(uuid.NewString())}}, hs...)}
	}
	good := []kafka.Message{withHeader("good0"), withHeader("good1"), withHeader("good2")}
	bigValue := withHeader("refuse-big-value")
	bigValue.Value = []byte(strings.Repeat("v", 100_000))
	msgs := []kafka.Message{
		good[0],
		withHeader("big-header", kafka.Header{Key: message.HeaderSagaID, Value: []byte(strings.Repeat("x", 700_000))}),
		withHeader("many-headers", kafka.Header{Key: "trace", Value: []byte(strings.Repeat("t", 20_000))}),
		withHeader("nul-header", kafka.Header{Key: message.HeaderSagaID, Value: []byte("abc\x00def")}),
		withHeader("utf8-header", kafka.Header{Key: message.HeaderContentType, Value: []byte("application/\xffjson")}),
		withHeader("nul-key", kafka.Header{Key: "tr\x00ce", Value: []byte("1")}),
		withHeader("two-ids", kafka.Header{Key: message.HeaderMessageID, Value: []byte(uuid.NewString())}),
		good[1],
		bigValue,
		good[2],
	}
	if err := w.WriteMessages(testkit.Context(t, wait), msgs...); err != nil {
		t.Fatalf("produce: %v", err)
	}
	waitCounter(t, m.Messages("test"), 3, "the good messages applied")
	waitCounter(t, m.DeadLettered("test"), 7, "seven dead letters")
	for _, k := range []string{"big-header", "many-headers", "nul-header", "utf8-header", "nul-key", "two-ids"} {
		if _, ok := seen.Load(k); ok {
			t.Errorf("the handler saw %q; its headers should have dead-lettered it first", k)
		}
	}
	wantReason := map[string]string{
		"big-header":       `bytes`,
		"two-ids":          "more than once",
		"many-headers":     "headers are 20",
		"nul-header":       "NUL",
		"utf8-header":      "UTF-8",
		"nul-key":          "NUL",
		"refuse-big-value": "refused by the handler",
	}
	for _, d := range read(7) {
		key := string(d.Key)
		reason := header(d, message.HeaderDLQReason)
		if !strings.Contains(reason, wantReason[key]) {
			t.Errorf("dead letter %q: reason %q, want it to contain %q", key, reason, wantReason[key])
		}
		if len(reason) > inbox.MaxReasonBytes {
			t.Errorf("dead letter %q: reason of %d bytes, want at most %d", key, len(reason), inbox.MaxReasonBytes)
		}
		if got := header(d, message.HeaderDLQOffset); got == "" {
			t.Errorf("dead letter %q has no original offset", key)
		}
		for _, h := range d.Headers {
			if len(h.Value) > inbox.MaxDeadHeaderBytes {
				t.Errorf("dead letter %q copies header %q of %d bytes, want at most %d", key, h.Key, len(h.Value), inbox.MaxDeadHeaderBytes)
			}
		}
		if key == "refuse-big-value" {
			if header(d, inbox.HeaderDLQShortened) != "true" || len(d.Value) != inbox.DeadLetterValueBytesDefault {
				t.Errorf("dead letter of the 100 KB value: shortened=%q, %d value bytes; want a shortened record with the first %d bytes",
					header(d, inbox.HeaderDLQShortened), len(d.Value), inbox.DeadLetterValueBytesDefault)
			}
		}
	}
	if got := testutil.ToFloat64(m.HandleErrors("test")); got != 0 {
		t.Fatalf("handle_errors_total = %v, want 0: a refused dead letter is shortened, never retried", got)
	}
}

// A thousand bad records on one key (one partition) while other partitions'
// messages flow: the good messages are all applied within bounded time
// while the bad ones are still being dead-lettered, and all thousand end in
// the dead-letter topic.
func TestThousandBadRecordsOnOneKeyDoNotHoldUpOtherPartitions(t *testing.T) {
	t.Parallel()
	e := setup(t, 4)
	read := e.dlq(t, 0)
	m := newMetrics(t)
	cfg := e.config(m)
	cfg.Lanes = 2
	cfg.BatchSize = 50
	c, err := inbox.New(e.pool, storeBody, cfg)
	if err != nil {
		t.Fatal(err)
	}
	run(t, c)
	var bad []kafka.Message
	for i := range 1000 {
		bad = append(bad, kafka.Message{Key: []byte("the-bad-key"), Value: []byte("bad\x00" + strconv.Itoa(i)),
			Headers: []kafka.Header{{Key: message.HeaderMessageID, Value: []byte(uuid.NewString())}}})
	}
	e.produce(t, bad...)
	var good []uuid.UUID
	var msgs []kafka.Message
	for i := range 200 {
		id := uuid.New()
		key := fmt.Sprintf("good-%d", i)
		if keyPartition(key, 4) == keyPartition("the-bad-key", 4) {
			continue
		}
		good = append(good, id)
		msgs = append(msgs, kafka.Message{Key: []byte(key), Value: []byte(key), Headers: []kafka.Header{{Key: message.HeaderMessageID, Value: []byte(id.String())}}})
	}
	e.produce(t, msgs...)
	start := time.Now()
	testkit.Eventually(t, wait, "every good message applied", func() (bool, error) {
		return count(t, e.pool, `SELECT count(*) FROM effects WHERE message_id = ANY($1)`, good) == len(good), nil
	})
	t.Logf("%d good messages applied %s after they were produced; %v of 1000 bad dead-lettered by then",
		len(good), time.Since(start).Round(time.Millisecond), testutil.ToFloat64(m.DeadLettered("test")))
	waitCounter(t, m.DeadLettered("test"), 1000, "all thousand bad records dead-lettered")
	if got := len(read(1000)); got != 1000 {
		t.Fatalf("%d dead letters, want 1000", got)
	}
	effectsOncePerID(t, e.pool, good)
}

// keyPartition is the partition the writers' balancer picks for key.
func keyPartition(key string, n int) int {
	parts := make([]int, n)
	for i := range parts {
		parts[i] = i
	}
	return kafkaclient.Balancer().Balance(kafka.Message{Key: []byte(key)}, parts...)
}

// A lane stuck on a batch (its handler blocks) pauses its own partitions
// once their queues are full, and the other lane's partitions go on.
func TestFullLanePausesItsPartitionNotTheOthers(t *testing.T) {
	t.Parallel()
	e := setup(t, 2)
	m := newMetrics(t)
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	h := func(ctx context.Context, tx pgx.Tx, ms []message.Record) ([]inbox.Result, error) {
		for _, msg := range ms {
			if strings.HasPrefix(string(msg.Value), "slow") {
				<-release
			}
		}
		return storeBody(ctx, tx, ms)
	}
	cfg := e.config(m)
	cfg.Lanes = 2
	cfg.BatchSize = 5
	cfg.QueueMessages = 10
	c, err := inbox.New(e.pool, h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	run(t, c)
	// Find a key for each partition, and check that they fall in different
	// lanes (the lane is a hash of topic and partition).
	slowKey, fastKey := "", ""
	for i := 0; slowKey == "" || fastKey == ""; i++ {
		k := "k" + strconv.Itoa(i)
		if keyPartition(k, 2) == 0 && slowKey == "" {
			slowKey = k
		} else if keyPartition(k, 2) == 1 && fastKey == "" {
			fastKey = k
		}
	}
	if inbox.LaneOf(e.topic, 0, 2) == inbox.LaneOf(e.topic, 1, 2) {
		t.Fatalf("partitions 0 and 1 of %s share a lane of 2; laneOf must put neighbours apart", e.topic)
	}
	var slow []kafka.Message
	for i := range 100 {
		slow = append(slow, kafka.Message{Key: []byte(slowKey), Value: []byte("slow" + strconv.Itoa(i)), Headers: []kafka.Header{{Key: message.HeaderMessageID, Value: []byte(uuid.NewString())}}})
	}
	e.produce(t, slow...)
	testkit.Eventually(t, wait, "the slow partition paused", func() (bool, error) {
		return testutil.ToFloat64(m.PartitionPauses("test")) >= 1, nil
	})
	var fast []uuid.UUID
	for i := range 50 {
		id := uuid.New()
		fast = append(fast, id)
		e.produce(t, kafka.Message{Key: []byte(fastKey), Value: []byte("fast" + strconv.Itoa(i)), Headers: []kafka.Header{{Key: message.HeaderMessageID, Value: []byte(id.String())}}})
	}
	testkit.Eventually(t, wait, "the other partition's messages applied while the slow one is stuck", func() (bool, error) {
		return count(t, e.pool, `SELECT count(*) FROM effects WHERE message_id = ANY($1)`, fast) == len(fast), nil
	})
	once.Do(func() { close(release) })
	waitCounter(t, m.Messages("test"), 150, "everything applied once released")
}

func TestClassify(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want inbox.Class
	}{
		{inbox.Permanent(errors.New("x")), inbox.ClassPermanent},
		{fmt.Errorf("decode: %w", message.ErrInvalid), inbox.ClassPermanent},
		{&pgconn.PgError{Code: "22P05"}, inbox.ClassPermanent},
		{&pgconn.PgError{Code: "22021"}, inbox.ClassPermanent},
		{fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: "23505"}), inbox.ClassPermanent},
		{&pgconn.PgError{Code: "54000"}, inbox.ClassPermanent},
		{&pgconn.PgError{Code: "40001"}, inbox.ClassTransient},
		{&pgconn.PgError{Code: "40P01"}, inbox.ClassTransient},
		{&pgconn.PgError{Code: "55P03"}, inbox.ClassTransient},
		{&pgconn.PgError{Code: "08006"}, inbox.ClassUnavailable},
		{&pgconn.PgError{Code: "57P01"}, inbox.ClassUnavailable},
		{&pgconn.PgError{Code: "53300"}, inbox.ClassUnavailable},
		{context.DeadlineExceeded, inbox.ClassUnavailable},
		{fmt.Errorf("x: %w", pgconn.ErrConnClosed), inbox.ClassUnavailable},
		{errors.New("something else"), inbox.ClassTransient},
	} {
		if got := inbox.Classify(tc.err); got != tc.want {
			t.Errorf("Classify(%v) = %s, want %s", tc.err, got, tc.want)
		}
	}
}

func TestCleanTextIsBoundedValidTextWithoutNUL(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "plain", "nul\x00x", "bad\xff\xfe", strings.Repeat("é", 3000), strings.Repeat("a", 5000) + "\x00"} {
		got := inbox.CleanText(s, 100)
		if len(got) > 100 || strings.ContainsRune(got, 0) || !utf8.ValidString(got) {
			t.Errorf("CleanText(%.20q) = %q: want at most 100 bytes of valid UTF-8 without NUL", s, got)
		}
		if len(s) <= 100 && !strings.Contains(s, "\x00") && utf8.ValidString(s) && got != s {
			t.Errorf("CleanText(%q) = %q, want it unchanged", s, got)
		}
	}
}
