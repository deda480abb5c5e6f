// Package kafkaclient holds the few Kafka helpers the relay, the inbox
// consumer and the commands share: topic creation and broker list parsing.
package kafkaclient

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
)

// ParseBrokers splits a comma-separated broker list and drops blanks.
func ParseBrokers(s string) []string {
	var out []string
	for _, b := range strings.Split(s, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}

// EnsureTopics creates topics that do not exist yet, with partitions
// partitions and the given replication factor. Existing topics are left as
// they are.
func EnsureTopics(ctx context.Context, brokers []string, partitions, replication int, topics ...string) error {
	return EnsureTopicsWith(ctx, nil, brokers, partitions, replication, topics...)
}

// EnsureTopicsWith is EnsureTopics over connections made by d (TLS, SASL;
// nil: plain TCP).
func EnsureTopicsWith(ctx context.Context, d *kafka.Dialer, brokers []string, partitions, replication int, topics ...string) error {
	if d == nil {
		d = &kafka.Dialer{Timeout: 10 * time.Second, DualStack: true}
	}
	if len(brokers) == 0 {
		return errors.New("kafka: ensure topics: no brokers configured")
	}
	if len(topics) == 0 {
		return nil
	}
	conn, err := d.DialContext(ctx, "tcp", brokers[0])
	if err != nil {
		return fmt.Errorf("kafka: ensure topics: dial %s: %w", brokers[0], err)
	}
	defer conn.Close()
	ctrl, err := conn.Controller()
	if err != nil {
		return fmt.Errorf("kafka: ensure topics: find controller: %w", err)
	}
	cc, err := d.DialContext(ctx, "tcp", net.JoinHostPort(ctrl.Host, strconv.Itoa(ctrl.Port)))
	if err != nil {
		return fmt.Errorf("kafka: ensure topics: dial controller: %w", err)
	}
	defer cc.Close()
	if replication <= 0 {
		replication = 1
	}
	cfgs := make([]kafka.TopicConfig, 0, len(topics))
	seen := make(map[string]bool, len(topics))
	for _, t := range topics {
		if seen[t] {
			continue // a topic named twice in one request is refused whole
		}
		seen[t] = true
		cfgs = append(cfgs, kafka.TopicConfig{Topic: t, NumPartitions: partitions, ReplicationFactor: replication})
	}
	if err := cc.CreateTopics(cfgs...); err != nil && !errors.Is(err, kafka.TopicAlreadyExists) {
		return fmt.Errorf("kafka: ensure topics %v: %w", topics, err)
	}
	return nil
}
