package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/outbox"
)

type failedRow struct {
	row outbox.Row
	err error
}

// publishResult sorts the rows of one cycle.
type publishResult struct {
	sent      []int64     // acknowledged by Kafka: mark sent
	failed    []failedRow // refused (by us or by Kafka), or lost while others got through: mark failed
	untouched []outbox.Row
	outage    error // why untouched rows were not published: Kafka unreachable
}

// rowError is the fate of one row within a publish.
type rowError struct {
	err error
	// transport: Kafka did not answer (network, timeout). Such an error is
	// the row's own fault only if other rows of the cycle got through.
	transport bool
}

// publish hands rows to Kafka. Rows never attempted before go out in runs,
// one WriteMessages call per run; a row that failed before goes out alone,
// so a poison row cannot take its neighbours down with it again. Calls are
// made in id order, so rows of one key reach Kafka in id order.
func (r *Relay) publish(ctx context.Context, w *kafka.Writer, rows []outbox.Row) publishResult {
	errs := make([]*rowError, len(rows))
	var run []int
	flush := func() {
		if len(run) > 0 {
			r.send(ctx, w, rows, run, errs)
			run = nil
		}
	}
	start := time.Now()
	for i, row := range rows {
		if err := checkRow(row); err != nil {
			errs[i] = &rowError{err: err}
			continue
		}
		if row.Attempts > 0 {
			flush()
			r.send(ctx, w, rows, []int{i}, errs)
			continue
		}
		run = append(run, i)
	}
	flush()

	var res publishResult
	for i, row := range rows {
		if errs[i] == nil {
			res.sent = append(res.sent, row.ID)
		}
	}
	if r.m != nil {
		r.m.publishTime.Observe(time.Since(start).Seconds())
		r.m.batchSize.Observe(float64(len(rows)))
	}
	for i, row := range rows {
		e := errs[i]
		switch {
		case e == nil:
		case e.transport && len(res.sent) == 0:
			res.untouched = append(res.untouched, row)
			if res.outage == nil {
				res.outage = e.err
			}
		default:
			res.failed = append(res.failed, failedRow{row: row, err: e.err})
		}
	}
	return res
}

// send publishes rows[idx] with one WriteMessages call and records each
// row's error in errs. A call that Kafka refuses as a whole (for example a
// topic it rejects) is split by topic so the refusal lands on the right rows.
func (r *Relay) send(ctx context.Context, w *kafka.Writer, rows []outbox.Row, idx []int, errs []*rowError) {
	msgs := make([]kafka.Message, len(idx))
	for k, i := range idx {
		row := rows[i]
		m := kafka.Message{Topic: row.Topic, Key: []byte(row.Key), Value: row.Value}
		if len(row.Headers) > 0 {
			m.Headers = make([]kafka.Header, 0, len(row.Headers))
			for name, v := range row.Headers {
				m.Headers = append(m.Headers, kafka.Header{Key: name, Value: []byte(v)})
			}
		}
		msgs[k] = m
	}
	wctx, cancel := context.WithTimeout(ctx, r.cfg.WriteTimeout)
	err := w.WriteMessages(wctx, msgs...)
	cancel()
	if err == nil {
		return
	}
	var werrs kafka.WriteErrors
	if errors.As(err, &werrs) && len(werrs) == len(idx) {
		for k, i := range idx {
			if werrs[k] != nil {
				errs[i] = classify(rows[i], werrs[k])
			}
		}
		return
	}
	if !isTransport(err) {
		if groups := byTopic(rows, idx); len(groups) > 1 {
			for _, g := range groups {
				r.send(ctx, w, rows, g, errs)
			}
			return
		}
	}
	for _, i := range idx {
		errs[i] = classify(rows[i], err)
	}
}

func classify(row outbox.Row, err error) *rowError {
	return &rowError{
		err:       fmt.Errorf("publish row %d to topic %q: %w", row.ID, row.Topic, err),
		transport: isTransport(err),
	}
}

// isTransport reports whether err means Kafka did not answer, as opposed to
// Kafka (or the client, before sending) refusing the message.
func isTransport(err error) bool {
	var kerr kafka.Error
	if errors.As(err, &kerr) {
		return false
	}
	var tooLarge kafka.MessageTooLargeError
	return !errors.As(err, &tooLarge)
}

// byTopic splits idx by topic, keeping id order inside each group and the
// groups in the order of their first row.
func byTopic(rows []outbox.Row, idx []int) [][]int {
	pos := map[string]int{}
	var groups [][]int
	for _, i := range idx {
		p, ok := pos[rows[i].Topic]
		if !ok {
			p = len(groups)
			pos[rows[i].Topic] = p
			groups = append(groups, nil)
		}
		groups[p] = append(groups[p], i)
	}
	return groups
}

// checkRow refuses rows Kafka can never accept, so they never reach the
// writer: a topic name outside Kafka's rules, or an oversized record.
func checkRow(row outbox.Row) error {
	if err := checkTopic(row.Topic); err != nil {
		return fmt.Errorf("row %d: %w", row.ID, err)
	}
	size := len(row.Key) + len(row.Value)
	for k, v := range row.Headers {
		size += len(k) + len(v)
	}
	if size > MaxMessageBytes {
		return fmt.Errorf("row %d: %w: %d bytes, limit %d", row.ID, ErrInvalidMessage, size, MaxMessageBytes)
	}
	return nil
}

func checkTopic(t string) error {
	if t == "" || len(t) > 249 || t == "." || t == ".." {
		return fmt.Errorf("%w: topic %q must be 1 to 249 characters and not \".\" or \"..\"", ErrInvalidMessage, t)
	}
	for _, c := range []byte(t) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
		if !ok {
			return fmt.Errorf("%w: topic %q has character %q; Kafka allows only [a-zA-Z0-9._-]", ErrInvalidMessage, t, c)
		}
	}
	return nil
}
