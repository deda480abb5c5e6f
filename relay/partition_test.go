package relay_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/relay"
)

// The relay puts each key on the partition the Java client's default
// partitioner would choose, toPositive(murmur2(key)) % partitions, so
// records keyed alike by a participant in another language share it.
// The expected partitions (over the fixture's 4) were computed with a
// separate port of Kafka's Utils.murmur2; kafka-go's FNV-1a Hash, the
// balancer before, puts five of these six elsewhere.
func TestRelayPartitionsKeysLikeTheJavaClient(t *testing.T) {
	t.Parallel()
	f := setup(t)
	c := consume(t, f.brokers, f.topic)
	want := map[string]int{
		"order-1001": 2, "order-1002": 0, "order-1003": 0, "order-1004": 3, "order-1005": 3,
		"37493426-4f04-4421-a1bd-4a50bf3111b6": 3,
	}
	r := f.newRelay(t, relay.Config{})
	start(t, r)
	for key := range want {
		f.enqueue(t, msg(f.topic, key, fmt.Sprintf(`{"key":%q}`, key)))
	}
	testkit.Eventually(t, 30*time.Second, "every keyed record on Kafka", func() (bool, error) { return c.count() >= len(want), nil })
	for _, m := range c.snapshot() {
		if p, ok := want[string(m.Key)]; !ok || p != m.Partition {
			t.Errorf("key %q on partition %d, want %d (the Java client's)", m.Key, m.Partition, p)
		}
	}
}
