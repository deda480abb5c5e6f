package cli

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"
)

func TestPrepareWithRetryWaitsForDependencies(t *testing.T) {
	t.Parallel()
	calls := 0
	err := prepareWithRetry(context.Background(), slog.New(slog.DiscardHandler), "test", func(context.Context) error {
		calls++
		if calls < 3 {
			return errors.New("connection refused")
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("prepareWithRetry = %v after %d calls; want nil after 3", err, calls)
	}
}

func TestPrepareWithRetryStopsOnCancel(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := prepareWithRetry(ctx, slog.New(slog.DiscardHandler), "test", func(context.Context) error {
		return errors.New("connection refused")
	})
	if err == nil {
		t.Fatal("want the last error once the context ends")
	}
	if time.Since(start) > 5*time.Second {
		t.Fatalf("returned after %s; want soon after the context ended", time.Since(start))
	}
}
