package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/internal/outboxdb"
)

type failedRow struct {
	row outboxdb.Row
	err error
}

// publishResult sorts the rows of one cycle.
type publishResult struct {
	sent      []int64     // acknowledged by Kafka: mark sent
	failed    []failedRow // refused (by us or by Kafka), or lost while others got through: mark failed
	untouched []outboxdb.Row
	outage    error // why untouched rows were not published: Kafka unreachable
}

// rowError is the fate of one row within a publish.
type rowError struct {
	err error
	// transport: Kafka did not answer (network, timeout). Such an error is
	// the row's own fault only if other rows of the cycle got through.
	transport bool
}

// publish hands rows to Kafka, in either mode. Rows never attempted before
// go out in runs, one write per run; a row that failed before goes out
// alone, so a poison row cannot take its neighbours down with it again.
// Writes are made in id order, so rows of one key reach Kafka in id order.
// It counts the rows published and failed in the relay's metrics.
func (r *Relay) publish(ctx context.Context, prod *direct, rows []outboxdb.Row) publishResult {
	errs := make([]*rowError, len(rows))
	var run []int
	flush := func() {
		if len(run) > 0 {
			r.send(ctx, prod, rows, run, errs)
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
			r.send(ctx, prod, rows, []int{i}, errs)
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
	if r.m != nil {
		r.m.publishTime.Observe(time.Since(start).Seconds())
		r.m.batchSize.Observe(float64(len(rows)))
		r.m.published.Add(float64(len(res.sent)))
		r.m.publishErrors.Add(float64(len(res.failed) + len(res.untouched)))
	}
	return res
}

// send publishes rows[idx] with one write and records each row's error in
// errs.
func (r *Relay) send(ctx context.Context, prod *direct, rows []outboxdb.Row, idx []int, errs []*rowError) {
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
	werrs := prod.write(wctx, msgs)
	cancel()
	for k, err := range werrs {
		if err != nil {
			errs[idx[k]] = classify(rows[idx[k]], err)
		}
	}
}

func classify(row outboxdb.Row, err error) *rowError {
	return &rowError{
		err:       fmt.Errorf("publish row %d to topic %q: %w", row.ID, row.Topic, err),
		transport: isTransport(err),
	}
}

// isTransport reports whether err means Kafka did not answer, as opposed to
// Kafka (or the client, before sending) refusing the message.
func isTransport(err error) bool {
	var kerr kafka.Error
	return !errors.As(err, &kerr)
}

// checkRow refuses rows Kafka can never accept, so they never reach the
// writer: a topic name outside Kafka's rules, or an oversized record.
func checkRow(row outboxdb.Row) error {
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
