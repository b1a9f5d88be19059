package ncclgo

import (
	"context"
	"github.com/stretchr/testify/require"
	"testing"
	"time"
)

// TestGPUNonblockingInitFinalize: StartInitAll, then an AllReduce, then
// Finalize (new calls refused), then Destroy.
func TestGPUNonblockingInitFinalize(t *testing.T) {
	gpuOrSkip(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p := StartInitAll(ctx, []int{0, 0}, nil)
	if err := p.Err(); err != nil {
		require.ErrorIs(t, err, ErrInProgress)
	}
	comms, err := p.Wait(ctx)
	require.NoError(t, err)
	require.NoError(t, p.Err())
	envs := make([]*rankEnv, len(comms))
	for i, c := range comms {
		envs[i] = newRankEnv(t, c)
	}
	runAllReduce(t, envs, 100000, false)
	for _, e := range envs {
		require.NoError(t, e.c.Finalize(ctx))
		buf := e.alloc(t, 16)
		require.ErrorIs(t, e.c.AllReduce(buf, buf, 1, Float32, Sum, e.s), ErrInvalidUsage)
	}
	for _, e := range envs {
		for _, b := range e.allocs {
			_ = e.ctx.MemFree(b)
		}
		require.NoError(t, e.c.Destroy())
		_ = e.s.Destroy()
		_ = e.ctx.Release()
	}
}
