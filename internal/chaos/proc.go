package chaos

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// child is one supervised OS process: started again after every exit until
// the harness closes it. An exit the harness did not cause (kill) counts as
// a crash.
type child struct {
	name    string
	exe     string
	args    []string
	env     []string
	logPath string
	log     *slog.Logger
	// participant: a participant process (the target of SIGSTOP).
	participant bool

	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{} // closed when the current process has exited
	running  bool
	stopped  bool // SIGSTOPped
	expected bool // the next exit is ours (kill)
	closing  bool
	starts   int
	crashes  int
	lastExit string
	restarts sync.WaitGroup
}

// start launches the process if it is not running.
func (c *child) start() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing || c.running {
		return nil
	}
	f, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("chaos: %s: open log: %w", c.name, err)
	}
	fmt.Fprintf(f, "\n==== chaos: start %d of %s at %s ====\n", c.starts+1, c.name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(c.exe, c.args...)
	cmd.Env = append(os.Environ(), c.env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return fmt.Errorf("chaos: start %s: %w", c.name, err)
	}
	c.starts++
	c.cmd, c.running, c.stopped, c.expected = cmd, true, false, false
	done := make(chan struct{})
	c.done = done
	go func() {
		err := cmd.Wait()
		_ = f.Close()
		c.mu.Lock()
		c.running, c.stopped = false, false
		crashed := !c.expected && !c.closing
		if crashed {
			c.crashes++
			c.lastExit = fmt.Sprint(err)
		}
		c.mu.Unlock()
		close(done)
		if crashed {
			c.log.Warn("chaos: child exited on its own; restarting", slog.String("child", c.name), slog.Any("err", err), slog.String("log", c.logPath))
			c.restartAfter(500*time.Millisecond, nil)
		}
	}()
	return nil
}

// restartAfter starts the process again after d, unless stop closes first
// (then it starts at once) or the child is closing.
func (c *child) restartAfter(d time.Duration, stop <-chan struct{}) {
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return
	}
	c.restarts.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.restarts.Done()
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-stop:
		}
		if err := c.start(); err != nil {
			c.log.Error("chaos: restart failed", slog.String("child", c.name), slog.Any("err", err))
		}
	}()
}

func (c *child) signalLocked(sig syscall.Signal) bool {
	if !c.running || c.cmd == nil || c.cmd.Process == nil {
		return false
	}
	if sig == syscall.SIGKILL {
		c.expected = true
	}
	_ = syscall.Kill(-c.cmd.Process.Pid, sig)
	return true
}

// kill SIGKILLs the child and waits for it to exit; false if it was not
// running.
func (c *child) kill() bool {
	c.mu.Lock()
	ok := c.signalLocked(syscall.SIGKILL)
	done := c.done
	c.mu.Unlock()
	if ok {
		<-done
	}
	return ok
}

// stop SIGSTOPs the child; false if it is not running or already stopped.
func (c *child) stop() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped || !c.signalLocked(syscall.SIGSTOP) {
		return false
	}
	c.stopped = true
	return true
}

// cont resumes a stopped child.
func (c *child) cont() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped && c.signalLocked(syscall.SIGCONT) {
		c.stopped = false
	}
}

// close kills the child for good and waits for pending restarts.
func (c *child) close() {
	c.mu.Lock()
	c.closing = true
	c.mu.Unlock()
	c.restarts.Wait()
	c.kill()
}

// stats returns starts and crashes.
func (c *child) stats() (starts, crashes int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.starts, c.crashes
}
