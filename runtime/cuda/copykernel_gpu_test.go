package cuda

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// TestGPUCopyKernel copies with NCCLGO_COPY_API=kernel's copy kernel,
// through Stream.MemcpyDtoDAsync and an Ops sequence, sizes from 1 byte to
// past 1 MiB at aligned and misaligned offsets, and checks every byte of
// the destination (and that the bytes around it are untouched).
func TestGPUCopyKernel(t *testing.T) {
	c := gpu(t)
	setCopyMode(copyKernel)
	defer setCopyMode(copyAuto) // the default
	const size = 4 << 20
	src, err := c.MemAlloc(size)
	require.NoError(t, err)
	defer c.MemFree(src)
	dst, err := c.MemAlloc(size)
	require.NoError(t, err)
	defer c.MemFree(dst)
	s, err := c.NewStream(true)
	require.NoError(t, err)
	defer s.Destroy()
	in := make([]byte, size)
	for i := range in {
		in[i] = byte(rand.Uint32())
	}
	require.NoError(t, c.MemcpyHtoD(src, unsafe.Pointer(&in[0]), size))
	out := make([]byte, size)
	for _, n := range []uint64{1, 7, 8, 15, 16, 17, 4095, 4096, 65537, 1<<20 + 3} {
		for _, off := range [][2]uint64{{0, 0}, {1, 0}, {0, 3}, {16, 48}, {5, 5}} {
			for _, viaOps := range []bool{false, true} {
				name := fmt.Sprintf("n=%d src+%d dst+%d ops=%v", n, off[0], off[1], viaOps)
				require.NoError(t, c.MemsetD8(dst, 0xA5, size), name)
				if viaOps {
					var o Ops
					o.MemcpyDtoDAsync(s, dst+DevicePtr(off[1]), src+DevicePtr(off[0]), n, OpStop)
					require.NoError(t, o.Run(), name)
					require.NoError(t, o.Err(0), name)
				} else {
					require.NoError(t, s.MemcpyDtoDAsync(dst+DevicePtr(off[1]), src+DevicePtr(off[0]), n), name)
				}
				require.NoError(t, s.Synchronize(), name)
				require.NoError(t, c.MemcpyDtoH(unsafe.Pointer(&out[0]), dst, size), name)
				lo, hi := off[1], off[1]+n
				require.True(t, bytes.Equal(in[off[0]:off[0]+n], out[lo:hi]), "%s: the copy differs", name)
				for i := range uint64(64) {
					if i < lo {
						require.Equal(t, byte(0xA5), out[lo-1-i], "%s: byte %d before it changed", name, lo-1-i)
					}
					if hi+i < size {
						require.Equal(t, byte(0xA5), out[hi+i], "%s: byte %d after it changed", name, hi+i)
					}
				}
			}
		}
	}
}

// gpuCopyCheck makes a kernel-mode copy of n bytes in c (memory of its
// own) and checks it.
func gpuCopyCheck(t *testing.T, c *Context, n uint64) {
	t.Helper()
	src, err := c.MemAlloc(n)
	require.NoError(t, err)
	defer c.MemFree(src)
	dst, err := c.MemAlloc(n)
	require.NoError(t, err)
	defer c.MemFree(dst)
	s, err := c.NewStream(true)
	require.NoError(t, err)
	defer s.Destroy()
	in := make([]byte, n)
	for i := range in {
		in[i] = byte(rand.Uint32())
	}
	require.NoError(t, c.MemcpyHtoD(src, unsafe.Pointer(&in[0]), n))
	require.NoError(t, c.MemsetD8(dst, 0xA5, n))
	require.NoError(t, s.MemcpyDtoDAsync(dst, src, n))
	require.NoError(t, s.Synchronize())
	out := make([]byte, n)
	require.NoError(t, c.MemcpyDtoH(unsafe.Pointer(&out[0]), dst, n))
	require.True(t, bytes.Equal(in, out), "the copy differs")
}

// copyKernelAt returns the copy kernel entry of context handle h (a
// Context's h), nil if none.
func copyKernelAt(h any) *copyKernelEntry {
	if v, ok := copyKernels.Load(h); ok {
		return v.(*copyKernelEntry)
	}
	return nil
}

// TestGPUCopyKernelLifetime: the copy kernel lives as long as its context
// on a real driver: retains and wrappers of a live context reuse its one
// kernel (with cuCtxGetId, CUDA 12.0 on), a destroyed context's goes with
// it, and a new context (at whatever handle) copies with its own.
func TestGPUCopyKernelLifetime(t *testing.T) {
	c := gpu(t)
	setCopyMode(copyKernel)
	defer setCopyMode(copyAuto) // the default
	gpuCopyCheck(t, c, 1<<20+3)
	first := copyKernelAt(c.h)
	require.NotNil(t, first)
	if first.id == 0 {
		t.Log("no cuCtxGetId (driver before CUDA 12.0): every Release drops the kernel")
	}
	for range 4 {
		p, err := c.Device().PrimaryContext()
		require.NoError(t, err)
		gpuCopyCheck(t, p, 4096)
		require.NoError(t, p.Release())
		w, err := WrapContext(c.Handle())
		require.NoError(t, err)
		gpuCopyCheck(t, w, 4096)
		require.NoError(t, w.Release())
		if first.id != 0 {
			require.Same(t, first, copyKernelAt(c.h), "the live context keeps its one kernel")
		}
	}

	nc, err := NewContext(c.Device())
	if errors.Is(err, ErrNotSupported) {
		t.Skipf("no cuCtxCreate_v2: %v", err)
	}
	require.NoError(t, err)
	gpuCopyCheck(t, nc, 65537)
	h := nc.h
	require.NotNil(t, copyKernelAt(h))
	require.NoError(t, DestroyContext(nc))
	require.Nil(t, copyKernelAt(h), "a destroyed context's kernel goes with it")
	nc2, err := NewContext(c.Device())
	require.NoError(t, err)
	t.Logf("a new context after a destroy: handle %#x, the destroyed one's %p", nc2.Handle(), h)
	gpuCopyCheck(t, nc2, 65537)
	require.NoError(t, DestroyContext(nc2))
}

// TestGPUPrimaryResetNewID: the release of the primary context's last
// retain resets it: its copy kernel is dropped, the next retain (at the
// same handle, as a rule) is a new context with a new cuCtxGetId, which is
// what tells a host's reset apart, and it copies with a kernel of its own.
func TestGPUPrimaryResetNewID(t *testing.T) {
	if err := Init(); err != nil {
		t.Skip("no CUDA driver: " + err.Error())
	}
	setCopyMode(copyKernel)
	defer setCopyMode(copyAuto) // the default
	d, err := GetDevice(0)
	require.NoError(t, err)
	p, err := d.PrimaryContext()
	require.NoError(t, err)
	gpuCopyCheck(t, p, 4096)
	h := p.h
	id1, idErr := ctxID(p.h)
	require.NoError(t, p.Release())
	if active, err := primaryActive(d); err != nil || active {
		t.Skipf("the primary context lives on (another retain holds it, or no answer: %v)", err)
	}
	require.Nil(t, copyKernelAt(h), "the reset context's kernel is dropped")
	p2, err := d.PrimaryContext()
	require.NoError(t, err)
	defer func() { require.NoError(t, p2.Release()) }()
	t.Logf("primary context handle %p, after the reset %#x", h, p2.Handle())
	if idErr == nil {
		id2, err := ctxID(p2.h)
		require.NoError(t, err)
		require.NotEqual(t, id1, id2, "a reset primary context has a new id")
	} else {
		t.Logf("no cuCtxGetId: %v", idErr)
	}
	gpuCopyCheck(t, p2, 4096)
}
