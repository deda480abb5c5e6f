package conformance_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/participants/conformance"
)

// nodeDir is the Node.js participant, from this package.
var nodeDir = filepath.Join("..", "..", "examples", "node-participant")

// unavailable fails the test under CI=true and skips it otherwise: what it
// needs (node, npm, the npm registry) is missing.
func unavailable(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format+" (this fails under CI=true)", args...)
}

// TestKitNodeParticipant installs the Node.js participant's locked
// dependencies (npm ci) and runs the kit against it, with its replies on
// the murmur2 partitions, and against the Go participant, on one broker.
func TestKitNodeParticipant(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			unavailable(t, "%s is not on PATH: %v", tool, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	npm := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund")
	npm.Dir = nodeDir
	if out, err := npm.CombinedOutput(); err != nil {
		unavailable(t, "npm ci in %s: %v\n%s", nodeDir, err, out)
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	brokers := testkit.Brokers(t)
	suffix := testkit.RandomSuffix(3)
	requireAllPassed(t, runKit(t, brokers, "inventory_"+suffix, "node examples/node-participant/index.js", root, conformance.PartitionerMurmur2))
	requireAllPassed(t, runKit(t, brokers, "payment_"+suffix, selfCommand(t, "go"), "", goRelayPartitioner))
}

// TestNodeParticipantSignatures runs the Node participant's own tests of
// its record signatures (examples/node-participant/test: the worked
// example the Go tests check, tampered records, keys), with node --test.
func TestNodeParticipantSignatures(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("node"); err != nil {
		unavailable(t, "node is not on PATH: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "--test", "test/")
	cmd.Dir = nodeDir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test in %s: %v\n%s", nodeDir, err, out)
	}
	t.Logf("%s", out)
}
