package cuda

import (
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGPUGraphCapture captures add1 on a stream in global mode, with the
// calls the launch path makes during a capture (allocating, creating and
// querying events, an upload on another stream) made meanwhile, and an
// external event record and wait; then replays the graph and checks that
// each replay ran once, with the arguments it was captured with.
func TestGPUGraphCapture(t *testing.T) {
	const n = 256
	c, f, p, s, done := graphFixture(t, n)
	other, err := c.NewStream(true)
	require.NoError(t, err)
	defer func() { assert.NoError(t, other.Destroy()) }()
	before, err := c.NewEvent(true)
	require.NoError(t, err)
	defer func() { assert.NoError(t, before.Destroy()) }()
	require.NoError(t, before.Record(other))

	st, err := s.CaptureStatus()
	require.NoError(t, err)
	require.Equal(t, CaptureNone, st)

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	require.NoError(t, s.BeginCapture(CaptureModeGlobal))
	st, err = s.CaptureStatus()
	require.NoError(t, err)
	require.Equal(t, CaptureActive, st, "%v", st)

	// What the launch path does during a capture: each is potentially
	// unsafe in global mode and would invalidate the capture, unless made
	// in relaxed mode (the shim's RELAXED).
	q, err := c.MemAlloc(4 * n)
	require.NoError(t, err, "MemAlloc during a global capture")
	ev, err := c.NewEvent(true)
	require.NoError(t, err, "NewEvent during a global capture")
	_, err = before.Query()
	require.NoError(t, err, "Event.Query of an eager event during a global capture")
	vals := make([]int32, n)
	for i := range vals {
		vals[i] = int32(i)
	}
	require.NoError(t, other.MemcpyHtoDWait(q, unsafe.Pointer(&vals[0]), 4*n), "upload on another stream during a global capture")

	require.NoError(t, s.WaitEventExternal(before))
	var a packArgs
	a.u64(uint64(p))
	a.u32(n)
	require.NoError(t, s.Launch(f, Dim1(1), Dim1(n), 0, a.b))
	// The launch arguments are captured by value: changing them afterwards
	// must not change the graph.
	a = packArgs{}
	a.u64(uint64(q))
	a.u32(n)
	require.NoError(t, done.RecordExternal(s))
	st, err = s.CaptureStatus()
	require.NoError(t, err)
	require.Equal(t, CaptureActive, st, "the capture was invalidated")
	g, err := s.EndCapture()
	require.NoError(t, err)
	nodes, err := g.NodeCount()
	require.NoError(t, err)
	assert.Equal(t, 3, nodes, "event wait, kernel, event record")
	x, err := g.Instantiate()
	require.NoError(t, err)
	require.NoError(t, g.Destroy())
	defer func() { assert.NoError(t, x.Destroy()) }()
	require.NoError(t, ev.Destroy())

	const replays = 100
	for range replays {
		require.NoError(t, x.Launch(s))
	}
	// done is an ordinary event, recorded by each replay.
	waitReplays(t, done)
	require.NoError(t, s.Synchronize())
	requireInts(t, c, p, n, func(int) int32 { return replays })
	out := make([]int32, n)
	require.NoError(t, c.MemcpyDtoH(unsafe.Pointer(&out[0]), q, 4*n))
	for i, v := range out {
		require.Equal(t, int32(i), v, "q[%d] (the upload)", i)
	}
	require.NoError(t, c.MemFree(q))

	// Outside a capture, external waits and records are refused.
	assert.Error(t, s.WaitEventExternal(before))
	assert.Error(t, done.RecordExternal(s))
	assert.ErrorIs(t, s.BeginCapture(CaptureMode(7)), ErrInvalidValue)
}

// waitReplays polls done, which every replay of a graph records, until it
// completes: an ordinary event, queryable although graphs record it. It
// fails t after a minute.
func waitReplays(t *testing.T, done *Event) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ok, err := done.Query()
		require.NoError(t, err)
		if ok {
			return
		}
		require.True(t, time.Now().Before(deadline), "replays did not finish")
		time.Sleep(100 * time.Microsecond)
	}
}

// graphFixture is what the graph tests capture with: device 0's context,
// add1, n zeroed ints for it, a stream and an event, released at the end
// of t.
func graphFixture(t *testing.T, n int) (*Context, *Function, DevicePtr, *Stream, *Event) {
	t.Helper()
	c := gpu(t)
	m := loadTestModule(t, c)
	f, err := m.Function("add1")
	require.NoError(t, err)
	p, err := c.MemAlloc(uint64(4 * n))
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.MemFree(p)) })
	require.NoError(t, c.MemsetD8(p, 0, uint64(4*n)))
	s, err := c.NewStream(true)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, s.Destroy()) })
	done, err := c.NewEvent(true)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, done.Destroy()) })
	return c, f, p, s, done
}

// requireInts fails t unless the n ints at p hold want(i) each.
func requireInts(t *testing.T, c *Context, p DevicePtr, n int, want func(i int) int32) {
	t.Helper()
	out := make([]int32, n)
	require.NoError(t, c.MemcpyDtoH(unsafe.Pointer(&out[0]), p, uint64(4*n)))
	for i, v := range out {
		require.Equal(t, want(i), v, "p[%d]", i)
	}
}
