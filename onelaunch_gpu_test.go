package ncclgo

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/runtime/comm"
	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// TestGPUOneLaunch: with NCCLGO_ONE_LAUNCH=1, a group's AllReduce of 2, 4
// and 8 ranks of one process on one GPU runs as one launch for them all
// (MultiLaunches counts it), on streams of their own or on one shared
// default stream, without lanes, with the right data; sizes whose works
// do not fit one launch, and calls outside a group on streams of their
// own, still run. (Calls outside a group of several ranks on one shared
// stream deadlock, with or without the switch, as in NCCL: rank 0's call
// returns with the stream waiting for its kernel, which waits for rank
// 1's, queued after it. This test made them on 0x0 and 0x2 and hung.)
func TestGPUOneLaunch(t *testing.T) {
	gpuOrSkip(t)
	t.Setenv(comm.EnvOneLaunch, "1")
	for _, n := range []int{2, 4, 8} {
		for _, h := range []uintptr{1, 0, cuda.StreamPerThread} { // 1: a stream per rank
			t.Run(fmt.Sprintf("ranks=%d/stream=%#x", n, h), func(t *testing.T) {
				if h == cuda.StreamPerThread {
					// One thread's stream for the whole subtest: the
					// calls, the waits and the copies.
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
				}
				envs := setup(t, make([]int, n), nil)
				if h != 1 {
					for _, e := range envs {
						require.NoError(t, e.s.Destroy())
						e.s = cuda.WrapStream(e.ctx, h)
					}
				}
				before := make([]uint64, n)
				for i := range 3 {
					runAllReduce(t, envs, 2, true)
					merged := 0
					for r, e := range envs {
						if m := e.c.engine().MultiLaunches(); m > before[r] {
							merged++
							before[r] = m
						}
					}
					// All of them unless their works fill more than one
					// launch's arguments (then a leftover rank runs alone).
					t.Logf("call %d of 8 bytes: %d of %d ranks in multi-rank launches", i, merged, n)
					require.GreaterOrEqual(t, merged, min(n, 7), "call %d of 8 bytes: ranks in multi-rank launches", i)
				}
				for _, count := range []int{1000, 1 << 20} {
					runAllReduce(t, envs, count, true)
				}
				if h == 1 {
					runAllReduce(t, envs, 1000, false) // no group: a launch per rank
				}
			})
		}
	}
}
