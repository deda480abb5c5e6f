package chaos

import "syscall"

// sysProcAttr puts a child in its own process group (so a kill reaches its
// whole tree) and has the kernel kill it if the harness dies first.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
