package ipc

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const envExitChild = "NCCLGO_IPC_EXIT_CHILD"

// pidfdOf opens a pidfd of the process pid (a child of the test).
func pidfdOf(t *testing.T, pid int) int {
	t.Helper()
	fd, _, errno := syscall.Syscall(sysPidfdOpen, uintptr(pid), 0, 0)
	if errno == syscall.ENOSYS {
		t.Skip("no pidfd_open")
	}
	require.Zero(t, errno, "pidfd_open(%d)", pid)
	return int(fd)
}

// TestExitWatch: the watch of a child reports nothing while it lives,
// and its death (SIGKILL) once, promptly; Exited agrees; Close ends the
// goroutine and the descriptor.
func TestExitWatch(t *testing.T) {
	if os.Getenv(envExitChild) != "" {
		t.Skip("child process")
	}
	fds, gs := resources(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestExitWatchChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), envExitChild+"=1")
	require.NoError(t, cmd.Start())
	exited := make(chan struct{}, 2)
	w, err := WatchExit(pidfdOf(t, cmd.Process.Pid), func() { exited <- struct{}{} })
	require.NoError(t, err)
	select {
	case <-exited:
		t.Fatal("reported a live process")
	case <-time.After(100 * time.Millisecond):
	}
	assert.False(t, w.Exited())
	killed := time.Now()
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	select {
	case <-exited:
		assert.Less(t, time.Since(killed), time.Second)
	case <-time.After(10 * time.Second):
		t.Fatal("the death of the child was not reported within 10 s")
	}
	assert.True(t, w.Exited())
	_ = cmd.Wait() // reaped: still ended for the pidfd
	assert.True(t, w.Exited())
	require.NoError(t, w.Close())
	require.NoError(t, w.Close(), "Close twice")
	assert.Empty(t, exited, "reported once")
	assertReleased(t, fds, gs)
}

// TestExitWatchClose: Close ends the watch of a live process without a
// report (this process: it outlives the test).
func TestExitWatchClose(t *testing.T) {
	fds, gs := resources(t)
	fd, err := SelfPidfd()
	if err == ErrNoPidfd {
		t.Skip(err)
	}
	require.NoError(t, err)
	w, err := WatchExit(fd, func() { t.Error("reported this process's end") })
	require.NoError(t, err)
	assert.False(t, w.Exited())
	require.NoError(t, w.Close())
	assertReleased(t, fds, gs)
}

// TestExitWatchRefusesOtherDescriptors: a memfd is readable at once; as a
// "pidfd" it would report a death that did not happen.
func TestExitWatchRefusesOtherDescriptors(t *testing.T) {
	seg, err := CreateSegment("not-a-pidfd", 4096)
	require.NoError(t, err)
	defer seg.Close()
	fd, err := seg.Dup()
	require.NoError(t, err)
	_, err = WatchExit(fd, func() { t.Error("reported") })
	require.ErrorContains(t, err, "not a pidfd")
	assert.ErrorIs(t, syscall.Close(fd), syscall.EBADF, "the refused descriptor is closed")
}

// TestExitWatchChild is the child of TestExitWatch: it waits to be killed.
func TestExitWatchChild(t *testing.T) {
	if os.Getenv(envExitChild) == "" {
		t.Skip("only runs as a child of TestExitWatch")
	}
	time.Sleep(time.Minute)
}
