package cuda

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bigVals is the values the 4 KiB-parameter test kernel (big) writes.
const bigVals = 1020

// launchGraphFixture returns what the launch graph tests use: a GPU's
// context, the test module's big and add1 kernels, a buffer of bigVals
// ints and two streams, all released when t ends.
func launchGraphFixture(t *testing.T) (c *Context, big, add1 *Function, out DevicePtr, s1, s2 *Stream) {
	t.Helper()
	c = gpu(t)
	m := loadTestModule(t, c)
	var err error
	big, err = m.Function("big")
	require.NoError(t, err)
	add1, err = m.Function("add1")
	require.NoError(t, err)
	out, err = c.MemAlloc(4 * bigVals)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.MemFree(out)) })
	s1, err = c.NewStream(true)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, s1.Destroy()) })
	s2, err = c.NewStream(true)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, s2.Destroy()) })
	return c, big, add1, out, s1, s2
}

// TestGPULaunchGraph launches through one launch graph the 4 KiB-parameter
// kernel with new arguments each time, whole and in part, then another
// kernel (add1), on two streams, and checks every result and that every
// launch went through the graph.
func TestGPULaunchGraph(t *testing.T) {
	c, big, add1, out, s1, s2 := launchGraphFixture(t)
	const nVals = bigVals

	bigArgs := func(n int32, seed int32) []byte {
		var a packArgs
		a.u64(uint64(out))
		a.u32(uint32(n))
		a.u32(0)
		for i := range nVals {
			a.u32(uint32(seed*int32(i) + 7))
		}
		return a.b
	}
	g, err := c.NewLaunchGraph(big, 1, 64, bigArgs(0, 0))
	require.NoError(t, err)
	defer func() { assert.NoError(t, g.Destroy()) }()

	read := func() []int32 {
		got := make([]int32, nVals)
		require.NoError(t, c.MemcpyDtoH(unsafe.Pointer(&got[0]), out, 4*nVals))
		return got
	}
	launches := 0
	for round, tc := range []struct {
		n, seed int32
		bytes   int // argument bytes passed (0: all)
		s       *Stream
	}{{3, 1, 0, s1}, {-5, 2, 0, s2}, {11, 3, 256, s1}, {0, 4, 0, s2}} {
		args := bigArgs(tc.n, tc.seed)
		checked := nVals
		if tc.bytes > 0 {
			args = args[:tc.bytes]
			checked = (tc.bytes - 16) / 4
		}
		require.NoError(t, tc.s.LaunchVia(g, big, Dim1(1), Dim1(64), 0, args))
		launches++
		require.NoError(t, tc.s.Synchronize())
		got := read()
		for i := range checked {
			if want := tc.seed*int32(i) + 7 + tc.n; got[i] != want {
				t.Fatalf("round %d: out[%d] = %d, want %d", round, i, got[i], want)
			}
		}
	}
	// Another kernel through the same graph: add1 over out, once; then
	// the same launch twice more: the node holds it already, so the graph
	// is launched without an update, and the kernel runs each time.
	before := read()
	var a packArgs
	a.u64(uint64(out))
	a.u32(nVals)
	for k, n := range []int{1, 2} {
		for range n {
			require.NoError(t, s1.LaunchVia(g, add1, Dim1((nVals+255)/256), Dim1(256), 0, a.b))
			launches++
		}
		require.NoError(t, s1.Synchronize())
		for i, v := range read() {
			if want := before[i] + int32(1+2*k); v != want {
				t.Fatalf("add1 through the graph, %d launches: out[%d] = %d, want %d", 1+2*k, i, v, want)
			}
		}
		if k == 0 {
			assert.Zero(t, g.Same(), "every launch so far wanted another node")
		}
	}
	assert.Equal(t, uint64(2), g.Same(), "launches without an update")
	through, refused := g.Launches()
	assert.Equal(t, uint64(launches), through, "launches through the graph")
	assert.Zero(t, refused, "updates the driver refused")
}

// TestGPUJoinGraph launches add1 through a join graph that waits for an
// event recorded on another stream after the 4 KiB-parameter kernel wrote
// the buffer, and records an event after add1; the other stream waits for
// that event and the kernel's result plus one is what it finds, every
// round, with new values each time.
func TestGPUJoinGraph(t *testing.T) {
	c, big, add1, out, s1, s2 := launchGraphFixture(t)
	const nVals = bigVals
	written, err := c.NewEvent(true)
	require.NoError(t, err)
	defer func() { assert.NoError(t, written.Destroy()) }()
	added, err := c.NewEvent(true)
	require.NoError(t, err)
	defer func() { assert.NoError(t, added.Destroy()) }()

	var a packArgs
	a.u64(uint64(out))
	a.u32(nVals)
	g, err := c.NewJoinGraph(add1, 1, 64, a.b, []*Event{written}, added)
	require.NoError(t, err)
	defer func() { assert.NoError(t, g.Destroy()) }()
	assert.True(t, g.Joins([]*Event{written}, added))
	assert.False(t, g.Joins(nil, added))

	for round := range 4 {
		var b packArgs
		b.u64(uint64(out))
		b.u32(uint32(round))
		b.u32(0)
		for i := range nVals {
			b.u32(uint32(i * (round + 2)))
		}
		require.NoError(t, s2.Launch(big, Dim1(1), Dim1(64), 0, b.b))
		require.NoError(t, written.Record(s2))
		require.NoError(t, s1.LaunchVia(g, add1, Dim1((nVals+255)/256), Dim1(256), 0, a.b))
		require.NoError(t, s2.WaitEvent(added))
		require.NoError(t, s2.Synchronize())
		got := make([]int32, nVals)
		require.NoError(t, c.MemcpyDtoH(unsafe.Pointer(&got[0]), out, 4*nVals))
		for i, v := range got {
			if want := int32(i*(round+2) + round + 1); v != want {
				t.Fatalf("round %d: out[%d] = %d, want %d", round, i, v, want)
			}
		}
	}
	through, refused := g.Launches()
	assert.Equal(t, [2]uint64{4, 0}, [2]uint64{through, refused})
}
