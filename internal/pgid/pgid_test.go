package pgid

import (
	"strings"
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

func TestValidIdentifier(t *testing.T) {
	long := strings.Repeat("a", 63)
	for name, want := range map[string]bool{
		"sagaflow": true, "_x": true, "a1_b2": true, long: true,
		"": false, "1a": false, "Saga": false, "a-b": false, "a.b": false, `a"b`: false, long + "a": false,
	} {
		if got := ValidIdentifier(name); got != want {
			t.Errorf("ValidIdentifier(%q) = %v, want %v", name, got, want)
		}
	}
}
