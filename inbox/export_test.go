package inbox

import "github.com/segmentio/kafka-go"

// SetAfterDBCommit installs a hook that runs after a batch's database commit
// and before its offset commit; a non-nil error makes Run return it at once,
// as if the process had crashed there.
func SetAfterDBCommit(c *Consumer, f func(batch []kafka.Message) error) { c.afterDBCommit = f }
