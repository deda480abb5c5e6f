package conformance_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"

	"github.com/segmentio/kafka-go"
	"go.uber.org/goleak"

	"github.com/sagaflow/sagaflow/internal/goparticipant"
)

// selfEnv, when set in the environment of this test binary, makes it the
// participant under test instead of running tests: "go" is the Go
// participant of the conformance step, "broken" the same skipping its
// barrier, "noverify" the same executing commands whatever their
// signature. The kit starts it with selfCommand.
const selfEnv = "SAGAFLOW_CONFORMANCE_TEST_PARTICIPANT"

func TestMain(m *testing.M) {
	if mode := os.Getenv(selfEnv); mode != "" {
		os.Exit(serveParticipant(mode))
	}
	code := m.Run()
	if tr, ok := kafka.DefaultTransport.(*kafka.Transport); ok {
		tr.CloseIdleConnections()
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

func serveParticipant(mode string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	env, err := goparticipant.EnvFromOS()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	env.Broken = mode == "broken"
	env.NoVerify = mode == "noverify"
	env.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if err := goparticipant.Run(ctx, env); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// selfCommand is the shell command that starts this test binary as the
// participant of mode.
func selfCommand(t testing.TB, mode string) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("test binary: %v", err)
	}
	return fmt.Sprintf("%s=%s exec '%s' -test.run='^$'", selfEnv, mode, strings.ReplaceAll(exe, "'", `'\''`))
}
