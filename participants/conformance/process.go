package conformance

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/sagaflow/sagaflow/internal/tail"
)

// stopGrace is how long the participant has to exit after SIGTERM before
// its process group is killed.
const stopGrace = 5 * time.Second

// process is the participant under test: `sh -c command` in a process group
// of its own.
type process struct {
	cmd    *exec.Cmd
	out    *tail.Buffer
	exited chan struct{}
	err    error // the exit status, once exited is closed
	once   sync.Once
}

// startProcess starts command with env added to this process's environment;
// its output goes to out (if not nil) and to a tail kept for reports.
func startProcess(command, dir string, env []string, out io.Writer) (*process, error) {
	cmd := exec.Command("/bin/sh", "-c", command)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	// Its own group, so the shell's children are stopped with it; and
	// killed if the kit dies (Linux).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p := &process{cmd: cmd, out: tail.New(8 << 10), exited: make(chan struct{})}
	var w io.Writer = p.out
	if out != nil {
		w = io.MultiWriter(p.out, out)
	}
	cmd.Stdout, cmd.Stderr = w, w
	// A descendant that left the group may hold the output pipe open: Wait
	// does not wait for it longer than this once the participant exited.
	cmd.WaitDelay = stopGrace
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("conformance: start participant %q: %w", command, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// exitedEarly returns the exit error once the process has exited, nil while
// it runs.
func (p *process) exitedEarly() error {
	select {
	case <-p.exited:
		if p.err == nil {
			return errors.New("the participant exited (status 0)")
		}
		return fmt.Errorf("the participant exited: %v", p.err)
	default:
		return nil
	}
}

// stop sends SIGTERM to the process group, waits up to stopGrace, then
// kills the group; whatever is left of the group is killed in any case.
// Safe to call twice.
func (p *process) stop() {
	p.once.Do(func() {
		pgid := p.cmd.Process.Pid
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(stopGrace):
		}
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.exited
	})
}
