package ncclgo

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/ncclgo/ncclgo/runtime/topo"
)

// TestDefaultStreamsAccepted: the legacy default stream (0 and
// CU_STREAM_LEGACY) and the per-thread default stream are accepted, as
// NCCL accepts them, also when ranks share a GPU (they launch on lanes).
func TestDefaultStreamsAccepted(t *testing.T) {
	c := fakeComm(t, 1, 4)
	c.layout = topo.NewLayout([]int{0, 0, 0, 0})
	for _, h := range []uintptr{0, cuda.StreamLegacy, cuda.StreamPerThread} {
		s := cuda.WrapStream(new(cuda.Context), h)
		assert.True(t, s.IsDefault(), "handle %#x", h)
		g := NewGroup()
		assert.NoError(t, g.AllReduce(c, 1, 2, 10, Float32, Sum, s), "handle %#x", h)
		assert.NoError(t, g.Send(c, 1, 10, Float32, 2, s), "handle %#x", h)
		g.Discard()
	}
	assert.False(t, cuda.WrapStream(nil, 0x7f0000001000).IsDefault())
}

// TestGPULanes: two and four ranks of one process on one GPU, handed the
// legacy default stream (0 and CU_STREAM_LEGACY) and the per-thread
// default stream in one group, all-reduce without a deadlock and with the
// right data; the caller's stream orders the results (copied back on it).
func TestGPULanes(t *testing.T) {
	gpuOrSkip(t)
	for _, n := range []int{2, 4} {
		for _, h := range []uintptr{0, cuda.StreamLegacy, cuda.StreamPerThread} {
			t.Run(fmt.Sprintf("ranks=%d/stream=%#x", n, h), func(t *testing.T) {
				envs := setup(t, make([]int, n), nil)
				for _, e := range envs {
					e.s = cuda.WrapStream(e.ctx, h)
				}
				for _, count := range []int{1, 1000, 1 << 20} {
					runAllReduce(t, envs, count, true)
				}
				for _, e := range envs {
					require.True(t, e.c.lanes.shared, "rank %d shares GPU 0 in-process", e.c.Rank())
					require.NotNil(t, e.c.lanes.lane)
					require.Nil(t, e.c.lanes.entered, "rank %d: the lane was left", e.c.Rank())
				}
			})
		}
	}
}
