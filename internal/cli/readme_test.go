package cli

import (
	"os"
	"strings"
	"testing"
)

// docs/configuration.md must list every key the code reads, one table row
// per key, so the reference cannot fall behind the code.
func TestReadmeDocumentsEveryKey(t *testing.T) {
	t.Parallel()
	const path = "../../docs/configuration.md"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, k := range Keys {
		if !strings.Contains(doc, "| `"+k.Name+"` |") {
			t.Errorf("%s configuration table lacks key %q (regenerate it with `go run ./cmd/orchestrator config`)", path, k.Name)
		}
	}
}
