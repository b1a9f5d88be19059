package ncclgo

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/internal/diag"
	"github.com/ncclgo/ncclgo/runtime/config"
	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// connDump reads, for every connection of every rank, the sender's and
// receiver's step words and the head and tail counters (internal/diag):
// where a group that does not complete is stuck. It reads device memory
// while kernels may still be spinning (the ranks' streams do not block
// the copy). channels is kept for the callers; every channel is listed.
func connDump(envs []*rankEnv, channels int) string {
	comms := make([]any, len(envs))
	for r, e := range envs {
		comms[r] = e.c.e
	}
	return fmt.Sprintf("(%d channels in use)\n%s", channels, diag.Dump(comms))
}

// TestGPUGroupedUnevenPlacement is issue #15's case with a diagnosis: ranks
// on devices [0, 0, 1] and [1, 0, 1, 0, 0, 1], one group per rank holding
// an AllReduce of 3 int32 then a ReduceScatter of 1 int32, NCCL_PROTO
// SIMPLE and the default. When a group does not complete within a minute
// it prints every connection's counters on the channels in use before
// aborting.
func TestGPUGroupedUnevenPlacement(t *testing.T) {
	gpuOrSkip(t)
	n, err := cuda.DeviceCount()
	require.NoError(t, err)
	if n < 2 {
		t.Skipf("needs 2 or more GPUs, %d visible", n)
	}
	for _, devs := range [][]int{{0, 0, 1}, {1, 0, 1, 0, 0, 1}} {
		for _, proto := range []string{"SIMPLE", ""} {
			t.Run(fmt.Sprintf("%v/proto=%q", devs, proto), func(t *testing.T) {
				var opts Options
				if proto != "" {
					opts.Overrides = config.Overrides{Proto: new(proto)}
				}
				envs := setup(t, devs, &opts)
				type bufs struct{ arS, arR, rsS, rsR cuda.DevicePtr }
				b := make([]bufs, len(envs))
				for r, e := range envs {
					b[r] = bufs{e.alloc(t, 12), e.alloc(t, 12), e.alloc(t, 4*len(devs)), e.alloc(t, 4)}
				}
				for iter := range 20 {
					for r, e := range envs {
						v := make([]int32, max(3, len(devs)))
						for i := range v {
							v[i] = int32(100*iter + 10*r + i)
						}
						require.NoError(t, e.ctx.MemcpyHtoD(b[r].arS, unsafe.Pointer(&v[0]), 12))
						require.NoError(t, e.ctx.MemcpyHtoD(b[r].rsS, unsafe.Pointer(&v[0]), uint64(4*len(devs))))
						require.NoError(t, e.ctx.Synchronize())
					}
					// One group per rank, ended in rank order.
					for r, e := range envs {
						g := NewGroup()
						require.NoError(t, g.AllReduce(e.c, b[r].arS, b[r].arR, 3, Int32, Sum, e.s))
						require.NoError(t, g.ReduceScatter(e.c, b[r].rsS, b[r].rsR, 1, Int32, Sum, e.s))
						require.NoError(t, g.End())
					}
					ctx, cancel := context.WithTimeout(context.Background(), groupWait())
					for _, e := range envs {
						if err := e.c.Wait(ctx); err != nil {
							t.Errorf("iteration %d: rank %d: %v; connections on channels 0-1:\n%s", iter, e.c.Rank(), err, connDump(envs, 2))
							for _, e := range envs {
								e.c.Abort()
							}
							cancel()
							t.FailNow()
						}
					}
					cancel()
					for r, e := range envs {
						var ar [3]int32
						var rs int32
						require.NoError(t, e.ctx.MemcpyDtoH(unsafe.Pointer(&ar[0]), b[r].arR, 12))
						require.NoError(t, e.ctx.MemcpyDtoH(unsafe.Pointer(&rs), b[r].rsR, 4))
						for i := range 3 {
							want := int32(0)
							for q := range envs {
								want += int32(100*iter + 10*q + i)
							}
							require.Equal(t, want, ar[i], "iteration %d rank %d AllReduce[%d]", iter, r, i)
						}
						want := int32(0)
						for q := range envs {
							want += int32(100*iter + 10*q + r)
						}
						require.Equal(t, want, rs, "iteration %d rank %d ReduceScatter", iter, r)
					}
				}
			})
		}
	}
}

// groupWait is how long a group may take before it counts as hung:
// $NCCLGO_TEST_WAIT (a Go duration), else a minute.
func groupWait() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("NCCLGO_TEST_WAIT")); err == nil && d > 0 {
		return d
	}
	return time.Minute
}
