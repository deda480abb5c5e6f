package pgid

import (
	"testing"

	"github.com/google/uuid"
)

func TestUUIDs(t *testing.T) {
	ids := []uuid.UUID{uuid.New(), uuid.Nil, uuid.New()}
	got := UUIDs(ids)
	if len(got) != len(ids) {
		t.Fatalf("%d values for %d ids", len(got), len(ids))
	}
	for i, g := range got {
		if !g.Valid || uuid.UUID(g.Bytes) != ids[i] {
			t.Fatalf("value %d = %v, want %s (valid)", i, g, ids[i])
		}
	}
}
