package comm

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// TestKernelCopies runs device copies with NCCLGO_COPY_API=kernel on the
// fake driver (in a child process): a context's first copy loads the copy
// kernel (one module load and one function lookup), every copy is one
// launch and no cuMemcpyAsync, through Stream.MemcpyDtoDAsync and through
// an Ops sequence alike, and a released context's next retain loads its
// own kernel again.
func TestKernelCopies(t *testing.T) {
	t.Setenv(cuda.CopyAPIEnv, "kernel")
	inFakeDriver(t, "TestKernelCopies", func(t *testing.T, lib string) {
		d, ctx, _ := fakeKernel(t, lib)
		s, err := ctx.NewStream(true)
		require.NoError(t, err)
		const dst, src = cuda.DevicePtr(0x2000_0000), cuda.DevicePtr(0x1000_0000)

		d.Reset()
		require.NoError(t, s.MemcpyDtoDAsync(dst, src, 8))
		first := d.Counts()
		require.NoError(t, s.MemcpyDtoDAsync(dst, src, 1<<20))
		var o cuda.Ops
		o.MemcpyDtoDAsync(s, dst, src, 8, cuda.OpStop)
		require.NoError(t, o.Run())
		require.NoError(t, o.Err(0))
		all := d.Counts()
		t.Logf("first copy: %v; three copies: %v", first, all)
		assert.Equal(t, 1, first["cuModuleLoadDataEx"], "the first copy loads the kernel")
		assert.Equal(t, 1, first["cuModuleGetFunction"])
		assert.Equal(t, 1, first["cuFuncLoad"], "loaded before its first launch, not lazily")
		assert.Equal(t, 1, first["cuLaunchKernel"])
		assert.Equal(t, 1, all["cuModuleLoadDataEx"], "once per context")
		assert.Equal(t, 3, all["cuLaunchKernel"], "every copy is a launch")
		assert.Zero(t, all["cuMemcpyAsync"]+all["cuMemcpyDtoDAsync_v2"], "no driver copy")

		// A released context forgets its kernel: a new retain loads it again.
		require.NoError(t, s.Destroy())
		require.NoError(t, ctx.Release())
		ctx2, err := ctx.Device().PrimaryContext()
		require.NoError(t, err)
		s2, err := ctx2.NewStream(true)
		require.NoError(t, err)
		d.Reset()
		require.NoError(t, s2.MemcpyDtoDAsync(dst, src, 8))
		again := d.Counts()
		assert.Equal(t, 1, again["cuModuleLoadDataEx"], "loaded again after the release")
		assert.Equal(t, 1, again["cuLaunchKernel"])
		require.NoError(t, s2.Destroy())
		require.NoError(t, ctx2.Release())
	})
}
