// Package runall runs long-lived components together: the first to fail
// stops the others.
package runall

import (
	"context"
	"sync"
)

// Run runs every fn concurrently with a context derived from ctx. When one
// returns an error, the context of the others is cancelled; Run waits for
// all of them and returns the first error (nil when every fn returned nil,
// for example after ctx was cancelled and each stopped cleanly).
func Run(ctx context.Context, fns ...func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	for _, fn := range fns {
		wg.Go(func() {
			if err := fn(ctx); err != nil {
				once.Do(func() { first = err })
				cancel()
			}
		})
	}
	wg.Wait()
	return first
}
