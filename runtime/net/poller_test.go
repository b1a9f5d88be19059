package net

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// pollerFDs is the set of descriptors in the process's epoll sets (Go's
// network poller's), from /proc/self/fdinfo.
func pollerFDs(t *testing.T) map[int]bool {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	in := map[int]bool{}
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err != nil || l != "anon_inode:[eventpoll]" {
			continue
		}
		info, err := os.ReadFile("/proc/self/fdinfo/" + e.Name())
		if err != nil {
			continue // a descriptor of the ReadDir itself, gone
		}
		for _, line := range strings.Split(string(info), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "tfd:" {
				n, err := strconv.Atoi(f[1])
				require.NoError(t, err)
				in[n] = true
			}
		}
	}
	return in
}

// A comm's sockets are out of Go's network poller: in it, every message
// that arrives wakes the poller's sleeping thread, and over loopback the
// sender pays for that wakeup inside its writev (BenchmarkLoopbackWritev:
// netpoll against detached).
func TestCommSocketsLeaveThePoller(t *testing.T) {
	if _, err := os.Stat("/proc/self/fdinfo"); err != nil {
		t.Skip("no /proc/self/fdinfo")
	}
	sc, rc := pair(t, loopback(t, 2, 2))
	// The poller exists: the listener's accept loop is parked in it.
	before := pollerFDs(t)
	require.NotEmpty(t, before, "no descriptor in an epoll set: cannot tell")
	for side, c := range map[string]*comm{"send": sc.(*sendComm).comm, "recv": rc.(*recvComm).comm} {
		for i, fd := range append([]int{c.ctrlFD}, c.dataFD...) {
			require.False(t, before[fd], "%s comm's socket %d (fd %d) is in Go's poller", side, i, fd)
		}
	}
	// And they still carry messages, inline and in chunks.
	for i, n := range []int{100, 1 << 20} {
		b := make([]byte, n)
		for j := range b {
			b[j] = byte(i + j*7)
		}
		got := make([]byte, n)
		s := post(t, func() (Request, error) { return sc.Isend(b, i, nil) })
		r := post(t, func() (Request, error) { return rc.Irecv(got, i, nil) })
		m, err := waitWith(t, r, s)
		require.NoError(t, err)
		require.Equal(t, n, m)
		require.Equal(t, b, got)
		_, err = wait(t, s)
		require.NoError(t, err)
	}
}
