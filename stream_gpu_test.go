package ncclgo

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/runtime/comm"
	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// TestGPULanes: two and four ranks of one process on one GPU, handed the
// legacy default stream (0 and CU_STREAM_LEGACY) and the per-thread
// default stream in one group, all-reduce without a deadlock and with the
// right data; the caller's stream orders the results (copied back on it).
func TestGPULanes(t *testing.T) {
	gpuOrSkip(t)
	t.Setenv(comm.EnvOneLaunch, "0") // a group's ranks launch one by one, on their lanes
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
					shared, made, left := e.c.engine().UsesLane()
					require.True(t, shared, "rank %d shares GPU 0 in-process", e.c.Rank())
					require.True(t, made, "rank %d launched on its lane", e.c.Rank())
					require.True(t, left, "rank %d: the lane was left", e.c.Rank())
				}
			})
		}
	}
}
