package inbox

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/message"
)

// HeaderDLQPartition carries the original partition of a dead-lettered
// record (the message package names the other dead-letter headers).
const HeaderDLQPartition = "dlq-original-partition"

// HeaderDLQShortened is set to "true" on a shortened dead-letter record:
// the original value was cut to its first DeadLetterValueBytesDefault
// bytes (and headers to what fits); the original coordinates say where the
// whole record still is.
const HeaderDLQShortened = "dlq-shortened"

// dlqHeaderKeys are the headers a dead letter adds (replacing copies).
var dlqHeaderKeys = []string{message.HeaderDLQReason, message.HeaderDLQTopic, message.HeaderDLQOffset, HeaderDLQPartition, HeaderDLQShortened}

// publishDead writes the dead letters of a batch. A record the broker
// refuses for what it is (too large, invalid) is replaced by its shortened
// form; if that is refused too, it is logged with its coordinates and
// counted, never retried. Other errors (the broker unreachable) are
// returned: the batch is rolled back and retried.
func (c *Consumer) publishDead(ctx context.Context, w *kafka.Writer, deads []dead) error {
	recs := make([]kafka.Message, len(deads))
	for i, d := range deads {
		recs[i] = c.deadLetter(d)
	}
	wctx, cancel := context.WithTimeout(ctx, CommitTimeoutDefault)
	defer cancel()
	err := w.WriteMessages(wctx, recs...)
	if err == nil {
		return nil
	}
	var retry []int
	var werrs kafka.WriteErrors
	switch {
	case errors.As(err, &werrs) && len(werrs) == len(recs):
		for i, e := range werrs {
			if e == nil {
				continue
			}
			if !refused(e) {
				return c.deadErr(deads[i], e)
			}
			retry = append(retry, i)
		}
	case refused(err):
		for i := range recs {
			retry = append(retry, i)
		}
	default:
		return c.deadErr(deads[0], err)
	}
	for _, i := range retry {
		short := c.shortDeadLetter(deads[i])
		c.mShortened.Inc()
		c.log.Warn("inbox: the broker refused a dead-letter record; sending a shortened one",
			"topic", deads[i].m.Topic, "partition", deads[i].m.Partition, "offset", deads[i].m.Offset, "err", err)
		if werr := w.WriteMessages(wctx, short); werr != nil {
			if !refused(werr) {
				return c.deadErr(deads[i], werr)
			}
			c.mLost.Inc()
			c.log.Error("inbox: the broker refused even the shortened dead-letter record; the message is skipped and only this log line keeps it",
				"topic", deads[i].m.Topic, "partition", deads[i].m.Partition, "offset", deads[i].m.Offset,
				"reason", cleanText(deads[i].reason, MaxReasonBytes), "err", werr)
		}
	}
	return nil
}

func (c *Consumer) deadErr(d dead, err error) error {
	return fmt.Errorf("inbox: publish a dead-letter record (from topic %s partition %d offset %d) to %s: %w",
		d.m.Topic, d.m.Partition, d.m.Offset, d.m.Topic+c.cfg.DLQSuffix, err)
}

// refused reports whether the broker (or the writer) refused a record for
// what it is, so that writing it again cannot succeed.
func refused(err error) bool {
	var tooLarge kafka.MessageTooLargeError
	if errors.As(err, &tooLarge) {
		return true
	}
	var ke kafka.Error
	if errors.As(err, &ke) {
		switch ke {
		case kafka.MessageSizeTooLarge, kafka.RecordListTooLarge, kafka.InvalidRecord, kafka.InvalidMessage,
			kafka.InvalidTimestamp, kafka.UnsupportedForMessageFormat, kafka.InvalidRequiredAcks:
			return true
		}
	}
	return false
}

// deadLetter builds the dead-letter record of d: the original key, value
// and headers (each header value cut to MaxDeadHeaderBytes), and the
// dead-letter headers with the reason cut to MaxReasonBytes. A record that
// would still be over Config.DeadLetterBytes is shortened.
func (c *Consumer) deadLetter(d dead) kafka.Message {
	headers := c.deadHeaders(d, MaxDeadHeaderBytes, false)
	rec := kafka.Message{Topic: d.m.Topic + c.cfg.DLQSuffix, Key: d.m.Key, Value: d.m.Value, Headers: headers}
	if recordBytes(rec) > c.cfg.DeadLetterBytes {
		return c.shortDeadLetter(d)
	}
	return rec
}

// shortDeadLetter keeps the original coordinates, the reason, headers cut
// to what fits, the key's and value's first DeadLetterValueBytesDefault
// bytes, and marks itself with HeaderDLQShortened.
func (c *Consumer) shortDeadLetter(d dead) kafka.Message {
	headers := c.deadHeaders(d, 128, true)
	// Drop copied headers from the end until the record fits.
	budget := c.cfg.DeadLetterBytes - 2*DeadLetterValueBytesDefault
	for len(headers) > len(dlqHeaderKeys) && headerBytes(headers) > budget {
		headers = append(headers[:len(headers)-len(dlqHeaderKeys)-1], headers[len(headers)-len(dlqHeaderKeys):]...)
	}
	return kafka.Message{
		Topic:   d.m.Topic + c.cfg.DLQSuffix,
		Key:     cut(d.m.Key, DeadLetterValueBytesDefault),
		Value:   cut(d.m.Value, DeadLetterValueBytesDefault),
		Headers: headers,
	}
}

func cut(b []byte, n int) []byte {
	if len(b) <= n {
		return b
	}
	return b[:n]
}

func headerBytes(hs []kafka.Header) int {
	n := 0
	for _, h := range hs {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// deadHeaders copies d's headers (values cut to valueMax, keys to 256) and
// appends the dead-letter headers last.
func (c *Consumer) deadHeaders(d dead, valueMax int, shortened bool) []kafka.Header {
	extra := map[string]string{
		message.HeaderDLQReason: cleanText(d.reason, MaxReasonBytes),
		message.HeaderDLQTopic:  d.m.Topic,
		message.HeaderDLQOffset: strconv.FormatInt(d.m.Offset, 10),
		HeaderDLQPartition:      strconv.Itoa(d.m.Partition),
		HeaderDLQShortened:      strconv.FormatBool(shortened),
	}
	headers := make([]kafka.Header, 0, len(d.m.Headers)+len(extra))
	for _, h := range d.m.Headers {
		if _, replaced := extra[h.Key]; replaced {
			continue
		}
		headers = append(headers, kafka.Header{Key: string(cut([]byte(h.Key), 256)), Value: cut(h.Value, valueMax)})
	}
	for _, k := range dlqHeaderKeys {
		headers = append(headers, kafka.Header{Key: k, Value: []byte(extra[k])})
	}
	return headers
}
