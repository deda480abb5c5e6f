package kafkaclient

import "github.com/segmentio/kafka-go"

// Balancer is the partitioner of every keyed record sagaflow produces
// (the relays of the orchestrator and the participants, the dead-letter
// writers): murmur2 over the key bytes, toPositive(murmur2(key)) %
// partitions, the default partitioner of the Java client and librdkafka's
// "murmur2_random". A participant in another language keying its records
// with its client's default partitioner therefore lands each key on the
// partition sagaflow would choose (docs/DESIGN.md, "Topics and keys").
// A record without a key goes to a random partition.
func Balancer() kafka.Balancer { return kafka.Murmur2Balancer{} }
