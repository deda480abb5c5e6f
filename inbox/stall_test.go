package inbox_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/inbox"
	"github.com/sagaflow/sagaflow/internal/testkit"
)

// A group member that holds partitions but stopped consuming (it still
// heartbeats, so the coordinator keeps it) leaves lag behind. The
// consumer's watchdog sees the lag that nothing reduces, recreates its
// Kafka reader, the rebalance that causes drops the stuck member after
// Config.RebalanceTimeout (it never rejoins), and the consumer then handles
// every message, each once. With kafka-go's 30s rebalance default this took
// more than 30s.
func TestStalledGroupRecoversByRecreatingTheReader(t *testing.T) {
	t.Parallel()
	const (
		stall     = 2 * time.Second
		rebalance = 2 * time.Second
	)
	e := setup(t, 2)
	m := newMetrics(t)
	cfg := e.config(m)
	cfg.SessionTimeout = 3 * time.Second
	cfg.RebalanceTimeout = rebalance
	cfg.StallTimeout = stall
	c, err := inbox.New(e.pool, inbox.EachMessage(writeEffect), cfg)
	if err != nil {
		t.Fatal(err)
	}
	run(t, c)
	first := []uuid.UUID{uuid.New()}
	e.produce(t, record(first[0], "first"))
	testkit.Eventually(t, wait, "first message handled", func() (bool, error) {
		return count(t, e.pool, `SELECT count(*) FROM effects WHERE message_id = ANY($1)`, first) == 1, nil
	})

	// The stuck member: kafka-go's ConsumerGroup joins, gets its share of
	// the partitions and heartbeats, but nobody takes its generation (Next
	// is never called), so it never fetches, commits or rejoins.
	stuck, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{
		ID:                e.group,
		Brokers:           e.brokers,
		Topics:            []string{e.topic},
		SessionTimeout:    3 * time.Second,
		HeartbeatInterval: 500 * time.Millisecond,
		RebalanceTimeout:  rebalance,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stuck.Close() })
	// Keep producing (keys spread over both partitions) until records stay
	// unconsumed while the group's two members each hold a partition: the
	// stuck member then holds one. (Lag alone is not enough: a rebalance
	// leaves some for as long as the consumer's readers take to stop, up
	// to its fetch MaxWait.)
	var ids []uuid.UUID
	var stuckAt time.Time
	testkit.Eventually(t, wait, "the stuck member holding lag", func() (bool, error) {
		for range 4 {
			id := uuid.New()
			ids = append(ids, id)
			e.produce(t, record(id, id.String()))
		}
		if lag(t, e.brokers, e.group, e.topic, 2) == 0 || !everyMemberHolds(t, e.brokers, e.group, e.topic, 2) {
			stuckAt = time.Time{}
			return false, nil
		}
		if stuckAt.IsZero() {
			stuckAt = time.Now()
		}
		return time.Since(stuckAt) > time.Second, nil
	})
	testkit.Eventually(t, 30*time.Second, "every message handled after the watchdog restart", func() (bool, error) {
		return count(t, e.pool, `SELECT count(*) FROM effects WHERE message_id = ANY($1)`, ids) == len(ids), nil
	})
	took := time.Since(stuckAt)
	t.Logf("group recovered %s after the member got stuck", took.Round(time.Millisecond))
	if got := testutil.ToFloat64(m.Restarts("test")); got < 1 {
		t.Errorf("reader restarts = %v, want >= 1", got)
	}
	if took > 25*time.Second {
		t.Errorf("recovery took %s, want well under kafka-go's 30s rebalance default", took)
	}
	effectsOncePerID(t, e.pool, append(first, ids...))
	testkit.Eventually(t, wait, "lag zero", func() (bool, error) {
		return lag(t, e.brokers, e.group, e.topic, 2) == 0, nil
	})
}

// everyMemberHolds reports whether group is stable with members members,
// each assigned at least one partition of topic.
func everyMemberHolds(t *testing.T, brokers []string, group, topic string, members int) bool {
	t.Helper()
	cl := &kafka.Client{Addr: kafka.TCP(brokers...)}
	res, err := cl.DescribeGroups(testkit.Context(t, wait), &kafka.DescribeGroupsRequest{GroupIDs: []string{group}})
	if err != nil || len(res.Groups) != 1 || res.Groups[0].Error != nil {
		t.Fatalf("describe group %s: %v %+v", group, err, res)
	}
	g := res.Groups[0]
	if g.GroupState != "Stable" || len(g.Members) != members {
		return false
	}
	for _, m := range g.Members {
		held := 0
		for _, tp := range m.MemberAssignments.Topics {
			if tp.Topic == topic {
				held += len(tp.Partitions)
			}
		}
		if held == 0 {
			return false
		}
	}
	return true
}
