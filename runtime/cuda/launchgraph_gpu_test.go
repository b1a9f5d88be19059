package cuda

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGPULaunchGraph launches through one launch graph the 4 KiB-parameter
// kernel with new arguments each time, whole and in part, then another
// kernel (add1), on two streams, and checks every result and that every
// launch went through the graph.
func TestGPULaunchGraph(t *testing.T) {
	c := gpu(t)
	m := loadTestModule(t, c)
	big, err := m.Function("big")
	require.NoError(t, err)
	add1, err := m.Function("add1")
	require.NoError(t, err)
	const nVals = 1020
	out, err := c.MemAlloc(4 * nVals)
	require.NoError(t, err)
	defer func() { assert.NoError(t, c.MemFree(out)) }()
	s1, err := c.NewStream(true)
	require.NoError(t, err)
	defer func() { assert.NoError(t, s1.Destroy()) }()
	s2, err := c.NewStream(true)
	require.NoError(t, err)
	defer func() { assert.NoError(t, s2.Destroy()) }()

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
	// Another kernel through the same graph: add1 over out.
	before := read()
	var a packArgs
	a.u64(uint64(out))
	a.u32(nVals)
	require.NoError(t, s1.LaunchVia(g, add1, Dim1((nVals+255)/256), Dim1(256), 0, a.b))
	launches++
	require.NoError(t, s1.Synchronize())
	for i, v := range read() {
		if v != before[i]+1 {
			t.Fatalf("add1 through the graph: out[%d] = %d, want %d", i, v, before[i]+1)
		}
	}
	through, refused := g.Launches()
	assert.Equal(t, uint64(launches), through, "launches through the graph")
	assert.Zero(t, refused, "updates the driver refused")
}
