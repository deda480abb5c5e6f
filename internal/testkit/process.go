package testkit

import (
	"bytes"
	"context"
	"net"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// Output collects a child process's output; safe for the child's writes
// and the test's reads at once.
type Output struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.Write(p)
}

func (o *Output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}

// BuildBinary builds cmd/orchestrator into a temporary directory; moduleDir
// is the path from the test's package to the module root (e.g. "..").
func BuildBinary(t testing.TB, moduleDir string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "orchestrator")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/orchestrator")
	cmd.Dir = moduleDir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("testkit: go build ./cmd/orchestrator: %v\n%s", err, out)
	}
	return bin
}

// FreeAddr returns a loopback address whose port was free a moment ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testkit: free port: %v", err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatalf("testkit: free port: %v", err)
	}
	return addr
}
