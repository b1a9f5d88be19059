package launch

import "syscall"

// dieWithParent has the kernel kill a rank when its launcher dies, even by
// SIGKILL, so that no rank is left running without one.
func dieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
