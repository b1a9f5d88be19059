package net

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	gonet "net"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ncclgo/ncclgo/internal/envmap"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// loopback returns a socket backend on the loopback interface.
func loopback(t testing.TB, threads, socks int) *Socket {
	t.Helper()
	s, err := NewSocket(SocketOptions{Interface: "lo", Family: "AF_INET", NThreads: threads, NSocksPerThread: socks, HandshakeTimeout: 5 * time.Second})
	require.NoError(t, err)
	return s
}

// pair connects a send comm to a recv comm over n.
func pair(t testing.TB, n Net) (SendComm, RecvComm) {
	t.Helper()
	h, l, err := n.Listen(0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	var sc SendComm
	for deadline := time.Now().Add(5 * time.Second); sc == nil; time.Sleep(time.Millisecond) {
		require.True(t, time.Now().Before(deadline), "Connect: no connection within 5 s")
		sc, err = n.Connect(0, h)
		require.NoError(t, err)
	}
	rc := accept(t, n, l)
	t.Cleanup(func() { _ = sc.Close(); _ = rc.Close() })
	return sc, rc
}

func accept(t testing.TB, n Net, l Listener) RecvComm {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		rc, err := n.Accept(l)
		require.NoError(t, err)
		if rc != nil {
			return rc
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("Accept: no connection within 5 s")
	return nil
}

// wait polls r until it completes or fails (bounded).
func wait(t *testing.T, r Request) (int, error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		done, n, err := r.Test()
		if err != nil || done {
			return n, err
		}
		runtime.Gosched()
	}
	t.Fatal("request still pending after 10 s")
	return 0, nil
}

func post[R any](t testing.TB, f func() (R, error)) R {
	t.Helper()
	for {
		r, err := f()
		require.NoError(t, err)
		if any(r) != nil && !isNilRequest(r) {
			return r
		}
		runtime.Gosched()
	}
}

func isNilRequest(r any) bool { q, ok := r.(Request); return ok && q == nil }

func TestSocketMessages(t *testing.T) {
	for _, tc := range []struct{ threads, socks int }{{1, 1}, {2, 2}, {4, 1}} {
		t.Run(fmt.Sprintf("%dx%d", tc.threads, tc.socks), func(t *testing.T) {
			testMessages(t, loopback(t, tc.threads, tc.socks), goMem)
		})
	}
}

func TestSocketRefusesOversizeAndWrongTag(t *testing.T) {
	n := loopback(t, 1, 2)
	r := testRefusals(t, n, goMem)
	require.ErrorContains(t, r.err, "message 0 of 100 bytes", "the socket backend numbers messages")
}

// rawPeer connects to the listener with a valid hello for one data socket
// and returns the raw sockets, so that a test can send anything.
func rawPeer(t *testing.T, h Handle, badHello bool) (ctrl, data gonet.Conn) {
	t.Helper()
	hd, err := decodeHandle(h)
	require.NoError(t, err)
	var socks []gonet.Conn
	for i := range 2 {
		c, err := gonet.Dial("tcp", hd.addr.String())
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		hl := hello{nonce: hd.nonce, comm: 42, index: uint16(i), nSocks: 1, nThrd: 1}.encode()
		if badHello {
			hl = []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n.....")
		}
		_, err = c.Write(hl)
		require.NoError(t, err)
		socks = append(socks, c)
	}
	return socks[0], socks[1]
}

func TestSocketRejectsGarbage(t *testing.T) {
	n := loopback(t, 1, 1)
	h, l, err := n.Listen(0)
	require.NoError(t, err)
	defer l.Close()
	// A stray client speaking another protocol is refused, and Accept
	// keeps waiting for a real peer.
	rawPeer(t, h, true)
	require.Eventually(t, func() bool { return len(l.(*socketListener).Rejected()) == 2 }, 5*time.Second, time.Millisecond)
	assert.ErrorContains(t, l.(*socketListener).Rejected()[0], "hello magic")
	rc, err := n.Accept(l)
	require.NoError(t, err)
	require.Nil(t, rc)

	// A peer that shakes hands and then sends garbage headers. Messages of
	// up to DefaultInline bytes come on the control socket, longer ones in
	// chunks on the data sockets.
	const big = DefaultInline + 8
	for _, tc := range []struct {
		name       string
		ctrl, data []byte
		want       string
	}{
		{"header magic", []byte("this is no header"), nil, "garbage on the connection"},
		{"chunk magic", msgHeader(0, big), []byte("0123456789abcdef01234567"), "chunk magic"},
		{"chunk length", msgHeader(0, big), chunkHeader(0, big+1), fmt.Sprintf("a chunk of %d bytes where %d were due", big+1, big)},
		{"chunk sequence", msgHeader(0, big), chunkHeader(5, big), "a chunk of message 5 where message 0's was due"},
		{"vanished mid-message", msgHeader(0, big), chunkHeader(0, big)[:10], "the peer closed the connection"},
		{"vanished mid-inline-message", append(msgHeader(0, 8), 1, 2, 3), nil, "the peer closed the connection"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, l, err := n.Listen(0)
			require.NoError(t, err)
			defer l.Close()
			ctrl, data := rawPeer(t, h, false)
			rc := accept(t, n, l)
			defer rc.Close()
			buf := make([]byte, big+64)
			r := post(t, func() (Request, error) { return rc.Irecv(buf, 0, nil) })
			_, _ = ctrl.Write(tc.ctrl)
			if tc.data != nil {
				_, _ = data.Write(tc.data)
			}
			_ = data.Close()
			if tc.data == nil {
				_ = ctrl.Close()
			}
			_, err = wait(t, r)
			require.ErrorIs(t, err, ErrPeer)
			require.ErrorContains(t, err, tc.want)
			require.ErrorContains(t, err, ctrl.LocalAddr().String())
			var pe *PeerError
			require.True(t, errors.As(err, &pe))
			assert.Equal(t, make([]byte, 64), buf[big:], "nothing written past the message")
		})
	}
}

func msgHeader(tag int32, n uint64) []byte {
	b := make([]byte, msgSize)
	binary.LittleEndian.PutUint32(b, msgMagic)
	binary.LittleEndian.PutUint32(b[4:], uint32(tag))
	binary.LittleEndian.PutUint64(b[8:], n)
	return b
}

func chunkHeader(seq uint32, n uint64) []byte {
	b := make([]byte, chunkSize)
	binary.LittleEndian.PutUint32(b, chunkMagic)
	binary.LittleEndian.PutUint32(b[4:], seq)
	binary.LittleEndian.PutUint64(b[8:], n)
	return b
}

func TestSocketVanishedPeer(t *testing.T) {
	n := loopback(t, 2, 1)
	// The sender goes away: the posted receive fails naming it.
	testVanishedSender(t, n, goMem)

	// The receiver goes away: sends fail, naming it.
	testVanishedReceiver(t, n, goMem)
}

func TestSocketCloseLeavesNoGoroutine(t *testing.T) {
	before := runtime.NumGoroutine()
	n := loopback(t, 4, 2)
	h, l, err := n.Listen(0)
	require.NoError(t, err)
	sc, err := n.Connect(0, h)
	require.NoError(t, err)
	rc := accept(t, n, l)
	// Pending requests on both sides when closing.
	_ = post(t, func() (Request, error) { return rc.Irecv(make([]byte, 10), 0, nil) })
	_ = post(t, func() (Request, error) { return sc.Isend(make([]byte, 4<<20), 1, nil) })
	require.NoError(t, sc.Close())
	require.NoError(t, rc.Close())
	require.NoError(t, l.Close())
	_, err = rc.Irecv(make([]byte, 1), 0, nil)
	require.ErrorIs(t, err, ErrClosed)
	if !settles(before) {
		b := make([]byte, 1<<20)
		t.Fatalf("goroutines: %d before, %d after:\n%s", before, runtime.NumGoroutine(), b[:runtime.Stack(b, true)])
	}
}

func TestSocketOptionsFromEnv(t *testing.T) {
	env := envmap.Getenv
	o, err := SocketOptionsFromEnv(env("NCCL_SOCKET_NTHREADS", "4", "NCCL_NSOCKS_PERTHREAD", "2"))
	require.NoError(t, err)
	assert.Equal(t, SocketOptions{NThreads: 4, NSocksPerThread: 2}, o)
	_, err = SocketOptionsFromEnv(env("NCCL_SOCKET_NTHREADS", "17"))
	require.ErrorContains(t, err, `NCCL_SOCKET_NTHREADS="17": want an integer from 1 to 16`)
	_, err = SocketOptionsFromEnv(env("NCCL_NSOCKS_PERTHREAD", "x"))
	require.ErrorContains(t, err, "NCCL_NSOCKS_PERTHREAD")
	o, err = SocketOptionsFromEnv(env("NCCLGO_SOCKET_BUFSIZE", "4194304"))
	require.NoError(t, err)
	assert.Equal(t, 4<<20, o.BufSize)
	_, err = SocketOptionsFromEnv(env("NCCLGO_SOCKET_BUFSIZE", "-1"))
	require.ErrorContains(t, err, `NCCLGO_SOCKET_BUFSIZE="-1": want a byte count from 0`)
	_, err = SocketOptionsFromEnv(env("NCCL_SOCKET_NTHREADS", "16", "NCCL_NSOCKS_PERTHREAD", "8"))
	require.ErrorContains(t, err, "128 sockets per connection: want at most 64")
	_, err = NewSocket(SocketOptions{Interface: "=no-such-if0"})
	require.ErrorContains(t, err, "no-such-if0")
	_, err = decodeHandle(Handle{1, 2, 3})
	require.ErrorContains(t, err, "not a socket listener's handle")
	h := handle{addr: netipMust("127.0.0.1:1")}.encode()
	h[12] = 200
	_, err = decodeHandle(h)
	require.True(t, err != nil && strings.Contains(err.Error(), "200-byte address"))
}

func netipMust(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

// settles reports whether the number of goroutines falls to at most n
// within 5 s (polled here: assert.Eventually would add its own).
func settles(n int) bool {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if runtime.NumGoroutine() <= n {
			return true
		}
	}
	return false
}

// The control socket costs one writev per small message on the sending
// side, and the receiver reads it only when a posted receive wants bytes:
// a request whose header is in, or a new posted receive, reads nothing.
func TestSocketSyscallsPerMessage(t *testing.T) {
	n := loopback(t, 1, 1)
	sc, rc := pair(t, n)
	stats := func(c any) SocketStats { return c.(interface{ Stats() SocketStats }).Stats() }
	const msgs = 50
	buf := make([]byte, 8)
	for i := range msgs {
		r, err := rc.Irecv(buf, 1, nil)
		require.NoError(t, err)
		require.NotNil(t, r)
		s, err := sc.Isend([]byte{byte(i), 1, 2, 3, 4, 5, 6, 7}, 1, nil)
		require.NoError(t, err)
		require.NotNil(t, s)
		waitDone(t, s)
		waitDone(t, r)
		require.Equal(t, byte(i), buf[0])
	}
	assert.Equal(t, uint64(msgs), stats(sc).Writes, "one writev per 8-byte message")
	st := stats(rc)
	assert.Equal(t, uint64(msgs), st.Reads-st.EmptyReads, "one read with data per message")
	assert.Less(t, st.EmptyReads, uint64(msgs/2), "a posted receive reads nothing before it is tested")
	// A large message: once its header is in, testing it reads no more on
	// the control socket (its chunks are the helpers'), however long they
	// take, even with a receive posted behind it (as the proxy keeps one
	// for the next header).
	big := make([]byte, 64<<20)
	r, err := rc.Irecv(big, 2, nil)
	require.NoError(t, err)
	next, err := rc.Irecv(buf, 1, nil)
	require.NoError(t, err)
	require.NotNil(t, next)
	before := stats(rc).Reads
	s, err := sc.Isend(big, 2, nil)
	require.NoError(t, err)
	tests := waitDone(t, r)
	waitDone(t, s)
	assert.LessOrEqual(t, stats(rc).Reads-before, uint64(3), "control socket reads while %d tests waited for the chunks", tests)
}

// waitDone tests r until it is done and returns how many tests it took.
func waitDone(t *testing.T, r Request) int {
	t.Helper()
	for deadline, n := time.Now().Add(5*time.Second), 1; ; n++ {
		done, _, err := r.Test()
		require.NoError(t, err)
		if done {
			return n
		}
		require.True(t, time.Now().Before(deadline), "request not done within 5 s")
	}
}

// TestSocketInlineBounds sends messages on both sides of the connection's
// inline bound, several at once (so that inline payloads queue up in the
// receiver's control buffer and wrap around it), and checks every byte.
func TestSocketInlineBounds(t *testing.T) {
	for _, inline := range []int{1 << 10, DefaultInline, MaxInline} {
		t.Run(fmt.Sprintf("inline=%d", inline), func(t *testing.T) {
			n, err := NewSocket(SocketOptions{Interface: "lo", Family: "AF_INET", Inline: inline, HandshakeTimeout: 5 * time.Second})
			require.NoError(t, err)
			sc, rc := pair(t, n)
			sizes := []int{inline - 1, inline, inline + 1, inline, inline, inline, inline, 1, inline + 1, 0, inline}
			var sends, recvs []Request
			var want, got [][]byte
			for i, sz := range sizes {
				b := make([]byte, sz)
				for j := range b {
					b[j] = byte(i*13 + j*5)
				}
				want, got = append(want, b), append(got, make([]byte, sz+16))
				sends = append(sends, post(t, func() (Request, error) { return sc.Isend(b, 7, nil) }))
				recvs = append(recvs, post(t, func() (Request, error) { return rc.Irecv(got[i], 7, nil) }))
			}
			for i := range sizes {
				_, err := wait(t, sends[i])
				require.NoError(t, err)
				m, err := wait(t, recvs[i])
				require.NoError(t, err, "message %d", i)
				require.Equal(t, sizes[i], m)
				require.True(t, bytes.Equal(want[i], got[i][:m]), "message %d (%d bytes) differs", i, m)
				require.Equal(t, make([]byte, 16), got[i][m:], "message %d: bytes past it were written", i)
			}
		})
	}
}

// TestSocketInlineFromEnvAndHello checks NCCLGO_SOCKET_INLINE's bounds and
// that a hello announcing more than MaxInline is refused.
func TestSocketInlineFromEnvAndHello(t *testing.T) {
	env := envmap.Getenv
	o, err := SocketOptionsFromEnv(env("NCCLGO_SOCKET_INLINE", "65536"))
	require.NoError(t, err)
	assert.Equal(t, 64<<10, o.Inline)
	for _, bad := range []string{"-1", "1000", fmt.Sprint(MaxInline + 1024), "x"} {
		_, err = SocketOptionsFromEnv(env("NCCLGO_SOCKET_INLINE", bad))
		require.ErrorContains(t, err, fmt.Sprintf("NCCLGO_SOCKET_INLINE=%q: want a byte count from 0", bad))
	}
	_, err = NewSocket(SocketOptions{Inline: 3000})
	require.ErrorContains(t, err, "Inline=3000")
	assert.Equal(t, legacyInline, helloInline(hello{}), "a hello without the field")

	n := loopback(t, 1, 1)
	h, l, err := n.Listen(0)
	require.NoError(t, err)
	defer l.Close()
	hd, err := decodeHandle(h)
	require.NoError(t, err)
	c, err := gonet.Dial("tcp", hd.addr.String())
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Write(hello{nonce: hd.nonce, comm: 9, nSocks: 1, nThrd: 1, inlineKiB: MaxInline>>10 + 1}.encode())
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(l.(*socketListener).Rejected()) == 1 }, 5*time.Second, time.Millisecond)
	assert.ErrorContains(t, l.(*socketListener).Rejected()[0], fmt.Sprintf("inline messages of up to %d KiB: want at most %d KiB", MaxInline>>10+1, MaxInline>>10))
}

// TestSocketWaitPoller runs the message, vanishing-peer and close checks
// with the helpers waiting in Go's poller (NCCLGO_SOCKET_WAIT=poller, and
// the default), one socket per thread (where it applies) and two (where
// ppoll stays), and with NCCLGO_SOCKET_WAIT=ppoll.
func TestSocketWaitPoller(t *testing.T) {
	for _, tc := range []struct {
		wait           string
		threads, socks int
	}{{WaitPoller, 1, 1}, {"", 4, 1}, {WaitPoller, 2, 2}, {WaitPPoll, 2, 1}} {
		t.Run(fmt.Sprintf("%q/%dx%d", tc.wait, tc.threads, tc.socks), func(t *testing.T) {
			n, err := NewSocket(SocketOptions{Interface: "lo", Family: "AF_INET", NThreads: tc.threads, NSocksPerThread: tc.socks, Wait: tc.wait, HandshakeTimeout: 5 * time.Second})
			require.NoError(t, err)
			sc, rc := pair(t, n)
			want := tc.socks == 1 && tc.wait != WaitPPoll
			require.Equal(t, want, sc.(*sendComm).poller, "the sender waits in the poller")
			require.Equal(t, want, rc.(*recvComm).poller, "the receiver waits in the poller")
			testMessages(t, n, goMem)
			testVanishedSender(t, n, goMem)
			testVanishedReceiver(t, n, goMem)
			// Pending requests on both sides when closing.
			_ = post(t, func() (Request, error) { return rc.Irecv(make([]byte, 10), 0, nil) })
			_ = post(t, func() (Request, error) { return sc.Isend(make([]byte, 4<<20), 1, nil) })
			require.NoError(t, sc.Close())
			require.NoError(t, rc.Close())
		})
	}
	_, err := SocketOptionsFromEnv(envmap.Getenv("NCCLGO_SOCKET_WAIT", "epoll"))
	require.ErrorContains(t, err, `NCCLGO_SOCKET_WAIT="epoll": want "poller" (the default) or "ppoll"`)
}
