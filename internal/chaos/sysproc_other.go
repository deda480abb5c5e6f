//go:build !linux

package chaos

import "syscall"

// sysProcAttr puts a child in its own process group so a kill reaches its
// whole tree.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
