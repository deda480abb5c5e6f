package cli

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/sagaflow/sagaflow/internal/demo"
)

func TestDatabaseConfigured(t *testing.T) {
	newCmd := func() (*cobra.Command, *cobra.Command) {
		root := Root(io.Discard, io.Discard)
		cmd, _, err := root.Find([]string{"demo"})
		if err != nil {
			t.Fatal(err)
		}
		return root, cmd
	}
	t.Run("nothing", func(t *testing.T) {
		t.Setenv("SAGAFLOW_DATABASE_URL", "")
		_, cmd := newCmd()
		if databaseConfigured(cmd, newViper()) {
			t.Fatal("configured with nothing set")
		}
	})
	t.Run("flag", func(t *testing.T) {
		t.Setenv("SAGAFLOW_DATABASE_URL", "")
		root, cmd := newCmd()
		if err := root.PersistentFlags().Set("database-url", "postgres://h/db"); err != nil {
			t.Fatal(err)
		}
		if !databaseConfigured(cmd, newViper()) {
			t.Fatal("--database-url not seen")
		}
	})
	t.Run("environment", func(t *testing.T) {
		t.Setenv("SAGAFLOW_DATABASE_URL", "postgres://h/db")
		_, cmd := newCmd()
		if !databaseConfigured(cmd, newViper()) {
			t.Fatal("SAGAFLOW_DATABASE_URL not seen")
		}
	})
	t.Run("config file", func(t *testing.T) {
		t.Setenv("SAGAFLOW_DATABASE_URL", "")
		_, cmd := newCmd()
		dir := t.TempDir()
		for name, body := range map[string]string{"with.yaml": "database:\n  url: postgres://h/db\n", "without.yaml": "demo:\n  orders: 5\n"} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		v := newViper()
		if err := loadFile(v, filepath.Join(dir, "with.yaml")); err != nil {
			t.Fatal(err)
		}
		if !databaseConfigured(cmd, v) {
			t.Fatal("database.url of the config file not seen")
		}
		v = newViper()
		if err := loadFile(v, filepath.Join(dir, "without.yaml")); err != nil {
			t.Fatal(err)
		}
		if databaseConfigured(cmd, v) {
			t.Fatal("a config file without database.url counted as configuring it")
		}
	})
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestDemoEmbeddedUI runs `demo --embedded-postgres --ui` for real: the
// summary, then the status page answering on the demo's sagas until the
// context ends (Ctrl-C), then the throwaway server stopped and removed.
func TestDemoEmbeddedUI(t *testing.T) {
	if _, err := demo.FindPostgresBinaries(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI needs the Postgres server binaries for this test: %v", err)
		}
		t.Skip(err)
	}
	// A configured server that does not answer: --embedded-postgres wins.
	t.Setenv("SAGAFLOW_DATABASE_URL", "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuffer
	root := Root(&stdout, &stderr)
	root.SetArgs([]string{"demo", "--embedded-postgres", "--ui", "--orders", "20", "--log-level", "warn"})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()

	page := regexp.MustCompile(`status page: (http://\S+/ui/)`)
	deadline := time.Now().Add(90 * time.Second)
	var url string
	for url == "" {
		if m := page.FindStringSubmatch(stdout.String()); m != nil {
			url = m[1]
			break
		}
		select {
		case err := <-done:
			t.Fatalf("demo returned before serving the status page: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no status page URL within 90s\nstdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
		}
	}
	out := stdout.String()
	if i, j := strings.Index(out, "invariants: OK"), strings.Index(out, "status page:"); i < 0 || j < i {
		t.Fatalf("want the summary (invariants OK), then the status page URL:\n%s", out)
	}

	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "place-order") {
		t.Fatalf("GET %s: %d\n%.2000s", url, resp.StatusCode, body)
	}

	cancel() // Ctrl-C
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("demo after Ctrl-C: %v\nstderr:\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("demo did not stop within 30s of Ctrl-C")
	}
	if _, err := client.Get(url); err == nil {
		t.Fatal("the status page still answers after the demo ended")
	}
}
