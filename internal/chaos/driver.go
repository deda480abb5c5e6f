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
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

// startAll starts one saga per order of plan through the replicas' HTTP
// API, spread over the first 80% of the run's duration, alternating
// replicas. A start that fails for want of a replica (connection refused,
// reset, 5xx, timeout) is retried with the same idempotency key on the other
// replica, which is safe: a second start returns the first saga.
func (h *harness) startAll(ctx context.Context, plan workload.Plan, res *Result) error {
	n := len(plan.Orders)
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
				if err := h.startOne(wctx, client, plan, i, &retries); err != nil {
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

// startOne starts order i, retrying on either replica until it answers
// 200/201 or ctx ends; a 4xx is a harness bug and ends the run.
func (h *harness) startOne(ctx context.Context, client *http.Client, plan workload.Plan, i int, retries *atomic.Int64) error {
	o := plan.Orders[i]
	data, err := json.Marshal(o)
	if err != nil {
		return err
	}
	body, err := json.Marshal(api.StartBody{Type: orderapi.SagaType, IdempotencyKey: o.OrderID, AggregateID: o.OrderID, Data: data})
	if err != nil {
		return err
	}
	backoff := 50 * time.Millisecond
	for attempt := 0; ; attempt++ {
		c := h.orchs[(i+attempt)%len(h.orchs)]
		status, msg, err := post(ctx, client, "http://"+h.httpAddr[c.name]+"/sagas", body)
		switch {
		case err == nil && (status == http.StatusCreated || status == http.StatusOK):
			return nil
		case err == nil && status >= 400 && status < 500:
			return fmt.Errorf("chaos: start order %s on %s: HTTP %d: %s", o.OrderID, c.name, status, msg)
		}
		retries.Add(1)
		select {
		case <-ctx.Done():
			return fmt.Errorf("chaos: start order %s: %w (last: HTTP %d %s %v)", o.OrderID, ctx.Err(), status, msg, err)
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
