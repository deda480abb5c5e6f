package relay

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/internal/kafkaclient"
	"github.com/sagaflow/sagaflow/internal/testkit"
)

// readAll reads n messages from every partition of topic (parts of them)
// and returns, per key, the partitions its messages were found on and the
// values in the order of their partition.
func readAll(t *testing.T, brokers []string, topic string, parts, n int) (map[string]map[int]bool, map[string][]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var mu sync.Mutex
	where, order := map[string]map[int]bool{}, map[string][]string{}
	got := 0
	var wg sync.WaitGroup
	for p := range parts {
		rd := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: topic, Partition: p, MaxWait: 250 * time.Millisecond, MinBytes: 1, MaxBytes: 10 << 20})
		wg.Go(func() {
			defer rd.Close()
			for {
				m, err := rd.ReadMessage(ctx)
				if err != nil {
					return
				}
				mu.Lock()
				k := string(m.Key)
				if where[k] == nil {
					where[k] = map[int]bool{}
				}
				where[k][m.Partition] = true
				order[k] = append(order[k], string(m.Value))
				got++
				done := got >= n
				mu.Unlock()
				if done {
					cancel()
				}
			}
		})
	}
	wg.Wait()
	if got < n {
		t.Fatalf("read %d of %d messages from %s", got, n, topic)
	}
	return where, order
}

// The relay's producer puts every key on the partition a kafka-go Writer
// with the shared balancer puts it on (so a key lands on one partition
// whichever Go client of sagaflow publishes it), and keeps the order of a
// key's messages, in calls that span several partitions and topics.
func TestDirectPartitionsAsAWriter(t *testing.T) {
	t.Parallel()
	brokers := testkit.Brokers(t)
	const parts = 5
	topicA, topicB := testkit.Topic(t, brokers, "direct-a", parts), testkit.Topic(t, brokers, "direct-b", parts)
	cfg := Config{Brokers: brokers}.WithDefaults()
	p := newDirect(cfg, "test-direct")
	defer p.close()
	ctx := testkit.Context(t, 30*time.Second)
	const keys, rounds = 40, 3
	for r := range rounds {
		var msgs []kafka.Message
		for k := range keys {
			for _, topic := range []string{topicA, topicB} {
				msgs = append(msgs, kafka.Message{Topic: topic, Key: fmt.Appendf(nil, "key-%d", k), Value: fmt.Appendf(nil, "%d", r)})
			}
		}
		if errs := p.write(ctx, msgs); errs != nil {
			t.Fatalf("round %d: %v", r, errs)
		}
	}
	tr := kafkaclient.Transport(nil, "test-writer")
	defer tr.CloseIdleConnections()
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Balancer: kafkaclient.Balancer(), Transport: tr, BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
	defer func() { _ = w.Close() }()
	topicW := testkit.Topic(t, brokers, "direct-w", parts)
	var wm []kafka.Message
	for k := range keys {
		wm = append(wm, kafka.Message{Topic: topicW, Key: fmt.Appendf(nil, "key-%d", k), Value: []byte("w")})
	}
	if err := w.WriteMessages(ctx, wm...); err != nil {
		t.Fatal(err)
	}
	whereW, _ := readAll(t, brokers, topicW, parts, keys)
	for _, topic := range []string{topicA, topicB} {
		where, order := readAll(t, brokers, topic, parts, keys*rounds)
		spread := map[int]bool{}
		for k := range keys {
			key := fmt.Sprintf("key-%d", k)
			if len(where[key]) != 1 {
				t.Fatalf("%s: %s on partitions %v, want one", topic, key, where[key])
			}
			for part := range where[key] {
				spread[part] = true
				if !whereW[key][part] {
					t.Fatalf("%s: %s on partition %d, the Writer put it on %v", topic, key, part, whereW[key])
				}
			}
			if got := fmt.Sprint(order[key]); got != "[0 1 2]" {
				t.Fatalf("%s: %s arrived as %s, want [0 1 2]", topic, key, got)
			}
		}
		if len(spread) < 3 {
			t.Fatalf("%s: %d keys on only %d partitions", topic, keys, len(spread))
		}
	}
}

// A connection the broker (or the network) closed is replaced on the next
// write, which succeeds; a topic that does not exist is an error, and the
// producer does not create it by asking.
func TestDirectReconnectsAndNeverCreatesTopics(t *testing.T) {
	t.Parallel()
	brokers := testkit.Brokers(t)
	topic := testkit.Topic(t, brokers, "direct-re", 1)
	cfg := Config{Brokers: brokers, WriteTimeout: 5 * time.Second}.WithDefaults()
	p := newDirect(cfg, "test-direct")
	defer p.close()
	ctx := testkit.Context(t, 30*time.Second)
	for i := range 3 {
		if errs := p.write(ctx, []kafka.Message{{Topic: topic, Key: []byte("k"), Value: fmt.Appendf(nil, "%d", i)}}); errs != nil {
			t.Fatalf("write %d: %v", i, errs)
		}
		// Close the connection under the producer, as an idle broker
		// connection is closed.
		for _, c := range p.conns {
			_ = c.Close()
		}
	}
	_, order := readAll(t, brokers, topic, 1, 3)
	if got := fmt.Sprint(order["k"]); got != "[0 1 2]" {
		t.Fatalf("read %s, want [0 1 2]", got)
	}

	missing := "direct-missing-" + testkit.RandomSuffix(6)
	errs := p.write(ctx, []kafka.Message{{Topic: missing, Key: []byte("k"), Value: []byte("v")}})
	if len(errs) != 1 || errs[0] == nil {
		t.Fatalf("write to the missing topic %s succeeded", missing)
	}
	tr := kafkaclient.Transport(nil, "test")
	defer tr.CloseIdleConnections()
	cl := &kafka.Client{Addr: kafka.TCP(brokers...), Transport: tr}
	res, merr := cl.Metadata(ctx, &kafka.MetadataRequest{})
	if merr != nil {
		t.Fatal(merr)
	}
	var names []string
	for _, tp := range res.Topics {
		names = append(names, tp.Name)
	}
	sort.Strings(names)
	for _, n := range names {
		if n == missing {
			t.Fatalf("the producer created %s (topics: %v); it must never ask for a topic to be created", missing, names)
		}
	}
}

// A message set larger than one request may carry goes out in several, in
// order.
func TestDirectSplitsLargeWrites(t *testing.T) {
	t.Parallel()
	brokers := testkit.Brokers(t)
	topic := testkit.Topic(t, brokers, "direct-big", 1)
	cfg := Config{Brokers: brokers}.WithDefaults()
	p := newDirect(cfg, "test-direct")
	defer p.close()
	ctx := testkit.Context(t, 30*time.Second)
	big := make([]byte, 300<<10)
	var msgs []kafka.Message
	const n = 8 // 2.4 MiB in all: at least three requests
	for i := range n {
		v := append(fmt.Appendf(nil, "%d:", i), big...)
		msgs = append(msgs, kafka.Message{Topic: topic, Key: []byte("k"), Value: v})
	}
	if errs := p.write(ctx, msgs); errs != nil {
		t.Fatal(errs)
	}
	_, order := readAll(t, brokers, topic, 1, n)
	for i, v := range order["k"] {
		if want := fmt.Sprintf("%d:", i); v[:len(want)] != want {
			t.Fatalf("message %d starts %q, want %q", i, v[:4], want)
		}
	}
}
