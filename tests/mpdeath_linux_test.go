package tests

import "syscall"

// mpDieWithParent has the kernel SIGKILL a rank process when the test
// process that started it dies, whatever kills it (internal/launch does
// the same for its ranks). Linux sends it when the thread that started
// the child exits; Go keeps its threads unless a goroutine exits locked to
// one, and the child's own watch (mpWatchParent) covers the rest.
func mpDieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
