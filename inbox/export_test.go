package inbox

import (
	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/message"
)

// SetAfterDBCommit installs a hook that runs after a batch's database commit
// and before its offset commit; a non-nil error makes Run return it at once,
// as if the process had crashed there.
func SetAfterDBCommit(c *Consumer, f func(batch []kafka.Message) error) { c.afterDBCommit = f }

// LaneOf is laneOf for tests.
func LaneOf(topic string, partition, n int) int { return laneOf(topic, partition, n) }

// CleanText is cleanText for tests.
func CleanText(s string, n int) string { return cleanText(s, n) }

// ToRecords is toRecords for tests.
func ToRecords(ms []kafka.Message) []message.Record { return toRecords(ms) }
