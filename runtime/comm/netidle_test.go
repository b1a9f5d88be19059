package comm

import (
	"errors"
	"fmt"
	"log/slog"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	ncclnet "github.com/ncclgo/ncclgo/runtime/net"
	"github.com/ncclgo/ncclgo/runtime/transport"
)

// peerAbortErr is what the proxy reports when rank 1's goodbye says it
// aborted (transport's NET).
func peerAbortErr() error {
	return fmt.Errorf("transport: rank 0 receiving from rank 1: %w", &ncclnet.PeerError{Peer: "host1:4242", Op: "NET protocol",
		Err: fmt.Errorf("%w: rank 1 aborted: communicator aborted", transport.ErrPeerAborted)})
}

// logged is a host-only engine whose log lines (INFO and up) land in buf.
func logged(t *testing.T, buf *syncBuffer) *Engine {
	e := fakeEngine(t, 0, 2)
	e.log = slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	return e
}

// A NET peer that aborts (or exits) while this rank has nothing running,
// as at a program's end, does not abort this rank: as in NCCL only work
// that needs the connection notices. The next launch fails at once,
// naming the peer, launching nothing; Destroy returns nil and says at
// INFO what happened. Before, the rank aborted: its Err and Destroy
// reported the peer's abort.
func TestNETPeerLostWhileIdle(t *testing.T) {
	var buf syncBuffer
	e := logged(t, &buf)
	e.events[0x5a] = &fakeLaunch{done: func() bool { return true }} // an earlier launch, done
	e.proxyFailed(peerAbortErr())
	assert.False(t, e.Aborted(), "idle: no abort")
	assert.Nil(t, e.NetError())
	require.Error(t, e.IdleNetError())
	assert.Zero(t, e.flags.abort.Load(), "the kernels' abort flag stays down")
	assert.Contains(t, buf.String(), "rank 1 aborted")

	// The next launch: refused before anything is queued (run's first
	// look is under mu, before the launcher, which a host-only engine
	// lacks: reaching it would panic).
	start := time.Now()
	_, err := e.run(nil, nil)
	require.Error(t, err)
	assert.Less(t, time.Since(start), 100*time.Millisecond)
	assert.ErrorIs(t, err, ErrPeerFailed)
	assert.ErrorIs(t, err, transport.ErrPeerAborted)
	assert.ErrorIs(t, err, ncclnet.ErrPeer)
	assert.ErrorContains(t, err, "nothing launched")
	assert.ErrorContains(t, err, "rank 1 aborted")
	assert.ErrorContains(t, err, "host1:4242")
	assert.False(t, e.Aborted())

	// A second lost connection (the same peer's other direction) changes
	// nothing.
	e.proxyFailed(errors.New("transport: rank 0 sending to rank 1: EOF"))
	assert.False(t, e.Aborted())
	assert.ErrorContains(t, e.IdleNetError(), "rank 1 aborted", "the first error stays")

	require.NoError(t, e.Destroy(), "a clean end: nothing needed the peer")
	assert.Contains(t, buf.String(), "communicator destroyed; a NET connection was lost while no launch ran")
	assert.False(t, e.Aborted())
}

// A NET peer lost while a launch of this rank runs aborts the rank at
// once: its kernels may wait on the peer for ever.
func TestNETPeerLostWhileRunning(t *testing.T) {
	e := fakeEngine(t, 0, 2)
	e.grace = time.Second
	ev := &fakeLaunch{}
	ev.done = e.Aborted // the kernel waits on the peer until the abort
	e.events[0x5a] = ev
	start := time.Now()
	e.proxyFailed(peerAbortErr())
	assert.True(t, e.Aborted())
	assert.EqualValues(t, 1, e.flags.abort.Load(), "the kernels were told")
	assert.Less(t, time.Since(start), 100*time.Millisecond)
	require.ErrorIs(t, e.NetError(), transport.ErrPeerAborted)
	assert.Nil(t, e.IdleNetError())
	assert.ErrorContains(t, e.abortCause(), "rank 1 aborted", "its own goodbyes say why")
	require.NoError(t, e.Destroy(), "the kernel stopped within the grace")
}

// A launch that run does not see (a CUDA graph's replay, a multi-rank
// launch) starting after the peer was lost while idle: the watch finds
// it running within milliseconds and aborts the rank, naming the peer.
func TestNETPeerLostThenUnseenLaunch(t *testing.T) {
	e := fakeEngine(t, 0, 2)
	e.grace = time.Second
	var running atomic.Bool
	e.events[0x5a] = &fakeLaunch{done: func() bool { return !running.Load() || e.Aborted() }}
	e.proxyFailed(peerAbortErr())
	time.Sleep(5 * netWatchEvery)
	require.False(t, e.Aborted(), "nothing runs yet")
	start := time.Now()
	running.Store(true) // a replay: its event's record node has not run
	require.True(t, spinUntil(time.Second, e.Aborted), "the watch did not abort the rank")
	took := time.Since(start)
	t.Logf("aborted after %v", took)
	assert.Less(t, took, 200*time.Millisecond)
	assert.ErrorIs(t, e.NetError(), transport.ErrPeerAborted)
	assert.ErrorContains(t, e.NetError(), "rank 1 aborted")
	require.NoError(t, e.Destroy())
}

// The race: the goodbye arrives just before or just after a launch.
// Either the launch is refused (the error was there first) or the rank
// aborts (the launch was seen running); never a launch that runs on with
// the rank not aborted. The launch is run's own look under mu, then a
// launch event recorded, as run records one.
func TestNETPeerLostRacesLaunch(t *testing.T) {
	gs := goruntime.NumGoroutine()
	refused, aborted := 0, 0
	for i := range 2000 {
		e := fakeEngine(t, 0, 2)
		e.grace = time.Second
		launched := make(chan error, 1)
		var wg sync.WaitGroup
		wg.Go(func() {
			e.mu.Lock()
			defer e.mu.Unlock()
			if err := e.IdleNetError(); err != nil { // as run
				launched <- err
				return
			}
			e.events[0x5a] = &fakeLaunch{done: e.Aborted} // waits on the peer
			launched <- nil
		})
		if i%2 == 0 {
			goruntime.Gosched()
		}
		e.proxyFailed(peerAbortErr())
		wg.Wait()
		if err := <-launched; err != nil {
			refused++
			require.False(t, e.Aborted(), "round %d: refused and aborted", i)
		} else {
			// Launched: aborted now, or by the watch within a bound.
			require.True(t, spinUntil(time.Second, e.Aborted), "round %d: the launch runs on a lost connection, the rank not aborted", i)
			aborted++
		}
		require.NoError(t, e.Destroy(), "round %d", i)
	}
	t.Logf("refused %d, aborted %d", refused, aborted)
	for d := time.Now().Add(2 * time.Second); goruntime.NumGoroutine() > gs && time.Now().Before(d); {
		time.Sleep(time.Millisecond)
	}
	assert.LessOrEqual(t, goruntime.NumGoroutine(), gs, "no watch left behind")
}

// Destroy ends the watch of a rank that lost a peer while idle and whose
// launch then ran: no goroutine is left, and an abort that follows a
// Destroy finds nothing to do.
func TestNETPeerLostWatchEnds(t *testing.T) {
	gs := goruntime.NumGoroutine()
	e := fakeEngine(t, 0, 2)
	e.proxyFailed(peerAbortErr())
	require.NoError(t, e.Destroy())
	e.proxyFailed(peerAbortErr()) // a late report: nothing starts
	for d := time.Now().Add(2 * time.Second); goruntime.NumGoroutine() > gs && time.Now().Before(d); {
		time.Sleep(time.Millisecond)
	}
	assert.LessOrEqual(t, goruntime.NumGoroutine(), gs)
}

func spinUntil(d time.Duration, f func() bool) bool {
	for end := time.Now().Add(d); !f(); time.Sleep(50 * time.Microsecond) {
		if time.Now().After(end) {
			return false
		}
	}
	return true
}
