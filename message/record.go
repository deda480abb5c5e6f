package message

import "time"

// Record is one Kafka record as a consumer hands it to a handler: where it
// came from, its key, value and headers, and its timestamp. The inbox's
// handlers, the participant SDK and the orchestrator's reply handler take
// it, so none of their signatures depends on a Kafka client's types.
type Record struct {
	Topic     string
	Partition int
	Offset    int64
	Key       []byte
	Value     []byte
	Headers   []Header
	// Time is the record's timestamp (its producer's, or the broker's).
	Time time.Time
}

// Header returns the value of the first header named key, and whether
// there is one.
func (r Record) Header(key string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

// CommandSuffix ends every participant's command topic.
const CommandSuffix = ".commands"

// CommandTopic is the command topic of participant under prefix:
// "<prefix><participant>.commands".
func CommandTopic(prefix, participant string) string { return prefix + participant + CommandSuffix }

// ReplyTopicDefault is the reply topic when none is configured: where an
// orchestrator's commands ask to be answered (their reply_to), and the one
// reply topic a participant accepts.
const ReplyTopicDefault = "saga.replies"
