package proxy

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	ncclnet "github.com/ncclgo/ncclgo/runtime/net"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hostConn stands for a connection whose memory is host memory mapped
// outside the Go heap (as the pinned staging buffers are): each Progress
// writes into it, so that touching it after Remove's return (once the test
// unmapped it) would crash the test.
type hostConn struct {
	mem     []byte
	calls   atomic.Int64
	inside  atomic.Bool
	slow    time.Duration
	failAt  int64
	failErr error
}

func newHostConn(t *testing.T) *hostConn {
	m, err := syscall.Mmap(-1, 0, 4096, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	require.NoError(t, err)
	return &hostConn{mem: m}
}

func (c *hostConn) Progress() (bool, error) {
	c.inside.Store(true)
	defer c.inside.Store(false)
	n := c.calls.Add(1)
	c.mem[n%4096]++
	if c.slow > 0 {
		time.Sleep(c.slow)
	}
	if c.failAt > 0 && n >= c.failAt {
		return false, c.failErr
	}
	return true, nil
}

func (c *hostConn) unmap(t *testing.T) { require.NoError(t, syscall.Munmap(c.mem)) }

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Microsecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("%s: not within 5 s", what)
}

func settles(n int) bool {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if runtime.NumGoroutine() <= n {
			return true
		}
	}
	return false
}

func TestStartStop(t *testing.T) {
	before := runtime.NumGoroutine()
	require.False(t, Running())
	a := Acquire()
	require.True(t, Running())
	b := Acquire()
	require.Same(t, a, b, "one engine per process")
	c := newHostConn(t)
	require.NoError(t, a.Add(context.Background(), "comm0", c, nil))
	waitFor(t, "progress", func() bool { return c.calls.Load() > 10 })
	a.Release()
	require.True(t, Running(), "one holder left")
	require.NoError(t, b.Remove(c))
	b.Release()
	require.False(t, Running())
	require.ErrorIs(t, b.Add(context.Background(), "comm0", newHostConn(t), nil), ErrStopped)
	b.Release() // more releases than acquires: no-op
	require.True(t, settles(before), "the engine's goroutine is gone")
	c.unmap(t)

	// A new holder starts a new engine.
	d := Acquire()
	require.NotSame(t, a, d)
	d.Release()
	require.False(t, Running())
}

func TestRemoveWaitsForThePass(t *testing.T) {
	e := New()
	defer e.Release()
	c := newHostConn(t)
	c.slow = 2 * time.Millisecond
	other := newHostConn(t)
	require.NoError(t, e.Add(context.Background(), 1, c, nil))
	require.NoError(t, e.Add(context.Background(), 2, other, nil))
	waitFor(t, "inside Progress", c.inside.Load)
	require.NoError(t, e.Remove(c))
	require.False(t, c.inside.Load(), "Remove returned while Progress ran")
	calls := c.calls.Load()
	c.unmap(t) // a later Progress would fault
	n := other.calls.Load()
	waitFor(t, "the other connection goes on", func() bool { return other.calls.Load() > n+5 })
	assert.Equal(t, calls, c.calls.Load())
	assert.Equal(t, 1, e.Len())
	require.NoError(t, e.Remove(c), "removing twice is a no-op")
	require.NoError(t, e.Remove(other))
	other.unmap(t)
	require.Error(t, e.Add(context.Background(), 1, nil, nil))
}

func TestDetachTakesOneOwnersConnections(t *testing.T) {
	e := New()
	defer e.Release()
	type comm struct{ id int }
	a, b := &comm{1}, &comm{2}
	var as []*hostConn
	for range 3 {
		c := newHostConn(t)
		as = append(as, c)
		require.NoError(t, e.Add(context.Background(), a, c, nil))
	}
	bc := newHostConn(t)
	require.NoError(t, e.Add(context.Background(), b, bc, nil))
	require.Error(t, e.Add(context.Background(), b, bc, nil), "added twice")
	waitFor(t, "progress", func() bool { return as[2].calls.Load() > 0 })
	require.NoError(t, e.Detach(a)) // Abort or Destroy of comm a
	for _, c := range as {
		require.False(t, c.inside.Load())
		c.unmap(t)
	}
	assert.Equal(t, 1, e.Len())
	n := bc.calls.Load()
	waitFor(t, "comm b goes on", func() bool { return bc.calls.Load() > n+5 })
	require.NoError(t, e.Detach(b))
	bc.unmap(t)
}

func TestErrorAndCancellation(t *testing.T) {
	e := New()
	defer e.Release()
	boom := errors.New("boom")
	c := newHostConn(t)
	c.failAt, c.failErr = 3, boom
	got := make(chan error, 2)
	require.NoError(t, e.Add(context.Background(), 1, c, func(err error) { got <- err }))
	select {
	case err := <-got:
		require.ErrorIs(t, err, boom)
	case <-time.After(5 * time.Second):
		t.Fatal("no error reported")
	}
	time.Sleep(5 * time.Millisecond)
	assert.Equal(t, int64(3), c.calls.Load(), "a failed connection is not progressed")
	require.ErrorIs(t, e.Remove(c), boom, "Remove returns the connection's error")
	assert.Empty(t, got, "reported once")

	// Cancellation of the context it was added with (a communicator's).
	ctx, cancel := context.WithCancel(context.Background())
	d := newHostConn(t)
	require.NoError(t, e.Add(ctx, 2, d, func(err error) { got <- err }))
	waitFor(t, "progress", func() bool { return d.calls.Load() > 0 })
	cancel()
	select {
	case err := <-got:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(5 * time.Second):
		t.Fatal("cancellation not reported")
	}
	n := d.calls.Load()
	time.Sleep(5 * time.Millisecond)
	assert.Equal(t, n, d.calls.Load())
	require.ErrorIs(t, e.Detach(2), context.Canceled)
	c.unmap(t)
	d.unmap(t)
}

// netConn receives messages forever over a socket connection, as a NET
// connection's receiving side does.
type netConn struct {
	rc  ncclnet.RecvComm
	buf []byte
	req ncclnet.Request
	got int
}

func (c *netConn) Progress() (bool, error) {
	if c.req == nil {
		r, err := c.rc.Irecv(c.buf, 0, nil)
		if err != nil || r == nil {
			return false, err
		}
		c.req = r
	}
	done, _, err := c.req.Test()
	if err != nil || !done {
		return false, err
	}
	c.req = nil
	c.got++
	return true, nil
}

func TestVanishedPeer(t *testing.T) {
	n, err := ncclnet.NewSocket(ncclnet.SocketOptions{Interface: "lo", Family: "AF_INET"})
	require.NoError(t, err)
	h, l, err := n.Listen(0)
	require.NoError(t, err)
	defer l.Close()
	sc, err := n.Connect(0, h)
	require.NoError(t, err)
	var rc ncclnet.RecvComm
	waitFor(t, "accept", func() bool { rc, err = n.Accept(l); require.NoError(t, err); return rc != nil })
	defer rc.Close()

	e := Acquire()
	defer e.Release()
	c := &netConn{rc: rc, buf: make([]byte, 64)}
	got := make(chan error, 1)
	require.NoError(t, e.Add(context.Background(), "comm", c, func(err error) { got <- err }))
	r, err := sc.Isend([]byte("hello"), 0, nil)
	require.NoError(t, err)
	require.NotNil(t, r)
	require.NoError(t, sc.Close()) // the peer vanishes
	select {
	case err := <-got:
		require.ErrorIs(t, err, ncclnet.ErrPeer)
		require.ErrorContains(t, err, rc.Peer(), "the error names the peer")
		require.ErrorContains(t, err, "closed the connection")
	case <-time.After(10 * time.Second):
		t.Fatal("the vanished peer was not reported within 10 s")
	}
	require.ErrorIs(t, e.Detach("comm"), ncclnet.ErrPeer)
}

// busyEvery is busy on one pass in every, idle on the others: the engine
// keeps spinning (each busy pass restarts SpinIdle).
type busyEvery struct {
	n, every int64
}

func (c *busyEvery) Progress() (bool, error) {
	c.n++
	return c.n%c.every == 0, nil
}

// A spinning engine yields its P only where Ps are scarce: a Gosched on
// its locked thread costs two thread handoffs (BenchmarkGoschedLocked).
func TestSpinYieldsOnlyWhenPsAreScarce(t *testing.T) {
	for _, procs := range []int{yieldMaxProcs, yieldMaxProcs + 2} {
		prev := runtime.GOMAXPROCS(procs)
		e := New()
		c := &busyEvery{every: 2 * yieldEvery}
		require.NoError(t, e.Add(context.Background(), 1, c, nil))
		time.Sleep(20 * time.Millisecond)
		require.NoError(t, e.Detach(1))
		e.Release()
		runtime.GOMAXPROCS(prev)
		require.Greater(t, c.n, int64(4*yieldEvery), "GOMAXPROCS %d: too few passes to tell", procs)
		if procs <= yieldMaxProcs {
			assert.Positive(t, e.yields.Load(), "GOMAXPROCS %d: the spinning engine never yielded", procs)
		} else {
			assert.Zero(t, e.yields.Load(), "GOMAXPROCS %d: the spinning engine yielded its P", procs)
		}
	}
}

// BenchmarkGoschedLocked is the price of a runtime.Gosched on a goroutine
// locked to its thread (the engine's), against an unlocked one.
func BenchmarkGoschedLocked(b *testing.B) {
	for _, locked := range []bool{true, false} {
		name := "unlocked"
		if locked {
			name = "locked"
		}
		b.Run(name, func(b *testing.B) {
			done := make(chan struct{})
			go func() {
				defer close(done)
				if locked {
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
				}
				for range b.N {
					runtime.Gosched()
				}
			}()
			<-done
		})
	}
}
