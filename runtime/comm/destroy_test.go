package comm

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeLaunch stands in for a rank's completion event: done reports the
// kernel's exit; destroyed records that Destroy released the event.
type fakeLaunch struct {
	done      func() bool
	err       error
	destroyed atomic.Bool
}

func (f *fakeLaunch) Query() (bool, error) {
	if f.err != nil {
		return false, f.err
	}
	return f.done(), nil
}

func (f *fakeLaunch) Destroy() error {
	f.destroyed.Store(true)
	return nil
}

// launched returns a host-only engine with one launch on stream 0x5a
// (ev), its error flag set to 7 (whether the flags were freed shows in
// ErrorCode), and short bounds: 50 ms for the launches, 50 ms after the
// abort.
func launched(t *testing.T, ev *fakeLaunch) *Engine {
	t.Helper()
	e := fakeEngine(t, 0, 2)
	e.res.timeout, e.grace = 50*time.Millisecond, 50*time.Millisecond
	e.events[0x5a] = ev
	e.Fault(7, nil)
	require.EqualValues(t, 7, e.ErrorCode())
	return e
}

// A kernel that never finishes, not even after the abort: Destroy returns
// within its bounds, frees nothing a kernel touches and says what it
// left.
func TestDestroyLeaksWhileKernelRuns(t *testing.T) {
	ev := &fakeLaunch{done: func() bool { return false }}
	e := launched(t, ev)
	start := time.Now()
	err := e.Destroy()
	assert.Less(t, time.Since(start), 2*time.Second, "bounded: 50 ms, the abort, 50 ms")
	require.Error(t, err)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, ErrAborted)
	assert.ErrorContains(t, err, "stream(s) 0x5a had not finished")
	assert.ErrorContains(t, err, "left allocated, as a kernel may still use them")
	assert.ErrorContains(t, err, "host-mapped abort and error flags")
	assert.True(t, e.Aborted(), "the abort flag was set for the kernel")
	assert.EqualValues(t, 7, e.ErrorCode(), "the flags the kernel polls stay allocated")
	assert.False(t, ev.destroyed.Load(), "the event stays")
	require.ErrorIs(t, e.Destroy(), ErrDestroyed)
}

// A launch whose event cannot be queried (a failed context) may still be
// running for all Destroy knows: nothing it touches is freed.
func TestDestroyLeaksWhenQueryFails(t *testing.T) {
	ev := &fakeLaunch{err: errors.New("CUDA_ERROR_ILLEGAL_ADDRESS")}
	e := launched(t, ev)
	err := e.Destroy()
	require.Error(t, err)
	assert.ErrorContains(t, err, "stream(s) 0x5a finished is unknown")
	assert.ErrorContains(t, err, "CUDA_ERROR_ILLEGAL_ADDRESS")
	assert.ErrorContains(t, err, "left allocated")
	assert.EqualValues(t, 7, e.ErrorCode(), "the flags stay allocated")
	assert.False(t, ev.destroyed.Load(), "the event stays")
}

// A kernel that exits once it sees the abort flag: Destroy aborts, then
// frees everything and reports the timeout.
func TestDestroyFreesAfterKernelsReactToAbort(t *testing.T) {
	ev := &fakeLaunch{}
	e := launched(t, ev)
	ev.done = e.Aborted
	err := e.Destroy()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, ErrAborted)
	assert.NotContains(t, err.Error(), "left allocated")
	assert.Zero(t, e.ErrorCode(), "the flags were freed")
	assert.True(t, ev.destroyed.Load())
}

// Kernels that finish in time: everything is freed, no error.
func TestDestroyFreesFinishedKernels(t *testing.T) {
	var done atomic.Bool
	time.AfterFunc(10*time.Millisecond, func() { done.Store(true) })
	ev := &fakeLaunch{done: done.Load}
	e := launched(t, ev)
	e.res.timeout = 10 * time.Second
	require.NoError(t, e.Destroy())
	assert.Zero(t, e.ErrorCode())
	assert.True(t, ev.destroyed.Load())
	assert.False(t, e.Aborted())
}
