package cli

import (
	"os"
	"strings"
	"testing"
)

// The README's configuration reference must list every key the code reads.
func TestReadmeDocumentsEveryKey(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	for _, k := range Keys {
		if !strings.Contains(readme, "| `"+k.Name+"` |") {
			t.Errorf("README.md configuration table lacks key %q (regenerate it with `go run ./cmd/orchestrator config`)", k.Name)
		}
	}
}
