package inbox_test

import (
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/inbox"
	"github.com/sagaflow/sagaflow/message"
)

// The records carry every field and header of the messages; the headers of
// one record cannot grow into the next's.
func TestToRecords(t *testing.T) {
	t.Parallel()
	at := time.Unix(1700000000, 0)
	ms := []kafka.Message{
		{Topic: "a", Partition: 1, Offset: 7, Key: []byte("k1"), Value: []byte("v1"), Time: at,
			Headers: []kafka.Header{{Key: "message-id", Value: []byte("1")}, {Key: "saga-id", Value: []byte("s")}}},
		{Topic: "b", Offset: 8, Value: []byte("v2")},
		{Topic: "c", Offset: 9, Headers: []kafka.Header{{Key: "x", Value: []byte("y")}}},
	}
	rs := inbox.ToRecords(ms)
	if len(rs) != 3 {
		t.Fatalf("%d records for 3 messages", len(rs))
	}
	r := rs[0]
	if r.Topic != "a" || r.Partition != 1 || r.Offset != 7 || string(r.Key) != "k1" || string(r.Value) != "v1" || !r.Time.Equal(at) ||
		len(r.Headers) != 2 || r.Headers[1].Key != "saga-id" || string(r.Headers[1].Value) != "s" {
		t.Fatalf("record 0 = %+v", r)
	}
	if len(rs[1].Headers) != 0 || len(rs[2].Headers) != 1 || rs[2].Headers[0].Key != "x" {
		t.Fatalf("headers of records 1 and 2: %+v, %+v", rs[1].Headers, rs[2].Headers)
	}
	_ = append(rs[0].Headers, message.Header{Key: "grown"})
	_ = append(rs[1].Headers, message.Header{Key: "grown"})
	if rs[2].Headers[0].Key != "x" {
		t.Fatalf("appending to an earlier record's headers overwrote record 2's: %+v", rs[2].Headers)
	}
}
