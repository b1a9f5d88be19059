package cuda

import (
	"bytes"
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
	defer setCopyMode(copyGeneric)
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
