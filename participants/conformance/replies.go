package conformance

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/message"
)

// maxExamples bounds the examples a failed reply check quotes.
const maxExamples = 3

// problems collects what is wrong with the replies, per check.
type problems map[string][]string

func (p problems) add(check, format string, args ...any) {
	p[check] = append(p[check], fmt.Sprintf(format, args...))
}

// checkReplies checks every record read from the reply topic: the reply
// envelope, its headers, the fields copied from the command it answers,
// its key and its partition.
func (r *run) checkReplies() {
	recs := r.col.records(r.replyTopic)
	r.mu.Lock()
	commands := r.commands
	r.mu.Unlock()
	p := problems{}
	seen := map[uuid.UUID]bool{}
	balancer, other := r.balancers()
	for _, rec := range recs {
		at := fmt.Sprintf("partition %d offset %d", rec.partition, rec.offset)
		rep, err := message.DecodeReply(rec.value)
		if err != nil {
			p.add(CheckReplyEnvelope, "%s: %v", at, err)
			continue
		}
		at += " (reply to " + rep.InReplyTo.String() + ")"
		if id, _ := rec.header(message.HeaderMessageID); !sameUUID(id, rep.MessageID) {
			p.add(CheckReplyHeaders, "%s: header %s %q, body message_id %s", at, message.HeaderMessageID, id, rep.MessageID)
		}
		if id, _ := rec.header(message.HeaderSagaID); !sameUUID(id, rep.SagaID) {
			p.add(CheckReplyHeaders, "%s: header %s %q, body saga_id %s", at, message.HeaderSagaID, id, rep.SagaID)
		}
		if ct, _ := rec.header(message.HeaderContentType); ct != message.ContentTypeJSON {
			p.add(CheckReplyHeaders, "%s: header %s %q, want %s", at, message.HeaderContentType, ct, message.ContentTypeJSON)
		}
		cmd, ok := commands[rep.InReplyTo]
		switch {
		case !ok:
			p.add(CheckReplyCopiesCommand, "%s: in_reply_to names no command the kit sent", at)
		case rep.SagaID != cmd.SagaID || rep.Step != cmd.Step || rep.Action != cmd.Action:
			p.add(CheckReplyCopiesCommand, "%s: saga_id %s step %q action %s, the command's are %s %q %s", at, rep.SagaID, rep.Step, rep.Action, cmd.SagaID, cmd.Step, cmd.Action)
		}
		if _, isCommand := commands[rep.MessageID]; isCommand || seen[rep.MessageID] {
			p.add(CheckReplyCopiesCommand, "%s: message_id %s is not a new id", at, rep.MessageID)
		}
		seen[rep.MessageID] = true
		if err := r.verifyReply(rec); err != nil {
			p.add(CheckReplySigned, "%s: %v", at, err)
		}
		if string(rec.key) != rep.SagaID.String() {
			p.add(CheckReplyKey, "%s: key %q, want the saga id %s", at, rec.key, rep.SagaID)
			continue
		}
		if want := balancer.Balance(kafka.Message{Key: rec.key}, partitions()...); rec.partition != want {
			how := "neither partitioner's"
			if other.Balance(kafka.Message{Key: rec.key}, partitions()...) == rec.partition {
				how = "the " + r.otherPartitioner() + " partitioner's"
			}
			p.add(CheckReplyPartition, "%s: key %s on partition %d, %s; %s puts it on %d", at, rec.key, rec.partition, how, r.cfg.Partitioner, want)
		}
	}
	if len(recs) == 0 {
		p.add(CheckReplyEnvelope, "no replies at all on %s", r.replyTopic)
	}
	for _, name := range []string{CheckReplyEnvelope, CheckReplyHeaders, CheckReplyCopiesCommand, CheckReplySigned, CheckReplyKey, CheckReplyPartition} {
		c := Check{Name: name, Passed: len(p[name]) == 0}
		if name == CheckReplyPartition {
			c.Name += "-" + r.cfg.Partitioner
		}
		if !c.Passed {
			ex := p[name]
			c.Why = fmt.Sprintf("%d of %d replies: %s", len(ex), len(recs), strings.Join(ex[:min(len(ex), maxExamples)], "; "))
		}
		r.report.add(c)
	}
}

func partitions() []int {
	ps := make([]int, topicPartitions)
	for i := range ps {
		ps[i] = i
	}
	return ps
}

// balancers returns the configured partitioner and the other one.
func (r *run) balancers() (kafka.Balancer, kafka.Balancer) {
	m, f := kafka.Balancer(&kafka.Murmur2Balancer{}), kafka.Balancer(&kafka.Hash{})
	if r.cfg.Partitioner == PartitionerFNV1a {
		return f, m
	}
	return m, f
}

func (r *run) otherPartitioner() string {
	if r.cfg.Partitioner == PartitionerFNV1a {
		return PartitionerMurmur2
	}
	return PartitionerFNV1a
}

func sameUUID(s string, id uuid.UUID) bool {
	got, err := uuid.Parse(s)
	return err == nil && got == id
}

// checkNothingElsewhere checks that the participant wrote to no topic but
// the reply topic and its dead-letter topic (the kit writes the command
// topic): in particular not to the kit's elsewhere topic, which a
// dead-lettered command named as its reply_to. It compares every topic's
// record count with the one before the participant started.
func (r *run) checkNothingElsewhere(ctx context.Context) Check {
	c := Check{Name: CheckNothingElsewhere}
	after, err := r.topicRecords(ctx)
	if err != nil {
		c.Why = err.Error()
		return c
	}
	allowed := []string{r.commandTopic, r.dlqTopic, r.replyTopic}
	var wrong []string
	for t, n := range after {
		if slices.Contains(allowed, t) || strings.HasPrefix(t, "__") {
			continue
		}
		if d := n - r.before[t]; d > 0 {
			wrong = append(wrong, fmt.Sprintf("%s (%d records)", t, d))
		}
	}
	if len(wrong) > 0 {
		slices.Sort(wrong)
		c.Why = "records on topics other than " + r.replyTopic + " and " + r.dlqTopic + ": " + strings.Join(wrong, ", ")
		return c
	}
	c.Passed = true
	return c
}

// topicRecords returns the sum of the partitions' end offsets of every
// topic: how many records were ever written to it.
func (r *run) topicRecords(ctx context.Context) (map[string]int64, error) {
	client := &kafka.Client{Addr: kafka.TCP(r.brokers...), Transport: r.transport}
	meta, err := client.Metadata(ctx, &kafka.MetadataRequest{})
	if err != nil {
		return nil, fmt.Errorf("read the topics: %w", err)
	}
	req := &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{}}
	for _, t := range meta.Topics {
		for _, p := range t.Partitions {
			req.Topics[t.Name] = append(req.Topics[t.Name], kafka.LastOffsetOf(p.ID))
		}
	}
	out := map[string]int64{}
	if len(req.Topics) == 0 {
		return out, nil
	}
	res, err := client.ListOffsets(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("read the topics' offsets: %w", err)
	}
	for t, ps := range res.Topics {
		for _, p := range ps {
			if p.Error != nil {
				return nil, fmt.Errorf("read the offsets of %s partition %d: %w", t, p.Partition, p.Error)
			}
			out[t] += p.LastOffset
		}
	}
	return out, nil
}
