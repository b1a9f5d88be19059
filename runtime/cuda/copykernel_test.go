package cuda

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/internal/fakecuda"
)

// inFakeDriver runs child in a child process of the test binary that
// loads the counting fake driver (internal/fakecuda) in place of libcuda,
// with NCCLGO_COPY_API=kernel: here it builds the fake and runs t's test
// there (fakecuda.InChild); there it calls child with the fake and its
// device 0.
func inFakeDriver(t *testing.T, child func(t *testing.T, d *fakecuda.Driver, dev Device)) {
	lib, ok := fakecuda.InChild(t, t.Name(), LibraryEnv, func(testing.TB) []string { return []string{CopyAPIEnv + "=kernel"} })
	if !ok {
		return
	}
	require.NoError(t, Init())
	d, err := fakecuda.Loaded(lib)
	require.NoError(t, err)
	dev, err := GetDevice(0)
	require.NoError(t, err)
	require.Equal(t, int32(copyKernel), copyModeNow.Load(), "%s=kernel in the child", CopyAPIEnv)
	child(t, d, dev)
}

// fakeCopy makes one kernel-mode device copy in c, on a stream of its own.
func fakeCopy(t *testing.T, c *Context) {
	t.Helper()
	s, err := c.NewStream(true)
	require.NoError(t, err)
	require.NoError(t, s.MemcpyDtoDAsync(0x2000_0000, 0x1000_0000, 8))
	require.NoError(t, s.Destroy())
}

// loads is the copy kernels loaded since the fake's last Reset.
func loads(d *fakecuda.Driver) int { return d.Counts()["cuModuleLoadDataEx"] }

const cycles = 8

// TestCopyKernelLivesWithPrimary: while another retain keeps the primary
// context alive, cycles of retain, copy and release (a communicator's
// create and destroy) load the copy kernel once; copies ask the driver
// nothing more than their launch; the release of the last retain resets
// the context and drops its kernel, so the next retain loads its own.
func TestCopyKernelLivesWithPrimary(t *testing.T) {
	inFakeDriver(t, func(t *testing.T, d *fakecuda.Driver, dev Device) {
		hold, err := dev.PrimaryContext() // the host's retain
		require.NoError(t, err)
		d.Reset()
		for range cycles {
			c, err := dev.PrimaryContext()
			require.NoError(t, err)
			fakeCopy(t, c)
			require.NoError(t, c.Release())
		}
		all := d.Counts()
		t.Logf("%d cycles: %v", cycles, all)
		assert.Equal(t, 1, all["cuModuleLoadDataEx"], "one copy kernel for the live context")
		assert.Equal(t, cycles, all["cuLaunchKernel"], "every copy is a launch")

		// The copy path: a map lookup, no driver call but the launch.
		s, err := hold.NewStream(true)
		require.NoError(t, err)
		d.Reset()
		for range cycles {
			require.NoError(t, s.MemcpyDtoDAsync(0x2000_0000, 0x1000_0000, 8))
		}
		hot := d.Counts()
		t.Logf("%d copies: %v", cycles, hot)
		assert.Equal(t, cycles, hot["cuLaunchKernel"])
		assert.Zero(t, hot["cuCtxGetId"]+hot["cuDevicePrimaryCtxGetState"]+hot["cuModuleLoadDataEx"], "a copy asks the driver nothing about its kernel")
		require.NoError(t, s.Destroy())

		h := hold.h
		_, ok := copyKernels.Load(h)
		require.True(t, ok, "the live context's kernel stays")
		d.Reset()
		require.NoError(t, hold.Release()) // the last retain: the context is reset
		_, ok = copyKernels.Load(h)
		assert.False(t, ok, "the reset context's kernel is dropped at once")
		c, err := dev.PrimaryContext()
		require.NoError(t, err)
		fakeCopy(t, c)
		assert.Equal(t, 1, loads(d), "a reset primary context loads its own kernel")
		require.NoError(t, c.Release())
	})
}

// TestCopyKernelLivesWithWrapped: wrappers of a caller's live context,
// acquired and released over and over, share one copy kernel; once the
// caller has destroyed the context and made another at the same handle
// behind our back (a new cuCtxGetId), WrapContext and CurrentContext drop
// the dead one's kernel and the new context loads its own.
func TestCopyKernelLivesWithWrapped(t *testing.T) {
	inFakeDriver(t, func(t *testing.T, d *fakecuda.Driver, dev Device) {
		own, err := NewContext(dev)
		require.NoError(t, err)
		defer func() { assert.NoError(t, DestroyContext(own)) }()
		d.Reset()
		for range cycles {
			w, err := WrapContext(own.Handle())
			require.NoError(t, err)
			fakeCopy(t, w)
			require.NoError(t, w.Release())
		}
		assert.Equal(t, 1, loads(d), "one copy kernel for the live context over %d wrappers", cycles)

		d.Reset()
		d.Set("ctx_id_offset", 1) // a new context at the same handle
		w, err := WrapContext(own.Handle())
		require.NoError(t, err)
		fakeCopy(t, w)
		fakeCopy(t, w)
		assert.Equal(t, 1, loads(d), "the new context at the handle loads its own kernel, once")
		require.NoError(t, w.Release())

		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		prev, err := CurrentContextHandle()
		require.NoError(t, err)
		defer func() { assert.NoError(t, SetCurrentContext(prev)) }()
		require.NoError(t, SetCurrentContext(own.Handle()))
		d.Reset()
		d.Set("ctx_id_offset", 2) // and another
		cur, err := CurrentContext()
		require.NoError(t, err)
		fakeCopy(t, cur)
		require.NoError(t, cur.Release())
		cur, err = CurrentContext()
		require.NoError(t, err)
		fakeCopy(t, cur)
		require.NoError(t, cur.Release())
		assert.Equal(t, 1, loads(d), "CurrentContext checks the handle as WrapContext does")
		d.Set("ctx_id_offset", 0)
	})
}

// TestCopyKernelDestroyReloads: DestroyContext drops the context's kernel,
// so a new context that gets the same handle loads its own.
func TestCopyKernelDestroyReloads(t *testing.T) {
	inFakeDriver(t, func(t *testing.T, d *fakecuda.Driver, dev Device) {
		d.Set("ctx_reuse", 1)
		a, err := NewContext(dev)
		require.NoError(t, err)
		h := a.Handle()
		d.Reset()
		fakeCopy(t, a)
		require.NoError(t, DestroyContext(a))
		b, err := NewContext(dev)
		require.NoError(t, err)
		require.Equal(t, h, b.Handle(), "the fake hands the destroyed handle out again")
		fakeCopy(t, b)
		assert.Equal(t, 2, loads(d), "the new context at the handle loads its own kernel")
		require.NoError(t, DestroyContext(b))
	})
}

// TestCopyKernelWithoutCtxID: on a driver without cuCtxGetId (before CUDA
// 12.0) nothing could tell a kernel stale later, so every Release drops
// it, and every cycle loads one again (in the primary context while
// another retain holds it, and in a wrapped context alike).
func TestCopyKernelWithoutCtxID(t *testing.T) {
	inFakeDriver(t, func(t *testing.T, d *fakecuda.Driver, dev Device) {
		d.Set("ctx_id_result", 801) // CUDA_ERROR_NOT_SUPPORTED
		hold, err := dev.PrimaryContext()
		require.NoError(t, err)
		own, err := NewContext(dev)
		require.NoError(t, err)
		d.Reset()
		for range cycles {
			c, err := dev.PrimaryContext()
			require.NoError(t, err)
			fakeCopy(t, c)
			require.NoError(t, c.Release())
			w, err := WrapContext(own.Handle())
			require.NoError(t, err)
			fakeCopy(t, w)
			require.NoError(t, w.Release())
		}
		assert.Equal(t, 2*cycles, loads(d), "a load per acquisition")
		require.NoError(t, DestroyContext(own))
		require.NoError(t, hold.Release())
	})
}

// TestCopyKernelTableFull: the shim holds copy kernels of NCU_COPY_FNS
// contexts; a context past them fails its kernel copy while they all live,
// and once they are gone behind our back (new ids at their handles), its
// load drops theirs and succeeds.
func TestCopyKernelTableFull(t *testing.T) {
	inFakeDriver(t, func(t *testing.T, d *fakecuda.Driver, dev Device) {
		var owned []*Context
		defer func() {
			for _, c := range owned {
				assert.NoError(t, DestroyContext(c))
			}
		}()
		for range copyKernelContexts {
			c, err := NewContext(dev)
			require.NoError(t, err)
			owned = append(owned, c)
			w, err := WrapContext(c.Handle())
			require.NoError(t, err)
			fakeCopy(t, w)
			require.NoError(t, w.Release()) // its kernel stays: the context lives
		}
		last, err := NewContext(dev)
		require.NoError(t, err)
		owned = append(owned, last)
		s, err := last.NewStream(true)
		require.NoError(t, err)
		defer s.Destroy()
		err = s.MemcpyDtoDAsync(0x2000_0000, 0x1000_0000, 8)
		require.ErrorContains(t, err, "live contexts hold one")
		require.ErrorContains(t, err, CopyAPIEnv)

		d.Set("ctx_id_offset", 1000) // every context is another now
		d.Reset()
		require.NoError(t, s.MemcpyDtoDAsync(0x2000_0000, 0x1000_0000, 8))
		assert.Equal(t, 1, loads(d))
		d.Set("ctx_id_offset", 0)
	})
}

// TestCopyAutoMode: in the default mode (NCCLGO_COPY_API=auto) a copy of
// up to copyKernelMax bytes launches the copy kernel and a larger one is
// a cuMemcpyAsync; where the kernel cannot be loaded, copies go through
// cuMemcpyAsync without an error, and later copies do not try the load
// again, while NCCLGO_COPY_API=kernel fails the copy naming the variable.
func TestCopyAutoMode(t *testing.T) {
	inFakeDriver(t, func(t *testing.T, d *fakecuda.Driver, dev Device) {
		setCopyMode(copyAuto)
		defer setCopyMode(copyKernel) // the child's mode
		c, err := dev.PrimaryContext()
		require.NoError(t, err)
		s, err := c.NewStream(true)
		require.NoError(t, err)
		d.Reset()
		for _, n := range []uint64{8, copyKernelMax} {
			require.NoError(t, s.MemcpyDtoDAsync(0x2000_0000, 0x1000_0000, n))
		}
		require.NoError(t, s.MemcpyDtoDAsync(0x2000_0000, 0x1000_0000, copyKernelMax+1))
		cn := d.Counts()
		assert.Equal(t, 1, loads(d), "one load, at the first small copy: %v", cn)
		assert.Equal(t, 2, cn["cuLaunchKernel"], "%v", cn)
		assert.Equal(t, 1, cn["cuMemcpyAsync"], "the copy past %d bytes: %v", copyKernelMax, cn)
		require.NoError(t, s.Destroy())
		require.NoError(t, c.Release())

		// A context whose kernel does not load: auto copies anyway.
		d.Set("module_load_result", int(ResultInvalidPTX))
		defer d.Set("module_load_result", 0)
		c2, err := NewContext(dev)
		require.NoError(t, err)
		defer DestroyContext(c2)
		s2, err := c2.NewStream(true)
		require.NoError(t, err)
		defer s2.Destroy()
		d.Reset()
		for range 3 {
			require.NoError(t, s2.MemcpyDtoDAsync(0x2000_0000, 0x1000_0000, 8))
		}
		cn = d.Counts()
		assert.Equal(t, 1, loads(d), "one failed load, not one per copy: %v", cn)
		assert.Equal(t, 3, cn["cuMemcpyAsync"], "%v", cn)
		assert.Zero(t, cn["cuLaunchKernel"], "%v", cn)

		setCopyMode(copyKernel)
		c3, err := NewContext(dev)
		require.NoError(t, err)
		defer DestroyContext(c3)
		s3, err := c3.NewStream(true)
		require.NoError(t, err)
		defer s3.Destroy()
		err = s3.MemcpyDtoDAsync(0x2000_0000, 0x1000_0000, 8)
		require.ErrorIs(t, err, ErrInvalidPTX)
		assert.ErrorContains(t, err, CopyAPIEnv+"=kernel")
	})
}
