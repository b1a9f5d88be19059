package main

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo"
)

// poll is torch's watchdog: on a thread of its own it calls
// ncclCommGetAsyncError on h until the call fails or reports an error,
// and then sends what it saw (the call's result, the async error and the
// last error). polls counts its calls.
func poll(h commHandle, polls *atomic.Int64, seen chan<- [2]result, msg chan<- string) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for {
		var async result
		r := ncclCommGetAsyncError(h, &async)
		polls.Add(1)
		if r != cSuccess || (async != cSuccess && async != cInProgress) {
			msg <- lastError()
			seen <- [2]result{r, async}
			return
		}
		runtime.Gosched()
	}
}

// within waits for ch, failing the test after d: nothing may deadlock.
func within[T any](t *testing.T, d time.Duration, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		require.FailNow(t, "deadlock", "%s did not return within %v", what, d)
		panic("unreachable")
	}
}

// waitPolls waits until the poller has made n more calls.
func waitPolls(t *testing.T, polls *atomic.Int64, n int64) {
	t.Helper()
	start := polls.Load()
	deadline := time.Now().Add(10 * time.Second)
	for polls.Load() < start+n {
		require.True(t, time.Now().Before(deadline), "the poller is stuck")
		time.Sleep(time.Millisecond)
	}
}

// TestWatchdogAbort: torch's watchdog polls ncclCommGetAsyncError from one
// thread while another calls ncclCommAbort. Neither call blocks the other,
// the poller then sees an error (the communicator's abort, or, once it is
// freed, an invalid handle), and its last error says which. The handle is
// gone after the abort (NCCL frees the communicator there; torch never
// destroys an aborted one): ncclCommDestroy of it is ncclInvalidArgument,
// and torch's ncclCommDestroy(NULL) succeeds.
func TestWatchdogAbort(t *testing.T) {
	for i := range 20 {
		c := readyComm(0) // its init succeeded; it runs no kernel
		var polls atomic.Int64
		seen, msg := make(chan [2]result, 1), make(chan string, 1)
		go poll(c.h, &polls, seen, msg)
		waitPolls(t, &polls, int64(1+i*10))
		aborted := make(chan result, 1)
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			aborted <- ncclCommAbort(c.h)
		}()
		assert.EqualValues(t, cSuccess, within(t, 10*time.Second, aborted, "ncclCommAbort"))
		got := within(t, 10*time.Second, seen, "ncclCommGetAsyncError")
		m := <-msg
		switch got[0] {
		case cSuccess: // polled between the abort and the free
			assert.EqualValues(t, cRemoteError, got[1])
			assert.True(t, strings.HasPrefix(m, "ncclCommGetAsyncError: rank 0: "), m)
			assert.Contains(t, m, ncclgo.ErrAborted.Error())
		case cInvalidArgument: // polled after the free
			assert.Contains(t, m, "ncclCommGetAsyncError: ncclgo: comm=")
		default:
			t.Errorf("ncclCommGetAsyncError returned %d (%s)", got[0], m)
		}
		assert.EqualValues(t, cInvalidArgument, ncclCommDestroy(c.h), "the aborted communicator is freed")
		assert.EqualValues(t, cSuccess, ncclCommDestroy(nil))
	}
}

// TestWatchdogAbortsInit: the abort lands while the communicator's
// nonblocking init waits for a peer that never comes (the in-flight work a
// CPU test can make): the poller, which saw ncclInProgress, then sees the
// abort's error, and nothing waits for the init's own timeout.
func TestWatchdogAbortsInit(t *testing.T) {
	c := newComm(&comm{op: "CommInitRankConfig", rank: 1, nRanks: 2})
	out := c.h
	waiting := make(chan struct{})
	runtime.LockOSThread()
	assert.EqualValues(t, cInProgress, c.begin(&out, func(ctx context.Context) (*ncclgo.Comm, error) {
		close(waiting)
		<-ctx.Done() // rank 0 never comes
		return nil, fmt.Errorf("waiting for rank 0: %w", context.Cause(ctx))
	}))
	runtime.UnlockOSThread()
	<-waiting
	var polls atomic.Int64
	seen, msg := make(chan [2]result, 1), make(chan string, 1)
	go poll(out, &polls, seen, msg)
	waitPolls(t, &polls, 100)
	aborted := make(chan result, 1)
	go func() { aborted <- ncclCommAbort(out) }()
	assert.EqualValues(t, cSuccess, within(t, 10*time.Second, aborted, "ncclCommAbort"))
	got := within(t, 10*time.Second, seen, "ncclCommGetAsyncError")
	m := <-msg
	if got[0] == cSuccess {
		assert.EqualValues(t, cInternalError, got[1], "an aborted init is ncclInternalError, as in NCCL")
		assert.Contains(t, m, "ncclCommGetAsyncError: rank 1: its ncclCommInitRankConfig failed: ")
		assert.Contains(t, m, "aborted by ncclCommAbort")
	} else {
		assert.EqualValues(t, cInvalidArgument, got[0], m)
	}
}

// TestAbortDuringDestroy: ncclCommDestroy waits for a blocking init that
// another thread's call started and that waits for a peer; the watchdog's
// ncclCommAbort meanwhile ends that wait (it used to return "already being
// destroyed" and leave the destroy waiting for the init's timeout), and
// the destroy then succeeds. The poller sees the init's end.
func TestAbortDuringDestroy(t *testing.T) {
	c := newComm(&comm{op: "CommInitRankConfig", rank: 1, nRanks: 2})
	out := c.h
	waiting := make(chan struct{})
	runtime.LockOSThread()
	assert.EqualValues(t, cInProgress, c.begin(&out, func(ctx context.Context) (*ncclgo.Comm, error) {
		close(waiting)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for rank 0: %w", context.Cause(ctx))
		case <-time.After(time.Minute): // the bootstrap's own timeout
			return nil, fmt.Errorf("waiting for rank 0: %w", ncclgo.ErrTimeout)
		}
	}))
	runtime.UnlockOSThread()
	<-waiting
	var polls atomic.Int64
	seen, msg := make(chan [2]result, 1), make(chan string, 1)
	go poll(out, &polls, seen, msg)
	destroyed := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		destroyed <- ncclCommDestroy(out)
	}()
	// The destroy is waiting for the init once it marked the comm.
	deadline := time.Now().Add(10 * time.Second)
	for {
		c.mu.Lock()
		d := c.destroying
		c.mu.Unlock()
		if d {
			break
		}
		require.True(t, time.Now().Before(deadline), "ncclCommDestroy never started")
		time.Sleep(time.Millisecond)
	}
	waitPolls(t, &polls, 10)
	assert.EqualValues(t, cSuccess, within(t, 10*time.Second, func() chan result {
		ch := make(chan result, 1)
		go func() { ch <- ncclCommAbort(out) }()
		return ch
	}(), "ncclCommAbort"))
	assert.EqualValues(t, cSuccess, within(t, 10*time.Second, destroyed, "ncclCommDestroy"), lastError())
	got := within(t, 10*time.Second, seen, "ncclCommGetAsyncError")
	m := <-msg
	assert.Contains(t, []result{cSuccess, cInvalidArgument}, got[0], m)
	assert.EqualValues(t, cInvalidArgument, ncclCommDestroy(out), "destroyed")
}
