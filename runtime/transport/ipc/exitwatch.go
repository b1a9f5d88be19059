package ipc

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// sysPidfdOpen is pidfd_open(2) (Linux 5.3), numbered alike on every
// architecture.
const sysPidfdOpen = 434

// ErrNoPidfd is returned by SelfPidfd where the kernel has no pidfds.
var ErrNoPidfd = errors.New("ipc: this kernel has no pidfd_open (Linux 5.3)")

// SelfPidfd returns a process descriptor (pidfd) of this process. Passed
// to another process of the machine (a Server serves it like any
// descriptor), it lets WatchExit there learn when this process ends,
// whatever the pid namespaces, and with no pid that could be reused.
func SelfPidfd() (int, error) {
	fd, _, errno := syscall.Syscall(sysPidfdOpen, uintptr(os.Getpid()), 0, 0)
	switch {
	case errno == syscall.ENOSYS:
		return -1, ErrNoPidfd
	case errno != 0:
		return -1, fmt.Errorf("ipc: pidfd_open(%d): %w", os.Getpid(), errno)
	}
	syscall.CloseOnExec(int(fd))
	return int(fd), nil
}

// ExitWatch learns when a process ends, from a pidfd of it.
type ExitWatch struct {
	f      *os.File
	exited atomic.Bool
	done   chan struct{}
	once   sync.Once
	err    error
}

// WatchExit watches the process behind pidfd (which it takes over: Close
// closes it) and calls onExit once, on a goroutine of its own, when that
// process has ended (at once if it already has). A descriptor that is not
// a pidfd is refused (and closed). Close stops the watch.
func WatchExit(pidfd int, onExit func()) (*ExitWatch, error) {
	if err := checkPidfd(pidfd); err != nil {
		syscall.Close(pidfd)
		return nil, err
	}
	// Non-blocking, the descriptor joins the runtime's poller: the wait
	// below holds no thread, and Close ends it.
	if err := syscall.SetNonblock(pidfd, true); err != nil {
		syscall.Close(pidfd)
		return nil, fmt.Errorf("ipc: pidfd %d: %w", pidfd, err)
	}
	w := &ExitWatch{f: os.NewFile(uintptr(pidfd), "pidfd"), done: make(chan struct{})}
	rc, err := w.f.SyscallConn()
	if err != nil {
		w.f.Close()
		return nil, fmt.Errorf("ipc: pidfd %d: %w", pidfd, err)
	}
	go func() {
		defer close(w.done)
		err := rc.Read(func(fd uintptr) bool { return pidfdExited(int(fd)) })
		if err != nil {
			return // closed
		}
		w.exited.Store(true)
		if onExit != nil {
			onExit()
		}
	}()
	return w, nil
}

// Exited reports whether the process has ended, looking now (without
// waiting for the watch's goroutine).
func (w *ExitWatch) Exited() bool {
	if w.exited.Load() {
		return true
	}
	rc, err := w.f.SyscallConn()
	if err != nil {
		return false
	}
	gone := false
	if rc.Control(func(fd uintptr) { gone = pidfdExited(int(fd)) }) != nil {
		return false
	}
	return gone
}

// Close stops the watch, waits for its goroutine (and so for an onExit
// that runs) and closes the pidfd. It may be called more than once.
func (w *ExitWatch) Close() error {
	if w == nil {
		return nil
	}
	w.once.Do(func() {
		if err := w.f.Close(); err != nil {
			w.err = fmt.Errorf("ipc: closing a pidfd: %w", err)
		}
		<-w.done
	})
	return w.err
}

// pidfdExited polls fd without waiting: a pidfd is readable once its
// process has ended.
func pidfdExited(fd int) bool {
	type pollFd struct {
		fd             int32
		events, revent int16
	}
	const pollIn = 0x1
	p := pollFd{fd: int32(fd), events: pollIn}
	var ts syscall.Timespec // zero: do not wait
	n, _, errno := syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&p)), 1, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
	return errno == 0 && n == 1 && p.revent&pollIn != 0
}

// checkPidfd refuses a descriptor that is not a pidfd (whose readability
// would say nothing of a process).
func checkPidfd(fd int) error {
	link, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		return fmt.Errorf("ipc: descriptor %d: %w", fd, err)
	}
	if !strings.Contains(link, "[pidfd]") {
		return fmt.Errorf("ipc: descriptor %d is %q, not a pidfd", fd, link)
	}
	return nil
}
