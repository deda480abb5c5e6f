package kafkaclient_test

import (
	"fmt"
	"testing"

	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/internal/kafkaclient"
)

// javaMurmur2 is Kafka's Utils.murmur2 written the way Java computes it:
// signed 32-bit ints with wrapping multiplication and >>> as an unsigned
// shift. It is the test's own reference, independent of kafka-go's port.
func javaMurmur2(data []byte) int32 {
	const seed = int32(-1756908916) // 0x9747b28c
	const m = int32(0x5bd1e995)
	const r = 24
	ushr := func(x int32, n uint) int32 { return int32(uint32(x) >> n) }
	length := len(data)
	h := seed ^ int32(length)
	for i := 0; i+4 <= length; i += 4 {
		k := int32(data[i]) | int32(data[i+1])<<8 | int32(data[i+2])<<16 | int32(data[i+3])<<24
		k *= m
		k ^= ushr(k, r)
		k *= m
		h *= m
		h ^= k
	}
	tail := data[length&^3:]
	switch len(tail) {
	case 3:
		h ^= int32(tail[2]) << 16
		fallthrough
	case 2:
		h ^= int32(tail[1]) << 8
		fallthrough
	case 1:
		h ^= int32(tail[0])
		h *= m
	}
	h ^= ushr(h, 13)
	h *= m
	h ^= ushr(h, 15)
	return h
}

// javaPartition is the Java producer's default choice for a keyed record:
// Utils.toPositive(Utils.murmur2(keyBytes)) % numPartitions.
func javaPartition(key string, partitions int) int {
	return int(javaMurmur2([]byte(key))&0x7fffffff) % partitions
}

func TestJavaMurmur2ReferenceMatchesPublishedValues(t *testing.T) {
	t.Parallel()
	// Hashes of Kafka's Utils.murmur2 as published in other projects' tests
	// (Akka's Murmur2Spec quotes them from the Java client).
	for key, want := range map[string]int32{
		"1": -1993445489, "12": 126087238, "123": -267702483, "1234": -1614185708, "12345": -1188365604,
	} {
		if got := javaMurmur2([]byte(key)); got != want {
			t.Errorf("javaMurmur2(%q) = %d, want %d", key, got, want)
		}
	}
}

func TestBalancerPicksTheJavaClientsPartition(t *testing.T) {
	t.Parallel()
	// Expected partitions computed once with javaPartition (and again with a
	// separate Python port of Utils.murmur2) and written down, so a change of
	// either the balancer or the reference fails here.
	cases := []struct {
		key        string
		partitions int
		want       int
	}{
		{"order-1001", 3, 0},
		{"order-1001", 12, 6},
		{"order-1002", 12, 0},
		{"37493426-4f04-4421-a1bd-4a50bf3111b6", 6, 3},
		{"37493426-4f04-4421-a1bd-4a50bf3111b6", 12, 3},
		{"12345", 7, 3},
		{"", 5, 1},
	}
	b := kafkaclient.Balancer()
	for _, c := range cases {
		parts := make([]int, c.partitions)
		for i := range parts {
			parts[i] = i
		}
		if ref := javaPartition(c.key, c.partitions); ref != c.want {
			t.Errorf("reference: key %q over %d partitions = %d, want %d", c.key, c.partitions, ref, c.want)
		}
		if got := b.Balance(kafka.Message{Key: []byte(c.key)}, parts...); got != c.want {
			t.Errorf("Balancer: key %q over %d partitions = %d, want %d (the Java client's)", c.key, c.partitions, got, c.want)
		}
	}
	// And the two agree on many keys and partition counts.
	for i := range 2000 {
		key := fmt.Sprintf("saga-%d-%x", i, i*7919)
		n := 1 + i%64
		parts := make([]int, n)
		for j := range parts {
			parts[j] = j
		}
		if got, want := b.Balance(kafka.Message{Key: []byte(key)}, parts...), javaPartition(key, n); got != want {
			t.Fatalf("key %q over %d partitions: Balancer %d, Java %d", key, n, got, want)
		}
	}
}
