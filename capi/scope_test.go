package main

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/gen"
	"github.com/ncclgo/ncclgo/internal/fakecuda"
	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/ncclgo/ncclgo/runtime/kernels"
)

// TestScopeOneRankCopy runs ncclAllReduce's C entry (scope.c) for one
// rank, out of place (nccl-tests -g 1), on the counting fake of the driver
// (internal/fakecuda) in a child process, and counts what one call asks of
// the driver: with the communicator's context current, the scope's
// cuCtxGetCurrent and the copy, in the copy's one cgo call (before the
// scope: 3 driver calls in 2 cgo calls, capi's own question of the
// current context, then the copy's). With another context current, the
// call switches to the communicator's for the copy and back after it.
func TestScopeOneRankCopy(t *testing.T) {
	fatbin := func(t testing.TB) []string {
		s, err := kspace.NewSpace(kspace.Filter{})
		require.NoError(t, err)
		set, err := fakecuda.KernelSet(gen.KernelSet(s, []string{"sm_90"}))
		require.NoError(t, err)
		f := filepath.Join(t.TempDir(), "fake.fatbin")
		require.NoError(t, os.WriteFile(f, set, 0o644))
		return []string{kernels.EnvFatbin + "=" + f}
	}
	if lib, ok := fakecuda.InChild(t, "TestScopeOneRankCopy", cuda.LibraryEnv, fatbin); ok {
		scopeChild(t, lib)
	}
}

// scopeChild runs on one OS thread (fakecuda.InChild), as a host's thread
// does.
func scopeChild(t *testing.T, lib string) {
	require.NoError(t, cuda.Init())
	d, err := fakecuda.Loaded(lib)
	require.NoError(t, err)
	var h commHandle
	require.EqualValues(t, cSuccess, ncclCommInitAll(&h, 1, nil), lastError())
	defer ncclCommDestroy(h)
	dev, err := cuda.GetDevice(0)
	require.NoError(t, err)
	cctx, err := dev.PrimaryContext()
	require.NoError(t, err)
	defer cctx.Release()
	send, err := cctx.MemAlloc(8)
	require.NoError(t, err)
	recv, err := cctx.MemAlloc(8)
	require.NoError(t, err)
	st, err := cctx.NewStream(true)
	require.NoError(t, err)
	sp, rp, stream := addr(uintptr(send)), addr(uintptr(recv)), addr(st.Handle())
	call := func() {
		t.Helper()
		require.EqualValues(t, cSuccess, cAllReduce(sp, rp, 2, cFloat32, cSum, h, stream), lastError())
	}
	// measure returns the driver calls and cgo calls of one call: the
	// test's own call into C included.
	measure := func() (fakecuda.Counts, int) {
		call() // warm-up: the stream is wrapped at its first call
		const iters = 64
		runtime.GC()
		d.Reset()
		cgo := runtime.NumCgoCall()
		for range iters {
			call()
		}
		cgo = runtime.NumCgoCall() - cgo
		return d.Counts().Div(iters), int(cgo) / iters
	}

	// The communicator's context current, as nccl-tests -g 1 has it.
	require.NoError(t, cuda.SetCurrentContext(cctx.Handle()))
	calls, cgo := measure()
	t.Logf("same context: %d driver calls in %d cgo calls (the test's into C included): %v", calls.Total(), cgo, calls)
	assert.Equal(t, 2, calls.Total(), "the scope's question and the copy: %v", calls)
	assert.Equal(t, 1, calls["cuCtxGetCurrent"], "%v", calls)
	assert.Equal(t, 1, calls["cuLaunchKernel"]+calls["cuMemcpyAsync"]+calls["cuMemcpyDtoDAsync_v2"], "one copy (the copy kernel by default): %v", calls)
	assert.Equal(t, 2, cgo, "the test's call into C and the copy's")
	cur, err := cuda.CurrentContextHandle()
	require.NoError(t, err)
	assert.Equal(t, cctx.Handle(), cur)

	// Another context current (the host's own, or another device's):
	// switched for the copy, restored after it.
	other, err := cuda.NewContext(dev)
	require.NoError(t, err)
	defer cuda.DestroyContext(other)
	for _, want := range []uintptr{other.Handle(), 0} {
		require.NoError(t, cuda.SetCurrentContext(want))
		calls, _ = measure()
		t.Logf("context %#x current: %d driver calls: %v", want, calls.Total(), calls)
		assert.Equal(t, 2, calls["cuCtxSetCurrent"], "to the communicator's and back: %v", calls)
		assert.Equal(t, 1, calls["cuCtxGetCurrent"], "%v", calls)
		assert.Equal(t, 1, calls["cuLaunchKernel"]+calls["cuMemcpyAsync"]+calls["cuMemcpyDtoDAsync_v2"], "one copy (the copy kernel by default): %v", calls)
		cur, err = cuda.CurrentContextHandle()
		require.NoError(t, err)
		assert.Equal(t, want, cur, "the host's context after ncclAllReduce")
	}

	// A failing call (an invalid type) changes nothing either, and the
	// next one on the same thread still knows nothing stale of the scope.
	require.NoError(t, cuda.SetCurrentContext(other.Handle()))
	assert.EqualValues(t, cInvalidArgument, cAllReduce(sp, rp, 2, cNumTypes, cSum, h, stream))
	call()
	cur, err = cuda.CurrentContextHandle()
	require.NoError(t, err)
	assert.Equal(t, other.Handle(), cur)
	// Outside a scope (a call that is not the host's, as the Go side's
	// tests make) the Go side keeps the context itself.
	assert.EqualValues(t, cSuccess, capiAllReduce(sp, rp, 2, cFloat32, cSum, h, stream, 0), lastError())
	cur, err = cuda.CurrentContextHandle()
	require.NoError(t, err)
	assert.Equal(t, other.Handle(), cur)
}
