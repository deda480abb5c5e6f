package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sagaflow/sagaflow/api"
	"github.com/sagaflow/sagaflow/internal/workload"
)

// startAll starts one saga per order and trip of plan (plan.Starts())
// through the replicas' HTTP API, spread over the first 80% of the run's
// duration, alternating replicas, and sends each trip that needs one its
// approval (POST /sagas/{id}/events). A start or an event that fails for
// want of a replica (connection refused, reset, 5xx, timeout) is retried
// with the same idempotency key or event id on the other replica, which is
// safe: a second start returns the first saga, a second event is a no-op.
func (h *harness) startAll(ctx context.Context, plan workload.Plan, res *Result) error {
	starts := plan.Starts()
	n := len(starts)
	spacing := time.Duration(float64(h.cfg.Duration) * 0.8 / float64(n))
	client := &http.Client{Timeout: 5 * time.Second}
	jobs := make(chan int)
	var retries atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, h.cfg.Concurrency)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range h.cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				if err := h.startOne(wctx, client, plan, starts[i], i, &retries); err != nil {
					errc <- err
					cancel()
					return
				}
			}
		}()
	}
	began := time.Now()
feed:
	for i := range n {
		if d := time.Until(began.Add(time.Duration(i) * spacing)); d > 0 {
			select {
			case <-wctx.Done():
				break feed
			case <-time.After(d):
			}
		}
		select {
		case jobs <- i:
		case <-wctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	res.StartRetries = retries.Load()
	select {
	case err := <-errc:
		return err
	default:
	}
	return ctx.Err()
}

// startOne starts s (the i-th start), retrying on either replica until it
// answers 200/201 or ctx ends; a 4xx is a harness bug and ends the run.
// A trip that needs an approval then gets it the same way (202, or 409
// when the trip already turned back).
func (h *harness) startOne(ctx context.Context, client *http.Client, plan workload.Plan, s workload.Start, i int, retries *atomic.Int64) error {
	data, err := json.Marshal(s.Request.Data)
	if err != nil {
		return err
	}
	r := s.Request
	body, err := json.Marshal(api.StartBody{Type: r.Type, IdempotencyKey: r.IdempotencyKey, AggregateID: r.AggregateID, Data: data})
	if err != nil {
		return err
	}
	what := r.Type + " " + r.AggregateID
	var answer api.StartAnswer
	err = h.retry(ctx, i, retries, "start "+what, func(c *child) (int, string, error) {
		status, msg, err := post(ctx, client, "http://"+h.httpAddr[c.name]+"/sagas", body)
		if err == nil && (status == http.StatusCreated || status == http.StatusOK) {
			if err := json.Unmarshal([]byte(msg), &answer); err != nil {
				return status, msg, fmt.Errorf("decode the start's answer: %w", err)
			}
			return 0, msg, nil
		}
		return status, msg, err
	})
	if err != nil || s.Trip == nil || !s.Trip.NeedsApproval {
		return err
	}
	ev := plan.Approval(*s.Trip)
	return h.retry(ctx, i, retries, "approve "+what, func(c *child) (int, string, error) {
		status, msg, err := workload.PostEvent(ctx, client, "http://"+h.httpAddr[c.name], "", answer.ID, ev)
		if err == nil && (status == http.StatusAccepted || status == http.StatusConflict) {
			return 0, msg, nil
		}
		return status, msg, err
	})
}

// retry calls do on the replicas in turn, from the i-th, until it answers
// status 0 (done) or ctx ends; a 4xx status is a harness bug and ends the
// run, anything else (an error, 5xx) is retried with backoff.
func (h *harness) retry(ctx context.Context, i int, retries *atomic.Int64, what string, do func(*child) (int, string, error)) error {
	backoff := 50 * time.Millisecond
	for attempt := 0; ; attempt++ {
		c := h.orchs[(i+attempt)%len(h.orchs)]
		status, msg, err := do(c)
		switch {
		case err == nil && status == 0:
			return nil
		case err == nil && status >= 400 && status < 500:
			return fmt.Errorf("chaos: %s on %s: HTTP %d: %s", what, c.name, status, msg)
		}
		retries.Add(1)
		select {
		case <-ctx.Done():
			return fmt.Errorf("chaos: %s: %w (last: HTTP %d %s %v)", what, ctx.Err(), status, msg, err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

func post(ctx context.Context, client *http.Client, url string, body []byte) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(bytes.TrimSpace(msg)), nil
}
