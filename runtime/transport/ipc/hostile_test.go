package ipc

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const envFDChild = "NCCLGO_IPC_TEST_FD_CHILD"

// TestAcceptAfterFDExhaustion: when descriptors run out, the server's and
// the watcher's Accept fail (EMFILE); they used to stop for good, so that
// every later Fetch waited out its deadline and no Dial was acknowledged.
// They retry now. Runs in a child process, which lowers its own
// RLIMIT_NOFILE.
func TestAcceptAfterFDExhaustion(t *testing.T) {
	if os.Getenv(envFDChild) != "" {
		fdExhaustionChild(t)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestAcceptAfterFDExhaustion$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), envFDChild+"=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "child:\n%s", out)
	require.Contains(t, string(out), "CHILD OK", "child:\n%s", out)
}

func fdExhaustionChild(t *testing.T) {
	srv, err := Listen(NewName("ncclgo-test-fd"))
	require.NoError(t, err)
	defer srv.Close()
	null, err := syscall.Open(os.DevNull, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	require.NoError(t, err)
	require.NoError(t, srv.Add(1, null))
	w0, err := NewWatcher(0, 2, nil)
	require.NoError(t, err)
	defer w0.Close()
	w1, err := NewWatcher(1, 2, nil)
	require.NoError(t, err)
	defer w1.Close()

	var old syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old))
	es, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	low := old
	low.Cur = uint64(len(es) + 16)
	require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low))
	var fill []int
	for {
		fd, err := syscall.Open(os.DevNull, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			require.ErrorIs(t, err, syscall.EMFILE)
			break
		}
		fill = append(fill, fd)
	}
	// One descriptor for each dialer: the listeners' accepts then fail.
	var raws []net.Conn
	// A listener whose accept met EMFILE retries every few milliseconds
	// and may take the descriptor freed for the next dialer first (it
	// accepts the earlier dial: the retry this test is about); then that
	// dialer frees one more.
	for _, name := range []string{srv.Name(), w0.Name()} {
		var c net.Conn
		for try := 0; ; try++ {
			syscall.Close(fill[len(fill)-1])
			fill = fill[:len(fill)-1]
			c, err = net.Dial("unix", name)
			if err == nil || !errors.Is(err, syscall.EMFILE) || try == 3 {
				break
			}
		}
		require.NoError(t, err)
		raws = append(raws, c)
	}
	time.Sleep(100 * time.Millisecond) // both accept loops meet EMFILE
	for _, c := range raws {
		c.Close()
	}
	closeAll(fill)
	require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old))

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	fds, err := Fetch(ctx, srv.Addr(), 1)
	require.NoError(t, err, "Fetch after the descriptors came back")
	closeAll(fds)
	require.NoError(t, w1.Dial(ctx, 0, w0.Addr()), "Dial after the descriptors came back")
	os.Stdout.WriteString("CHILD OK\n")
}

// TestServerRefusesWithoutSecret: a process of the same user that knows
// the socket's name (from /proc/net/unix) but not the secret gets no
// descriptor, with the old request format or a wrong proof.
func TestServerRefusesWithoutSecret(t *testing.T) {
	defer func(d time.Duration) { handshakeTimeout = d }(handshakeTimeout)
	handshakeTimeout = 300 * time.Millisecond
	srv, err := Listen(NewName("ncclgo-test-auth"))
	require.NoError(t, err)
	defer srv.Close()
	null, err := syscall.Open(os.DevNull, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	require.NoError(t, err)
	require.NoError(t, srv.Add(1, null))

	// The bare request: key 1, as the server used to accept.
	nc, err := net.Dial("unix", srv.Name())
	require.NoError(t, err)
	c := nc.(*net.UnixConn)
	defer c.Close()
	var req [8]byte
	binary.LittleEndian.PutUint64(req[:], 1)
	_, _ = c.Write(req[:])
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	oob := make([]byte, syscall.CmsgSpace(4))
	for {
		buf := make([]byte, 64)
		_, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
		got, _ := parseRights(oob[:oobn])
		closeAll(got)
		require.Empty(t, got, "a descriptor went to a process without the secret")
		if err != nil {
			break
		}
	}

	// A wrong secret.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	fds, err := Fetch(ctx, formatAddr(srv.Name(), newSecret()), 1)
	require.Error(t, err)
	assert.Empty(t, fds)
	assert.Contains(t, err.Error(), "authenticating")

	// The secret: served.
	fds, err = Fetch(ctx, srv.Addr(), 1)
	require.NoError(t, err)
	closeAll(fds)

	// Name instead of Addr: a clear error.
	_, err = Fetch(ctx, srv.Name(), 1)
	require.ErrorContains(t, err, "carries no secret")
}

// TestWatcherForgedGreeting: a process without the secret cannot make the
// watcher report a rank lost, with the old greeting or a wrong proof.
func TestWatcherForgedGreeting(t *testing.T) {
	lost := newLostLog()
	w, err := NewWatcher(0, 2, lost.add)
	require.NoError(t, err)
	defer w.Close()
	// The old greeting: rank 1, then an end without goodbye.
	c, err := net.Dial("unix", w.Name())
	require.NoError(t, err)
	var hello [4]byte
	binary.LittleEndian.PutUint32(hello[:], 1)
	_, _ = c.Write(hello[:])
	time.Sleep(50 * time.Millisecond)
	c.Close()
	// A wrong proof.
	nc, err := net.Dial("unix", w.Name())
	require.NoError(t, err)
	_, err = dialAuth(nc.(*net.UnixConn), newSecret(), hello[:])
	require.NoError(t, err)
	time.Sleep(50 * time.Millisecond)
	nc.Close()
	// A watcher of another job (another secret) dialing as rank 1.
	other, err := NewWatcher(1, 2, nil)
	require.NoError(t, err)
	defer other.Close()
	err = other.Dial(context.Background(), 0, formatAddr(w.Name(), newSecret()))
	require.Error(t, err)
	select {
	case r := <-lost.seen:
		t.Fatalf("a forged greeting made the watcher report rank %d lost", r)
	case <-time.After(300 * time.Millisecond):
	}
}

// TestIdleStrangersBounded: connections that never authenticate cost at
// most maxPending goroutines and descriptors (they used to cost one each
// until Close), and an authenticated connection that goes silent is
// closed after handshakeTimeout; real requests still get through.
func TestIdleStrangersBounded(t *testing.T) {
	defer func(d time.Duration) { handshakeTimeout = d }(handshakeTimeout)
	handshakeTimeout = 300 * time.Millisecond
	srv, err := Listen(NewName("ncclgo-test-idle"))
	require.NoError(t, err)
	defer srv.Close()
	null, err := syscall.Open(os.DevNull, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	require.NoError(t, err)
	require.NoError(t, srv.Add(1, null))
	_, g0 := resources(t)
	var idle []net.Conn
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	for range 200 {
		c, err := net.Dial("unix", srv.Name())
		require.NoError(t, err)
		idle = append(idle, c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	fds, err := Fetch(ctx, srv.Addr(), 1)
	require.NoError(t, err, "a real Fetch behind 200 idle strangers")
	closeAll(fds)
	time.Sleep(100 * time.Millisecond)
	_, g := resources(t)
	assert.LessOrEqual(t, g-g0, maxPending+4, "goroutines held by 200 idle strangers")

	// Authenticated, then silent: closed after handshakeTimeout.
	nc, err := net.Dial("unix", srv.Name())
	require.NoError(t, err)
	c := nc.(*net.UnixConn)
	defer c.Close()
	want, err := dialAuth(c, srv.secret, nil)
	require.NoError(t, err)
	require.NoError(t, checkProof(c, want))
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	start := time.Now()
	_, err = c.Read(make([]byte, 1))
	require.Error(t, err)
	var ne net.Error
	assert.False(t, errors.As(err, &ne) && ne.Timeout(), "the server kept an idle connection open")
	assert.Less(t, time.Since(start), 3*time.Second)
}

// TestFetchBounded: a server that accepts but never answers (stalled)
// ends Fetch after handshakeTimeout even under context.Background(),
// the C ABI's context.
func TestFetchBounded(t *testing.T) {
	defer func(d time.Duration) { handshakeTimeout = d }(handshakeTimeout)
	handshakeTimeout = 300 * time.Millisecond
	name := NewName("ncclgo-test-stall")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"})
	require.NoError(t, err)
	defer ln.Close()
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := Fetch(context.Background(), formatAddr(name, newSecret()), 1)
		done <- err
	}()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Contains(t, err.Error(), "no answer")
		assert.Less(t, time.Since(start), 3*time.Second)
	case <-time.After(10 * time.Second):
		t.Fatal("Fetch from a stalled server did not return")
	}
}
