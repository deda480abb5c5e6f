package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

const (
	// workerReadyTimeout bounds the wait for a worker's WorkerReady line.
	workerReadyTimeout = time.Minute
	// workerStopGrace is how long a worker has to exit after SIGTERM
	// before it is killed.
	workerStopGrace = 30 * time.Second
	// userHZ is the unit of utime and stime in /proc/<pid>/stat (USER_HZ,
	// 100 on every Linux architecture Go supports).
	userHZ = 100
)

// workers are the worker processes of a split run: Config.Replicas of
// each role.
type workers struct {
	ws []*worker
}

type worker struct {
	role string
	// name is role, or role-N when a role has replicas.
	name   string
	cgroup *cpuCgroup // nil without Config.CPULimit
	cmd    *exec.Cmd
	stdin  io.Closer // the worker stops when it is closed
	output []*lineWriter
	ready  chan struct{}
	done   chan struct{} // closed after Wait; err is then set
	err    error
	// state goes from running to stopping (stop) or exited (it exited
	// first: an early exit, reported through fail).
	state atomic.Int32
}

const (
	running int32 = iota
	stopping
	exited
)

// exitErr describes how the worker exited.
func (w *worker) exitErr() error {
	if w.err == nil {
		return errors.New("exit status 0")
	}
	return w.err
}

// startWorkers spawns the orchestrator and participants workers and waits
// until both are running. A worker that exits before stop is reported
// through fail. On error, the workers already started are stopped.
func startWorkers(ctx context.Context, st *stack, fail context.CancelCauseFunc) (_ *workers, err error) {
	argv := st.c.Worker
	if len(argv) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("bench: split: find this executable: %w", err)
		}
		argv = append([]string{exe}, WorkerSubcommand...)
	}
	ws := &workers{}
	defer func() {
		if err != nil {
			err = errors.Join(err, ws.stop())
		}
	}()
	out := &lockedWriter{w: st.c.Stderr}
	n := st.c.replicas()
	for _, role := range []string{RoleOrchestrator, RoleParticipants} {
		for i := range n {
			name := role
			if n > 1 {
				name = role + "-" + strconv.Itoa(i+1)
			}
			w, err := spawn(argv, workerConfig(st, role), name, out, fail)
			if err != nil {
				return ws, err
			}
			ws.ws = append(ws.ws, w)
			if st.c.CPULimit > 0 {
				if w.cgroup, err = limitCPU(w.cmd.Process.Pid, name, st.c.CPULimit); err != nil {
					return ws, fmt.Errorf("bench: %s worker (pid %d): %w", name, w.cmd.Process.Pid, err)
				}
			}
			st.c.Logger.Info("bench: worker started", slog.String("worker", name), slog.Int("pid", w.cmd.Process.Pid))
		}
	}
	timer := time.NewTimer(workerReadyTimeout)
	defer timer.Stop()
	for _, w := range ws.ws {
		select {
		case <-w.ready:
		case <-w.done:
			return ws, fmt.Errorf("bench: %s worker (pid %d) exited before it was ready: %v", w.name, w.cmd.Process.Pid, w.exitErr())
		case <-timer.C:
			return ws, fmt.Errorf("bench: %s worker (pid %d) not ready after %s", w.name, w.cmd.Process.Pid, workerReadyTimeout)
		case <-ctx.Done():
			return ws, context.Cause(ctx) // ctx's own end, or another worker's early exit
		}
	}
	return ws, nil
}

func spawn(argv []string, wc WorkerConfig, name string, out io.Writer, fail context.CancelCauseFunc) (*worker, error) {
	cmd := exec.Command(argv[0], slices.Concat(argv[1:], wc.Args())...)
	cmd.Env = append(os.Environ(), wc.Env()...)
	// Its own process group: a terminal's ^C reaches the driver alone,
	// which then stops the workers in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	prefix := "[" + name + "] "
	w := &worker{role: wc.Role, name: name, cmd: cmd, ready: make(chan struct{}), done: make(chan struct{})}
	var once sync.Once
	stdout := &lineWriter{prefix: prefix, out: out, line: func(l []byte) bool {
		if string(l) == WorkerReady {
			once.Do(func() { close(w.ready) })
			return true
		}
		return false
	}}
	stderr := &lineWriter{prefix: prefix, out: out}
	cmd.Stdout, cmd.Stderr, w.output = stdout, stderr, []*lineWriter{stdout, stderr}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("bench: %s worker: %w", wc.Role, err)
	}
	w.stdin = stdin
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start %s worker: %w", wc.Role, err)
	}
	go func() {
		w.err = cmd.Wait()
		for _, o := range w.output {
			o.flush()
		}
		close(w.done)
		if w.state.CompareAndSwap(running, exited) {
			fail(fmt.Errorf("bench: %s worker (pid %d) exited early: %v", w.name, cmd.Process.Pid, w.exitErr()))
		}
	}()
	return w, nil
}

// cpu reads the driver's rusage and each worker's /proc/<pid>/stat.
func (ws *workers) cpu() ([]ProcessCPU, error) {
	out := []ProcessCPU{{Role: "driver", PID: os.Getpid(), CPUSeconds: cpuSeconds()}}
	for _, w := range ws.ws {
		s, err := procCPUSeconds(w.cmd.Process.Pid)
		if err != nil {
			return nil, fmt.Errorf("bench: CPU time of the %s worker: %w", w.name, err)
		}
		p := ProcessCPU{Role: w.name, PID: w.cmd.Process.Pid, CPUSeconds: s}
		if w.cgroup != nil {
			if p.CPULimit, err = w.cgroup.quota(); err != nil {
				return nil, fmt.Errorf("bench: CPU limit of the %s worker: %w", w.name, err)
			}
			if p.ThrottledSeconds, err = w.cgroup.throttled(); err != nil {
				return nil, fmt.Errorf("bench: throttling of the %s worker: %w", w.name, err)
			}
		}
		out = append(out, p)
	}
	return out, nil
}

// stop sends SIGTERM to every running worker (and closes its stdin),
// waits up to workerStopGrace, then kills. It returns an error for a worker
// that did not exit cleanly once told to; one that exited before was
// reported through fail as it exited.
func (ws *workers) stop() error {
	var told []*worker
	for _, w := range ws.ws {
		if w.state.CompareAndSwap(running, stopping) {
			_ = w.cmd.Process.Signal(syscall.SIGTERM)
			_ = w.stdin.Close()
			told = append(told, w)
		}
	}
	grace, cancel := context.WithTimeout(context.Background(), workerStopGrace)
	defer cancel()
	var errs []error
	for _, w := range told {
		select {
		case <-w.done:
			// Killed by the SIGTERM itself (it came before the worker
			// handled signals) is a stop as asked, too.
			if w.err != nil && !terminatedBy(w.cmd, syscall.SIGTERM) {
				errs = append(errs, fmt.Errorf("bench: %s worker (pid %d) stopped with %v", w.name, w.cmd.Process.Pid, w.err))
			}
		case <-grace.Done():
			_ = w.cmd.Process.Kill()
			<-w.done
			errs = append(errs, fmt.Errorf("bench: %s worker (pid %d) did not exit within %s of SIGTERM; killed", w.name, w.cmd.Process.Pid, workerStopGrace))
		}
	}
	for _, w := range ws.ws {
		if w.cgroup == nil {
			continue
		}
		select {
		case <-w.done:
			if err := w.cgroup.remove(); err != nil {
				errs = append(errs, fmt.Errorf("bench: %s worker: %w", w.name, err))
			}
		default: // still running (never told): its cgroup stays
		}
	}
	return errors.Join(errs...)
}

func terminatedBy(cmd *exec.Cmd, sig syscall.Signal) bool {
	if cmd.ProcessState == nil {
		return false
	}
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == sig
}

// procCPUSeconds is utime + stime of process pid (all its threads).
func procCPUSeconds(pid int) (float64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// pid (comm) state ppid ... : comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no ')'", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after comm", pid, len(f))
	}
	// f[0] is field 3 (state): utime and stime are fields 14 and 15.
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	stime, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return float64(ut+stime) / userHZ, nil
}

// lockedWriter serializes writes of whole lines from several workers.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// lineWriter writes each complete line to out with prefix, unless line
// (if set) consumes it.
type lineWriter struct {
	prefix string
	out    io.Writer
	line   func([]byte) bool

	mu  sync.Mutex
	buf []byte
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		l.emit(l.buf[:i])
		l.buf = l.buf[i+1:]
	}
	return len(p), nil
}

func (l *lineWriter) emit(line []byte) {
	if l.line != nil && l.line(line) {
		return
	}
	_, _ = l.out.Write([]byte(l.prefix + string(line) + "\n"))
}

// flush writes a last line without a newline.
func (l *lineWriter) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf) > 0 {
		l.emit(l.buf)
		l.buf = nil
	}
}
