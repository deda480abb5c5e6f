package demo

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestUseEmbedded(t *testing.T) {
	up := func() error { return nil }
	down := func() error { return errors.New("connection refused") }
	for _, c := range []struct {
		name              string
		asked, configured bool
		probe             func() error
		want              bool
	}{
		{"asked, configured, answering", true, true, up, true},
		{"asked, configured, dead", true, true, down, true},
		{"asked, default answering", true, false, up, true},
		{"asked, default dead", true, false, down, true},
		{"configured and answering", false, true, up, false},
		{"configured but dead: an error to report", false, true, down, false},
		{"nothing configured, default answering", false, false, up, false},
		{"nothing configured, default dead", false, false, down, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			probed := false
			probe := func() error { probed = true; return c.probe() }
			got, reason := UseEmbedded(c.asked, c.configured, probe)
			if got != c.want || reason == "" {
				t.Fatalf("UseEmbedded = %v (%q), want %v", got, reason, c.want)
			}
			if probed != (!c.asked && !c.configured) {
				t.Fatalf("probed = %v: the default address is probed only when nothing is asked or configured", probed)
			}
		})
	}
}

func TestProbeDeadAddress(t *testing.T) {
	port, err := freePort() // released: nothing listens there
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := Probe(context.Background(), "postgres://postgres@127.0.0.1:"+strconv.Itoa(port)+"/postgres?sslmode=disable", 2*time.Second); err == nil {
		t.Fatal("Probe of a dead port succeeded")
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("Probe took %s, want bounded", d)
	}
}

func TestFindPostgresBinaries(t *testing.T) {
	root := t.TempDir()
	mk := func(version string) {
		bin := filepath.Join(root, version, "bin")
		if err := os.MkdirAll(bin, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"initdb", "postgres"} {
			if err := os.WriteFile(filepath.Join(bin, p), []byte("#!/bin/sh\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	mk("9.6")
	mk("15")
	mk("13")
	if err := os.MkdirAll(filepath.Join(root, "17", "bin"), 0o755); err != nil { // no binaries: skipped
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "common"), 0o755); err != nil { // not a version
		t.Fatal(err)
	}
	notOnPath := func(string) (string, error) { return "", exec.ErrNotFound }
	b, err := binaryFinder{lookPath: notOnPath, libRoot: root}.find()
	if err != nil || b.Initdb != filepath.Join(root, "15", "bin", "initdb") || b.Postgres != filepath.Join(root, "15", "bin", "postgres") {
		t.Fatalf("find = %+v, %v; want version 15's", b, err)
	}
	onPath := func(name string) (string, error) { return "/opt/pg/bin/" + name, nil }
	if b, err := (binaryFinder{lookPath: onPath, libRoot: root}).find(); err != nil || b.Initdb != "/opt/pg/bin/initdb" || b.Postgres != "/opt/pg/bin/postgres" {
		t.Fatalf("find with both on $PATH = %+v, %v", b, err)
	}
	if _, err := (binaryFinder{lookPath: notOnPath, libRoot: filepath.Join(root, "none")}).find(); !errors.Is(err, ErrNoPostgresBinaries) {
		t.Fatalf("find with none = %v, want ErrNoPostgresBinaries", err)
	}
	if ErrNoPostgresBinaries.Error() == "" || !strings.Contains(ErrNoPostgresBinaries.Error(), "apt-get install postgresql") {
		t.Fatalf("the error must say what to install: %v", ErrNoPostgresBinaries)
	}
}

// TestEmbeddedPostgres runs the real thing: the machine's server binaries
// (skipped when there are none), as root here (the server runs as nobody).
func TestEmbeddedPostgres(t *testing.T) {
	if _, err := FindPostgresBinaries(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI needs the Postgres server binaries for this test: %v", err)
		}
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := StartEmbeddedPostgres(ctx, EmbeddedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = p.Stop()
		}
	}()
	dataDir := p.DataDir()
	if len(ServerProcesses(dataDir)) == 0 {
		t.Fatalf("no server process of %s found in /proc", dataDir)
	}
	if os.Geteuid() == 0 {
		st, err := os.ReadFile("/proc/" + strconv.Itoa(p.PID()) + "/status")
		if err != nil || !strings.Contains(string(st), "\nUid:\t65534\t") {
			t.Fatalf("as root, the server must run as nobody; /proc status: %v\n%s", err, st)
		}
	}
	conn, err := pgx.Connect(ctx, p.URL())
	if err != nil {
		t.Fatal(err)
	}
	var fsync string
	if err := conn.QueryRow(ctx, "SHOW fsync").Scan(&fsync); err != nil || fsync != "off" {
		t.Fatalf("fsync = %q, %v", fsync, err)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE sagaflow_demo_test"); err != nil {
		t.Fatal(err)
	}
	// A session still open at Stop: the fast shutdown ends it.
	defer conn.Close(context.Background())
	if err := Probe(ctx, strings.Replace(p.URL(), "//postgres:", "//postgres:x", 1), time.Second); err == nil {
		t.Fatal("a wrong password was accepted over TCP")
	}

	start := time.Now()
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	stopped = true
	t.Logf("stopped in %s", time.Since(start))
	if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
		t.Fatalf("data dir %s still there: %v", dataDir, err)
	}
	if left := ServerProcesses(dataDir); len(left) > 0 {
		t.Fatalf("postgres processes %v of %s left running", left, dataDir)
	}
	if err := Probe(ctx, p.URL(), time.Second); err == nil {
		t.Fatal("the server still answers after Stop")
	}
	if err := p.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
}

func TestSweepStale(t *testing.T) {
	root := t.TempDir()
	stale := filepath.Join(root, tempPrefix+"1")
	fresh := filepath.Join(root, tempPrefix+"2")
	other := filepath.Join(root, "someone-else")
	for _, d := range []string{stale, fresh, other} {
		if err := os.MkdirAll(filepath.Join(d, "data"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-2 * staleAfter)
	for _, d := range []string{stale, other} {
		if err := os.Chtimes(d, old, old); err != nil {
			t.Fatal(err)
		}
	}
	sweepStale(slog.New(slog.DiscardHandler), root)
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("stale %s not removed: %v", stale, err)
	}
	for _, d := range []string{fresh, other} {
		if _, err := os.Stat(d); err != nil {
			t.Fatalf("%s removed: %v", d, err)
		}
	}
}
