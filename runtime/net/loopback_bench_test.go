package net

import (
	gonet "net"
	"syscall"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// The floor of a small step's hop: the system calls that move one NET LL
// step (a 16-byte message header, a 32-byte step header and 16 bytes of
// LL line, 64 bytes in one writev) over loopback TCP, measured on their
// own. Run pinned to see the machine's floor rather than the scheduler:
//
//	taskset -c 0,1 go test -run XXX -bench Loopback -count 3 ./runtime/net
//
// Each op of the write benchmarks is one send and the read that drains it
// on the other socket, in one goroutine (loopback delivers within the
// send, so the bytes are there when it returns). "netpoll" leaves the
// receiving descriptor in Go's network poller, as a *net.TCPConn's is,
// with a goroutine of the process parked in the poller (as a process
// always has one: a listener, the bootstrap's sockets): every arrival
// then wakes the thread parked in epoll_wait, and the sender pays that
// wakeup. "detached" is a descriptor out of the poller (detach), as the
// socket comms' are.

// loopbackPair is a connected loopback TCP pair with TCP_NODELAY, as raw
// non-blocking descriptors; detached ones are out of Go's poller.
func loopbackPair(b *testing.B, detached bool) (w, r int) {
	l, err := gonet.ListenTCP("tcp", &gonet.TCPAddr{IP: gonet.IPv4(127, 0, 0, 1)})
	require.NoError(b, err)
	defer l.Close()
	c, err := gonet.DialTCP("tcp", nil, l.Addr().(*gonet.TCPAddr))
	require.NoError(b, err)
	s, err := l.AcceptTCP()
	require.NoError(b, err)
	require.NoError(b, c.SetNoDelay(true))
	require.NoError(b, s.SetNoDelay(true))
	if detached {
		w, err = detach(c)
		require.NoError(b, err)
		r, err = detach(s)
		require.NoError(b, err)
		b.Cleanup(func() { _ = syscall.Close(w); _ = syscall.Close(r) })
		return w, r
	}
	w, err = rawFD(c)
	require.NoError(b, err)
	r, err = rawFD(s)
	require.NoError(b, err)
	b.Cleanup(func() { _ = c.Close(); _ = s.Close() })
	return w, r
}

// parkInPoller leaves a goroutine blocked in Go's poller (an Accept that
// never comes) for the benchmark's duration, so that an idle thread of
// the process sleeps in epoll_wait as in a real one.
func parkInPoller(b *testing.B) {
	l, err := gonet.ListenTCP("tcp", &gonet.TCPAddr{IP: gonet.IPv4(127, 0, 0, 1)})
	require.NoError(b, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = l.Accept()
	}()
	b.Cleanup(func() { _ = l.Close(); <-done })
}

const stepBytes = 64 // message header + step header + one LL line

func drain(b *testing.B, fd int, buf []byte, want int) {
	for got := 0; got < want; {
		n, err := read(fd, buf[got:want])
		if err != nil {
			b.Fatal(err)
		}
		got += n
	}
}

func BenchmarkLoopbackWritev(b *testing.B) {
	for _, v := range []struct {
		name     string
		detached bool
	}{{"netpoll", false}, {"detached", true}} {
		b.Run(v.name, func(b *testing.B) {
			parkInPoller(b)
			w, r := loopbackPair(b, v.detached)
			hdr, payload := make([]byte, 16), make([]byte, stepBytes-16)
			iov := []syscall.Iovec{iovec(hdr), iovec(payload)}
			buf := make([]byte, 4096)
			b.ResetTimer()
			for range b.N {
				if n, err := writev(w, iov); err != nil || n != stepBytes {
					b.Fatalf("writev: %d, %v", n, err)
				}
				drain(b, r, buf, stepBytes)
			}
		})
	}
}

// BenchmarkLoopbackSend is BenchmarkLoopbackWritev with one send(2) of a
// contiguous buffer (MSG_DONTWAIT|MSG_NOSIGNAL) instead of a writev.
func BenchmarkLoopbackSend(b *testing.B) {
	for _, v := range []struct {
		name     string
		detached bool
	}{{"netpoll", false}, {"detached", true}} {
		b.Run(v.name, func(b *testing.B) {
			parkInPoller(b)
			w, r := loopbackPair(b, v.detached)
			msg := make([]byte, stepBytes)
			buf := make([]byte, 4096)
			b.ResetTimer()
			for range b.N {
				n, _, e := syscall.Syscall6(syscall.SYS_SENDTO, uintptr(w), uintptr(unsafe.Pointer(&msg[0])), uintptr(len(msg)),
					syscall.MSG_DONTWAIT|syscall.MSG_NOSIGNAL, 0, 0)
				if e != 0 || n != stepBytes {
					b.Fatalf("send: %d, %v", n, e)
				}
				drain(b, r, buf, stepBytes)
			}
		})
	}
}

// BenchmarkLoopbackReadEmpty is a read of a socket with nothing to read
// (EAGAIN): what a pass pays for each socket it looks at in vain.
func BenchmarkLoopbackReadEmpty(b *testing.B) {
	_, r := loopbackPair(b, true)
	buf := make([]byte, 4096)
	b.ResetTimer()
	for range b.N {
		if n, err := read(r, buf); n != 0 || err != nil {
			b.Fatalf("read: %d, %v", n, err)
		}
	}
}

// BenchmarkLoopbackPollEmpty is a zero-timeout poll(2) of two sockets
// with nothing to read: the price of asking once for both a comm's data
// and credits sockets instead of reading each.
func BenchmarkLoopbackPollEmpty(b *testing.B) {
	_, r1 := loopbackPair(b, true)
	_, r2 := loopbackPair(b, true)
	fds := []pollFd{{fd: int32(r1), events: pollIn}, {fd: int32(r2), events: pollIn}}
	b.ResetTimer()
	for range b.N {
		n, _, e := syscall.Syscall(syscall.SYS_POLL, uintptr(unsafe.Pointer(&fds[0])), uintptr(len(fds)), 0)
		if e == syscall.EINTR {
			continue
		}
		if e != 0 || n != 0 {
			b.Fatalf("poll: %d, %v", n, e)
		}
	}
}

// BenchmarkLoopbackInq is the SIOCINQ ioctl (bytes waiting to be read)
// on an empty socket: another way to look before reading.
func BenchmarkLoopbackInq(b *testing.B) {
	_, r := loopbackPair(b, true)
	var n int32
	b.ResetTimer()
	for range b.N {
		if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(r), 0x541B /* SIOCINQ (FIONREAD) */, uintptr(unsafe.Pointer(&n))); e != 0 || n != 0 {
			b.Fatalf("ioctl: %d, %v", n, e)
		}
	}
}

// rawFD is c's descriptor, left in Go's poller; c owns it.
func rawFD(c *gonet.TCPConn) (int, error) {
	_, fd, err := rawConn(c)
	return fd, err
}
