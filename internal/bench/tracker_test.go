package bench

import (
	"slices"
	"testing"

	"github.com/google/uuid"
)

func TestTrackerPollsTheOldestWatchedAndAllOfThemAtTimes(t *testing.T) {
	tr := newTracker(nil, "sagas", 0)
	var all []uuid.UUID
	for range pollWindow + 50 {
		id := uuid.New()
		all = append(all, id)
		tr.watch(id, make(chan struct{}))
	}

	ids, n := tr.polled(nil, false)
	if n != len(all) || !slices.Equal(ids, all[:pollWindow]) {
		t.Fatalf("window poll: got %d ids of %d watched, want the oldest %d of %d", len(ids), n, pollWindow, len(all))
	}

	// Ended (or forgotten) sagas leave the window; younger ones move in.
	for _, id := range all[:10] {
		tr.forget(id)
	}
	ids, n = tr.polled(ids, false)
	if n != len(all)-10 || !slices.Equal(ids, all[10:10+pollWindow]) {
		t.Fatalf("after 10 ended: got %d ids of %d watched, want ids %d..%d of %d", len(ids), n, 10, 10+pollWindow, len(all)-10)
	}

	ids, _ = tr.polled(ids, true)
	if !slices.Equal(ids, all[10:]) {
		t.Fatalf("full poll: got %d ids, want all %d watched in order", len(ids), len(all)-10)
	}
	if len(tr.order) != len(all)-10 {
		t.Fatalf("order keeps %d ids, want %d (ended ones dropped)", len(tr.order), len(all)-10)
	}
}
