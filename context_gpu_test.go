package ncclgo

import (
	"context"
	"errors"
	"testing"
	"time"
	"unsafe"

	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/stretchr/testify/require"
)

// TestGPUUserContext runs a communicator in a context the caller created
// (not the primary one), with the caller's streams of that context, and
// checks that a stream of another context is refused.
func TestGPUUserContext(t *testing.T) {
	gpuOrSkip(t)
	dev, err := cuda.GetDevice(0)
	require.NoError(t, err)
	uctx, err := cuda.NewContext(dev)
	require.NoError(t, err)
	defer func() { require.NoError(t, cuda.DestroyContext(uctx)) }()

	comms, err := InitAll(context.Background(), []int{0, 0}, &Options{Contexts: map[int]*cuda.Context{0: uctx}})
	require.NoError(t, err)
	const count = 4099
	streams := make([]*cuda.Stream, len(comms))
	bufs := make([][2]cuda.DevicePtr, len(comms))
	for r, c := range comms {
		require.Equal(t, uctx.Handle(), c.Context().Handle(), "rank %d runs in the caller's context", r)
		s, err := uctx.NewStream(true)
		require.NoError(t, err)
		streams[r] = s
		for i := range bufs[r] {
			bufs[r][i], err = uctx.MemAlloc(4 * count)
			require.NoError(t, err)
		}
		host := make([]float32, count)
		for i := range host {
			host[i] = float32(r + i%5)
		}
		require.NoError(t, uctx.MemcpyHtoD(bufs[r][0], unsafe.Pointer(&host[0]), 4*count))
	}
	defer func() {
		for r, c := range comms {
			require.NoError(t, c.Destroy())
			_ = streams[r].Destroy()
			for _, p := range bufs[r] {
				_ = uctx.MemFree(p)
			}
		}
	}()

	// A stream of the primary context is refused: its kernels live in the
	// caller's context.
	pctx, err := dev.PrimaryContext()
	require.NoError(t, err)
	ps, err := pctx.NewStream(true)
	require.NoError(t, err)
	err = comms[0].AllReduce(bufs[0][0], bufs[0][1], count, Float32, Sum, ps)
	require.True(t, errors.Is(err, ErrInvalidArgument), "stream of another context: %v", err)
	_ = ps.Destroy()
	_ = pctx.Release()

	g := NewGroup()
	for r, c := range comms {
		require.NoError(t, g.AllReduce(c, bufs[r][0], bufs[r][1], count, Float32, Sum, streams[r]))
	}
	require.NoError(t, g.End())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, c := range comms {
		require.NoError(t, c.Wait(ctx))
	}
	got := make([]float32, count)
	require.NoError(t, uctx.MemcpyDtoH(unsafe.Pointer(&got[0]), bufs[1][1], 4*count))
	for i, v := range got {
		if want := float32(2*(i%5) + 1); v != want {
			t.Fatalf("element %d = %v, want %v", i, v, want)
		}
	}
}
