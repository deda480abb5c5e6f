package bench

import (
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/sagaflow/sagaflow/internal/testkit"
)

// fakeWorker stands in for the worker subcommand: the orchestrator says
// something on stderr, becomes ready and exits 4; the participants become
// ready and run until their stdin (the driver's pipe) closes, then exit 0
// (SIGTERM is trapped).
const fakeWorker = `case "$1" in
--role=orchestrator) echo "boom" >&2; echo ready; exit 4;;
*) trap 'exit 0' TERM; echo ready; cat >/dev/null;;
esac`

// A worker that dies mid-run fails the run at once, naming the worker
// and its exit status, instead of waiting out the saga timeout; its log
// lines reach Stderr with its role as prefix.
func TestSplitFailsWhenAWorkerExits(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, time.Minute)
	db := "sagaflow_bench_split_fail_" + testkit.RandomSuffix(6)
	t.Cleanup(func() { testkit.DropDatabase(t, db) })
	var stderr testkit.Output
	start := time.Now()
	_, err := Run(ctx, Config{
		DatabaseURL: testkit.AdminURL(), Database: db, Brokers: testkit.Brokers(t),
		Steps: 1, Warmup: 5, Sagas: 10, Concurrency: 2, MaxConns: 2, Timeout: 40 * time.Second,
		Split: true, Worker: []string{"/bin/sh", "-c", fakeWorker, "sh"}, Stderr: &stderr,
	})
	if err == nil || !strings.Contains(err.Error(), "orchestrator worker") || !strings.Contains(err.Error(), "exit status 4") ||
		strings.Contains(err.Error(), "participants") {
		t.Fatalf("Run: err = %v, want one naming the orchestrator worker and exit status 4 only", err)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Fatalf("Run took %s to notice the exit", took)
	}
	if !strings.Contains(stderr.String(), "[orchestrator] boom\n") {
		t.Fatalf("stderr %q: want the worker's line with its prefix", stderr.String())
	}
}

func TestLineWriterPrefixesWholeLines(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	var got []string
	w := &lineWriter{prefix: "[x] ", out: &out, line: func(l []byte) bool {
		got = append(got, string(l))
		return string(l) == WorkerReady
	}}
	for _, s := range []string{"a", "b\nre", "ady\nc\n", "tail"} {
		if _, err := w.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	w.flush()
	if want := "[x] ab\n[x] c\n[x] tail\n"; out.String() != want {
		t.Fatalf("out %q, want %q", out.String(), want)
	}
	if strings.Join(got, ",") != "ab,ready,c,tail" {
		t.Fatalf("lines %q", got)
	}
}

func TestWorkerArgsRoundTrip(t *testing.T) {
	t.Parallel()
	// The flags Args writes are the flags AddFlags reads.
	in := WorkerConfig{Role: RoleParticipants, Brokers: []string{"h1:9092", "h2:9092"}, Saga: SagaPlaceOrder, Steps: 7,
		Lanes: 3, BatchForward: true, MaxConns: 9, Seed: 42, LogLevel: 8}
	in.Engine.Schema, in.Engine.ReplyTopic, in.Engine.TopicPrefix = "s", "r", "p."
	in.Engine.TimerInterval, in.Engine.TimerBatch, in.Engine.GaugeInterval = 50*time.Millisecond, 17, time.Second
	var out WorkerConfig
	fs := pflag.NewFlagSet("worker", pflag.ContinueOnError)
	out.AddFlags(fs)
	if err := fs.Parse(in.Args()); err != nil {
		t.Fatal(err)
	}
	if out.Role != in.Role || strings.Join(out.Brokers, ",") != "h1:9092,h2:9092" || out.Saga != in.Saga || out.Steps != 7 ||
		out.Lanes != 3 || !out.BatchForward || out.MaxConns != 9 || out.Seed != 42 || out.LogLevel != 8 || out.Engine.Schema != "s" ||
		out.Engine.ReplyTopic != "r" || out.Engine.TopicPrefix != "p." || out.Engine.TimerInterval != in.Engine.TimerInterval ||
		out.Engine.TimerBatch != 17 || out.Engine.GaugeInterval != time.Second {
		t.Fatalf("parsed %+v from %q, want %+v", out, in.Args(), in)
	}
}

func TestLoggerLevel(t *testing.T) {
	t.Parallel()
	if lv := loggerLevel(slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))); lv != slog.LevelWarn {
		t.Fatalf("level of a warn logger: %v", lv)
	}
	if lv := loggerLevel(slog.New(slog.DiscardHandler)); lv <= slog.LevelError {
		t.Fatalf("level of a discarding logger: %v, want above error", lv)
	}
}
