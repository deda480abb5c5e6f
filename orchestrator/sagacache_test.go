package orchestrator

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/saga"
)

func keptDecision(id uuid.UUID, version int64, state saga.State) saga.Decision {
	at := time.Date(2026, 12, 4, 10, 0, 0, 123456789, time.UTC)
	return saga.Decision{Changed: true, Next: saga.Instance{ID: id, Version: version, State: state, CreatedAt: at, UpdatedAt: at,
		Steps: []saga.StepState{{Name: "a"}, {Name: "b"}}, Cursor: 1}}
}

// The cache gives a batch all its sagas or none, taking them out; keeps
// only what changed, the newest version of each, nothing finished; stays
// within its size; and keeps each saga as its row reads back.
func TestSagaCache(t *testing.T) {
	a, b, c := uuid.New(), uuid.New(), uuid.New()
	k := newSagaCache(2)
	k.keep([]saga.Decision{keptDecision(a, 2, saga.Running), {Changed: false, Next: saga.Instance{ID: b, Version: 1}}})
	if _, ok := k.take([]uuid.UUID{a, b}); ok {
		t.Fatal("took a batch with a saga never kept (b: its decision changed nothing)")
	}
	if keptLen(k) != 1 {
		t.Fatalf("a failed take left %d kept, want a still kept", keptLen(k))
	}
	got, ok := k.take([]uuid.UUID{a})
	if !ok || got[a].Version != 2 || keptLen(k) != 0 {
		t.Fatalf("take(a) = %v %v with %d left; want version 2, none left", got, ok, keptLen(k))
	}
	in := got[a]
	if in.CreatedAt.Nanosecond() != 123456000 || in.Cursor != 1 {
		t.Fatalf("kept %v cursor %d; want the time at the microsecond, cursor at b", in.CreatedAt, in.Cursor)
	}
	k.keep([]saga.Decision{keptDecision(a, 4, saga.Running)})
	k.keep([]saga.Decision{keptDecision(a, 3, saga.Running)}) // committed earlier, kept later
	if got, _ := k.take([]uuid.UUID{a}); got[a].Version != 4 {
		t.Fatalf("kept version %d, want the newest, 4", got[a].Version)
	}
	k.keep([]saga.Decision{keptDecision(a, 5, saga.Running)})
	k.keep([]saga.Decision{keptDecision(a, 6, saga.Completed)})
	if _, ok := k.take([]uuid.UUID{a}); ok {
		t.Fatal("a finished saga is still kept")
	}
	k.keep([]saga.Decision{keptDecision(a, 1, saga.Running), keptDecision(b, 1, saga.Running), keptDecision(c, 1, saga.Running)})
	if keptLen(k) != 2 {
		t.Fatalf("%d kept, want at most 2", keptLen(k))
	}
	if newSagaCache(0) != nil || newSagaCache(-1) != nil {
		t.Fatal("a cache of no size is not nil")
	}
	var none *sagaCache
	none.keep([]saga.Decision{keptDecision(a, 1, saga.Running)})
	if _, ok := none.take([]uuid.UUID{a}); ok || keptLen(none) != 0 {
		t.Fatal("a nil cache kept something")
	}
}

// keptLen is how many sagas c keeps.
func keptLen(c *sagaCache) int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
