package demo

// A throwaway Postgres for the demo, from the machine's own server binaries
// (initdb and postgres; nothing is downloaded): a fresh cluster in a
// temporary directory, listening on 127.0.0.1 on a free port with a
// generated password, stopped and removed when the demo ends.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sagaflow/sagaflow/internal/tail"

	"github.com/sagaflow/sagaflow/internal/dburl"

	"github.com/jackc/pgx/v5"
)

// Embedded-server bounds.
const (
	// embeddedReadyTimeout bounds the wait for a started server to accept
	// connections.
	embeddedReadyTimeout = 30 * time.Second
	// embeddedStopTimeout bounds a fast shutdown before the server is
	// killed.
	embeddedStopTimeout = 15 * time.Second
	// embeddedUser is the server's superuser.
	embeddedUser = "postgres"
	// tempPrefix names the servers' temporary directories.
	tempPrefix = "sagaflow-demo-pg-"
	// staleAfter: a directory of ours this old with no server running in
	// it was left by a demo that was killed (SIGKILL: its server was
	// stopped by the kernel's parent-death signal, but nobody removed it).
	staleAfter = 10 * time.Minute
	// unprivilegedUser runs the server when the demo runs as root (initdb
	// and postgres refuse to run as root).
	unprivilegedUser = "nobody"
)

// ErrNoPostgresBinaries is returned when no Postgres server binaries are
// found.
var ErrNoPostgresBinaries = errors.New("no Postgres server binaries found (initdb and postgres on $PATH or in /usr/lib/postgresql/<version>/bin): install them (Debian/Ubuntu: apt-get install postgresql; Fedora: dnf install postgresql-server; macOS: brew install postgresql) or point database.url (SAGAFLOW_DATABASE_URL, --database-url) at a running server")

// UseEmbedded decides whether the demo starts a throwaway Postgres: always
// when asked (--embedded-postgres), never when database.url was configured
// (a configured server that does not answer is an error to report, not to
// paper over), and otherwise when the default address does not answer
// (probe's error). The reason says why, for the log.
func UseEmbedded(asked, configured bool, probe func() error) (bool, string) {
	switch {
	case asked:
		return true, "asked for (--embedded-postgres)"
	case configured:
		return false, "database.url is configured"
	}
	if err := probe(); err != nil {
		return true, "no Postgres answers at the default address: " + err.Error()
	}
	return false, "Postgres answers at the default address"
}

// Postgres returns the Postgres URL to run on: dsn, or, when UseEmbedded
// says so (asked, configured, a probe of dsn bounded by probeTimeout), the
// URL of a throwaway server it starts. stop stops that server (nothing to
// do for dsn); the caller must call it.
func Postgres(ctx context.Context, asked, configured bool, dsn string, probeTimeout time.Duration, log *slog.Logger) (url string, stop func() error, err error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	use, reason := UseEmbedded(asked, configured, func() error { return Probe(ctx, dsn, probeTimeout) })
	if !use {
		return dsn, func() error { return nil }, nil
	}
	log.Info("starting a throwaway Postgres", slog.String("reason", reason))
	pg, err := StartEmbeddedPostgres(ctx, EmbeddedOptions{Logger: log})
	if err != nil {
		return "", nil, err
	}
	return pg.URL(), pg.Stop, nil
}

// Probe reports whether a Postgres server answers at dsn within timeout
// (connects, authenticates and answers a ping).
func Probe(ctx context.Context, dsn string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return conn.Ping(ctx)
}

// PostgresBinaries are the server programs of one installation.
type PostgresBinaries struct {
	Initdb, Postgres string
}

// binaryFinder finds the server programs: on $PATH (lookPath), else in the
// highest version's directory under libRoot (<libRoot>/<version>/bin).
type binaryFinder struct {
	lookPath func(string) (string, error)
	libRoot  string
}

// FindPostgresBinaries finds initdb and postgres: on $PATH, else in
// /usr/lib/postgresql/<version>/bin of the highest version installed
// (Debian's and Ubuntu's layout), else ErrNoPostgresBinaries.
func FindPostgresBinaries() (PostgresBinaries, error) {
	return binaryFinder{lookPath: exec.LookPath, libRoot: "/usr/lib/postgresql"}.find()
}

func (f binaryFinder) find() (PostgresBinaries, error) {
	if i, err := f.lookPath("initdb"); err == nil {
		if p, err := f.lookPath("postgres"); err == nil {
			return PostgresBinaries{Initdb: i, Postgres: p}, nil
		}
	}
	entries, _ := os.ReadDir(f.libRoot)
	var versions []string
	for _, e := range entries {
		if versionKey(e.Name()) != nil {
			versions = append(versions, e.Name())
		}
	}
	slices.SortFunc(versions, func(a, b string) int { return slices.Compare(versionKey(b), versionKey(a)) })
	for _, v := range versions {
		bin := filepath.Join(f.libRoot, v, "bin")
		b := PostgresBinaries{Initdb: filepath.Join(bin, "initdb"), Postgres: filepath.Join(bin, "postgres")}
		if executable(b.Initdb) && executable(b.Postgres) {
			return b, nil
		}
	}
	return PostgresBinaries{}, ErrNoPostgresBinaries
}

// versionKey is a version directory's name as numbers ("9.6" -> [9 6],
// "15" -> [15]); nil if it is not a version.
func versionKey(name string) []int {
	var key []int
	for part := range strings.SplitSeq(name, ".") {
		n, err := strconv.Atoi(part)
		if err != nil || n < 0 {
			return nil
		}
		key = append(key, n)
	}
	return key
}

func executable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

// EmbeddedPostgres is a running throwaway server.
type EmbeddedPostgres struct {
	url     string
	dir     string // temporary directory: data/ and the unix socket
	dataDir string
	cmd     *exec.Cmd
	exited  chan struct{} // closed when the postmaster has exited
	waitErr error
	log     *slog.Logger
	out     *tail.Buffer
	once    sync.Once
	stopErr error
}

// EmbeddedOptions configures StartEmbeddedPostgres.
type EmbeddedOptions struct {
	// Binaries: zero finds them (FindPostgresBinaries).
	Binaries PostgresBinaries
	Logger   *slog.Logger
}

// StartEmbeddedPostgres initialises a cluster in a new temporary directory
// and starts its server on 127.0.0.1 on a free port; it returns once the
// server accepts connections (bounded). When the process runs as root the
// server runs as the unprivileged user nobody. The server runs with fsync,
// synchronous_commit and full_page_writes off: fast, and nothing in it is
// meant to survive a crash. Stop stops it and removes the directory; the
// caller must call it (also on errors and signals). A server whose parent
// dies is sent SIGINT by the kernel (Linux), so it does not outlive a
// killed demo.
func StartEmbeddedPostgres(ctx context.Context, opts EmbeddedOptions) (*EmbeddedPostgres, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	bins := opts.Binaries
	if bins.Initdb == "" || bins.Postgres == "" {
		var err error
		if bins, err = FindPostgresBinaries(); err != nil {
			return nil, err
		}
	}
	cred, err := serverCredential()
	if err != nil {
		return nil, err
	}
	sweepStale(log, os.TempDir())
	dir, err := os.MkdirTemp("", tempPrefix)
	if err != nil {
		return nil, fmt.Errorf("embedded postgres: %w", err)
	}
	p := &EmbeddedPostgres{dir: dir, dataDir: filepath.Join(dir, "data"), log: log, out: tail.New(16 << 10)}
	ok := false
	defer func() {
		if !ok {
			_ = p.Stop()
		}
	}()
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, fmt.Errorf("embedded postgres: hand %s to %s: %w", dir, unprivilegedUser, err)
		}
	}
	password, err := randomHex(16)
	if err != nil {
		return nil, err
	}
	pwFile := filepath.Join(dir, "pwfile")
	if err := os.WriteFile(pwFile, []byte(password+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("embedded postgres: %w", err)
	}
	if cred != nil {
		if err := os.Chown(pwFile, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, fmt.Errorf("embedded postgres: %w", err)
		}
	}
	initdb := exec.CommandContext(ctx, bins.Initdb, "-D", p.dataDir, "-U", embeddedUser, "--pwfile="+pwFile,
		"--auth-local=trust", "--auth-host=scram-sha-256", "--encoding=UTF8", "--no-locale", "--no-sync")
	initdb.Dir, initdb.Env = dir, serverEnv()
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true}
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("embedded postgres: %s: %w\n%s", bins.Initdb, err, lastBytes(out, 4<<10))
	}
	_ = os.Remove(pwFile)

	// A free port is found by binding and releasing it; another process
	// may take it in between, so a server that fails to start is retried
	// on another port.
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, fmt.Errorf("embedded postgres: free port: %w", err)
		}
		err = p.start(ctx, bins.Postgres, cred, port)
		if err == nil {
			u := url.URL{Scheme: "postgres", User: url.UserPassword(embeddedUser, password),
				Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Path: "/postgres", RawQuery: "sslmode=disable"}
			p.url = u.String()
			if err = p.waitReady(ctx); err == nil {
				break
			}
		}
		if ctx.Err() != nil || attempt == 3 || !p.hasExited() {
			return nil, err
		}
		log.Debug("embedded postgres did not start; retrying on another port", slog.String("error", err.Error()))
	}
	ok = true
	log.Info("throwaway Postgres started (fsync off; removed on exit)", slog.String("url", dburl.Redact(p.url)),
		slog.String("data_dir", p.dataDir), slog.String("server", bins.Postgres))
	return p, nil
}

// start starts the postmaster on port.
func (p *EmbeddedPostgres) start(ctx context.Context, bin string, cred *syscall.Credential, port int) error {
	p.out.Reset()
	cmd := exec.Command(bin, "-D", p.dataDir, "-p", strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="+p.dir,
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=200", "-c", "log_min_messages=warning", "-c", "logging_collector=off")
	cmd.Dir, cmd.Env = p.dir, serverEnv()
	cmd.Stdout, cmd.Stderr = p.out, p.out
	// Own process group: a Ctrl-C at the terminal reaches the demo, which
	// stops the server itself, not the server directly. Pdeathsig: the
	// server gets a fast shutdown if the demo dies without stopping it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGINT}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("embedded postgres: start %s: %w", bin, err)
	}
	p.cmd, p.exited = cmd, make(chan struct{})
	exited := p.exited
	go func() {
		p.waitErr = cmd.Wait()
		close(exited)
	}()
	return nil
}

func (p *EmbeddedPostgres) hasExited() bool {
	if p.exited == nil {
		return true
	}
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// waitReady waits until the server accepts connections, it exits, ctx
// ends or embeddedReadyTimeout passes.
func (p *EmbeddedPostgres) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(embeddedReadyTimeout)
	var last error
	for {
		if p.hasExited() {
			return fmt.Errorf("embedded postgres exited while starting (%v):\n%s", p.waitErr, p.out.String())
		}
		if last = Probe(ctx, p.url, time.Second); last == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("embedded postgres did not accept connections within %s: %w\n%s", embeddedReadyTimeout, last, p.out.String())
		}
		select {
		case <-ctx.Done():
		case <-p.exited:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// URL is the server's connection URL (with its generated password).
func (p *EmbeddedPostgres) URL() string { return p.url }

// DataDir is the server's data directory (removed by Stop).
func (p *EmbeddedPostgres) DataDir() string { return p.dataDir }

// PID is the postmaster's process id (0 before it started).
func (p *EmbeddedPostgres) PID() int {
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Stop stops the server (a fast shutdown: sessions are ended; killed if it
// does not stop within embeddedStopTimeout), makes sure no process of it
// is left, and removes its directory. It is safe to call more than once.
func (p *EmbeddedPostgres) Stop() error {
	p.once.Do(func() {
		var errs []error
		if p.cmd != nil && !p.hasExited() {
			_ = p.cmd.Process.Signal(syscall.SIGINT)
			select {
			case <-p.exited:
			case <-time.After(embeddedStopTimeout):
				p.log.Warn("throwaway Postgres did not stop in time; killing it", slog.Duration("timeout", embeddedStopTimeout))
				_ = p.cmd.Process.Kill()
				<-p.exited
			}
		}
		// The postmaster waits for its children in a fast shutdown; after a
		// kill they exit on noticing it is gone. Either way, none may stay.
		if left := waitGone(p.dataDir, 5*time.Second); len(left) > 0 {
			for _, pid := range left {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			if left = waitGone(p.dataDir, 2*time.Second); len(left) > 0 {
				errs = append(errs, fmt.Errorf("embedded postgres: processes %v of %s are still running", left, p.dataDir))
			}
		}
		if err := os.RemoveAll(p.dir); err != nil {
			errs = append(errs, fmt.Errorf("embedded postgres: remove %s: %w", p.dir, err))
		}
		p.stopErr = errors.Join(errs...)
		if p.stopErr == nil && p.url != "" {
			p.log.Info("throwaway Postgres stopped and removed", slog.String("data_dir", p.dataDir))
		}
	})
	return p.stopErr
}

// sweepStale removes the directories under parent of earlier demos that were killed
// before they could remove them: older than staleAfter, no process in them.
func sweepStale(log *slog.Logger, parent string) {
	dirs, _ := filepath.Glob(filepath.Join(parent, tempPrefix+"*"))
	for _, d := range dirs {
		st, err := os.Stat(d)
		if err != nil || !st.IsDir() || time.Since(st.ModTime()) < staleAfter {
			continue
		}
		data := filepath.Join(d, "data")
		if len(ServerProcesses(data)) > 0 {
			continue
		}
		if err := os.RemoveAll(d); err == nil {
			log.Info("removed the directory of a throwaway Postgres left by a killed demo", slog.String("dir", d))
		}
	}
}

// waitGone waits up to d for ServerProcesses(dataDir) to be none and
// returns those left.
func waitGone(dataDir string, d time.Duration) []int {
	deadline := time.Now().Add(d)
	for {
		left := ServerProcesses(dataDir)
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ServerProcesses lists the processes of the server of dataDir, from
// /proc (Linux; none elsewhere): the postmaster names it on its command
// line, and it and every backend work in it (their current directory).
func ServerProcesses(dataDir string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		base := filepath.Join("/proc", e.Name())
		cwd, _ := os.Readlink(filepath.Join(base, "cwd"))
		cmdline, _ := os.ReadFile(filepath.Join(base, "cmdline"))
		if cwd == dataDir || strings.HasPrefix(cwd, dataDir+" ") || strings.HasPrefix(cwd, dataDir+"/") ||
			slices.Contains(strings.Split(string(cmdline), "\x00"), dataDir) {
			if pid != os.Getpid() {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// serverCredential is the user the server runs as: nil (this process's)
// unless this process is root, then nobody.
func serverCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(unprivilegedUser)
	if err != nil {
		return nil, fmt.Errorf("embedded postgres: running as root, the server must run as an unprivileged user, but %s: %w", unprivilegedUser, err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("embedded postgres: user %s: %w", unprivilegedUser, err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

// serverEnv is the servers' environment: this one's without the libpq
// variables and locale settings (the cluster is C/UTF8).
func serverEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "LC_") || strings.HasPrefix(kv, "LANG") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "LC_ALL=C")
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

func lastBytes(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.TrimSpace(string(b))
}
