package inbox

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/internal/kafkaclient"
)

// watch recreates the consumer group membership (cancels the session with
// errRestart) when the group has lag its committed offsets do not reduce
// for StallTimeout while this consumer has had nothing to do (no message
// fetched, queued or in a batch, no generation joined) for as long. (A
// member can hold partitions it never fetches: kafka-go's group session
// does not always recover from a cut connection or a coordinator that
// stopped answering.)
func (c *Consumer) watch(ctx context.Context, st *state) {
	cl := &kafka.Client{Addr: kafka.TCP(c.cfg.Brokers...), Timeout: 5 * time.Second}
	if c.cfg.Dialer != nil {
		cl.Transport = kafkaclient.Transport(c.cfg.Dialer, "sagaflow-inbox-watchdog")
	}
	tick := time.NewTicker(max(c.cfg.StallTimeout/4, 100*time.Millisecond))
	defer tick.Stop()
	var last map[string]int64 // committed offsets at the start of the current stall
	var since time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		waiting := st.idleSince()
		if waiting.IsZero() || time.Since(waiting) < c.cfg.StallTimeout {
			last = nil
			continue
		}
		qctx, qcancel := context.WithTimeout(ctx, 10*time.Second)
		committed, lag, err := groupLag(qctx, cl, c.cfg.GroupID, c.cfg.Topics)
		qcancel()
		if err != nil {
			c.log.Debug("inbox: watchdog: could not read the group's lag", "err", err)
			continue
		}
		if lag == 0 || !maps.Equal(committed, last) {
			last, since = committed, time.Now()
			continue
		}
		if time.Since(since) < c.cfg.StallTimeout/2 {
			continue
		}
		c.log.Warn("inbox: group has lag but nothing is consumed; recreating the consumer group membership",
			"lag", lag, "idle_for", time.Since(waiting).Round(time.Millisecond))
		st.restart(errRestart)
		return
	}
}

// groupLag returns the committed offsets of group ("topic/partition" ->
// offset) and the number of records of topics beyond them.
func groupLag(ctx context.Context, cl *kafka.Client, group string, topics []string) (map[string]int64, int64, error) {
	md, err := cl.Metadata(ctx, &kafka.MetadataRequest{Topics: topics})
	if err != nil {
		return nil, 0, fmt.Errorf("metadata of %v: %w", topics, err)
	}
	parts := map[string][]int{}
	reqs := map[string][]kafka.OffsetRequest{}
	for _, t := range md.Topics {
		if t.Error != nil {
			return nil, 0, fmt.Errorf("metadata of %s: %w", t.Name, t.Error)
		}
		for _, p := range t.Partitions {
			parts[t.Name] = append(parts[t.Name], p.ID)
			reqs[t.Name] = append(reqs[t.Name], kafka.LastOffsetOf(p.ID))
		}
	}
	committed, err := cl.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: parts})
	if err == nil && committed.Error != nil {
		err = committed.Error
	}
	if err != nil {
		return nil, 0, fmt.Errorf("committed offsets of group %s: %w", group, err)
	}
	ends, err := cl.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: reqs})
	if err != nil {
		return nil, 0, fmt.Errorf("end offsets of %v: %w", topics, err)
	}
	end := map[string]int64{}
	for t, ps := range ends.Topics {
		for _, p := range ps {
			if p.Error != nil {
				return nil, 0, fmt.Errorf("end offset of %s/%d: %w", t, p.Partition, p.Error)
			}
			end[t+"/"+strconv.Itoa(p.Partition)] = p.LastOffset
		}
	}
	out := map[string]int64{}
	var lag int64
	for t, ps := range committed.Topics {
		for _, p := range ps {
			if p.Error != nil {
				return nil, 0, fmt.Errorf("committed offset of %s/%d: %w", t, p.Partition, p.Error)
			}
			k := t + "/" + strconv.Itoa(p.Partition)
			out[k] = p.CommittedOffset
			if e := end[k]; e > max(p.CommittedOffset, 0) {
				lag += e - max(p.CommittedOffset, 0)
			}
		}
	}
	return out, lag, nil
}
