package runall

import (
	"context"
	"errors"
	"testing"
	"time"
)

// The first error is returned and cancels the others, which are waited for.
func TestFirstErrorStopsTheOthers(t *testing.T) {
	boom := errors.New("boom")
	stopped := make(chan struct{})
	err := Run(context.Background(),
		func(ctx context.Context) error {
			<-ctx.Done()
			close(stopped)
			return ctx.Err()
		},
		func(context.Context) error { return boom },
	)
	if !errors.Is(err, boom) {
		t.Fatalf("Run = %v, want the first error %v", err, boom)
	}
	select {
	case <-stopped:
	default:
		t.Fatal("Run returned before the other component stopped")
	}
}

// A cancelled parent stops every component; clean stops give nil.
func TestParentCancelStopsAll(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx,
			func(ctx context.Context) error { <-ctx.Done(); return nil },
			func(ctx context.Context) error { <-ctx.Done(); return nil },
		)
	}()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context was cancelled")
	}
}

// No components: nil at once.
func TestNothingToRun(t *testing.T) {
	if err := Run(context.Background()); err != nil {
		t.Fatalf("Run() = %v, want nil", err)
	}
}
