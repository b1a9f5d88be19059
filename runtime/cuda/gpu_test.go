package cuda

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"sync"
	"syscall"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testPTX (PTX ISA 7.8, sm_80; JIT-compiled for newer GPUs) holds:
//
//	__device__ int ncclgo_flag;
//	extern "C" __global__ void add1(int* p, int n) {
//	  int i = blockIdx.x * blockDim.x + threadIdx.x;
//	  if (i < n) p[i] += 1;
//	  if (i == 0) ncclgo_flag = 42;
//	}
//	struct Big { int* out; int n; int pad; int vals[1020]; }; // 4096 bytes
//	extern "C" __global__ void big(Big b) {
//	  for (int i = threadIdx.x; i < 1020; i += blockDim.x) b.out[i] = b.vals[i] + b.n;
//	}
//	// copy16: n 16-byte words, four in flight per thread (grid-stride).
//	extern "C" __global__ void copy16(const int4* __restrict__ src, int4* __restrict__ dst, unsigned long long n) {
//	  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
//	  unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
//	  for (; i + 3 * stride < n; i += 4 * stride) {
//	    int4 a = src[i], b = src[i + stride], c = src[i + 2 * stride], d = src[i + 3 * stride];
//	    dst[i] = a; dst[i + stride] = b; dst[i + 2 * stride] = c; dst[i + 3 * stride] = d;
//	  }
//	  for (; i < n; i += stride) dst[i] = src[i];
//	}
//
// (nvcc 11.8 -ptx -arch=sm_80 -O3.)
const testPTX = `
.version 7.8
.target sm_80
.address_size 64
.global .align 4 .u32 ncclgo_flag;
.visible .entry add1(
	.param .u64 add1_param_0,
	.param .u32 add1_param_1
)
{
	.reg .pred 	%p<3>;
	.reg .b32 	%r<9>;
	.reg .b64 	%rd<5>;
	ld.param.u64 	%rd1, [add1_param_0];
	ld.param.u32 	%r2, [add1_param_1];
	mov.u32 	%r3, %ctaid.x;
	mov.u32 	%r4, %ntid.x;
	mov.u32 	%r5, %tid.x;
	mad.lo.s32 	%r1, %r3, %r4, %r5;
	setp.ge.s32 	%p1, %r1, %r2;
	@%p1 bra 	$L__BB0_2;
	cvta.to.global.u64 	%rd2, %rd1;
	mul.wide.s32 	%rd3, %r1, 4;
	add.s64 	%rd4, %rd2, %rd3;
	ld.global.u32 	%r6, [%rd4];
	add.s32 	%r7, %r6, 1;
	st.global.u32 	[%rd4], %r7;
$L__BB0_2:
	setp.ne.s32 	%p2, %r1, 0;
	@%p2 bra 	$L__BB0_4;
	mov.u32 	%r8, 42;
	st.global.u32 	[ncclgo_flag], %r8;
$L__BB0_4:
	ret;
}
.visible .entry big(
	.param .align 8 .b8 big_param_0[4096]
)
{
	.reg .pred 	%p<3>;
	.reg .b32 	%r<9>;
	.reg .b64 	%rd<8>;
	mov.b64 	%rd3, big_param_0;
	mov.u64 	%rd1, %rd3;
	mov.u32 	%r8, %tid.x;
	setp.gt.s32 	%p1, %r8, 1019;
	@%p1 bra 	$L__BB1_3;
	ld.param.u32 	%r2, [%rd1+8];
	ld.param.u64 	%rd4, [%rd1];
	cvta.to.global.u64 	%rd2, %rd4;
	mov.u32 	%r3, %ntid.x;
$L__BB1_2:
	mul.wide.s32 	%rd5, %r8, 4;
	add.s64 	%rd6, %rd1, %rd5;
	ld.param.u32 	%r6, [%rd6+16];
	add.s32 	%r7, %r2, %r6;
	add.s64 	%rd7, %rd2, %rd5;
	st.global.u32 	[%rd7], %r7;
	add.s32 	%r8, %r8, %r3;
	setp.lt.s32 	%p2, %r8, 1020;
	@%p2 bra 	$L__BB1_2;
$L__BB1_3:
	ret;
}
.visible .entry copy16(
	.param .u64 copy16_param_0,
	.param .u64 copy16_param_1,
	.param .u64 copy16_param_2
)
{
	.reg .pred 	%p<5>;
	.reg .b32 	%r<45>;
	.reg .b64 	%rd<46>;


	ld.param.u64 	%rd19, [copy16_param_0];
	ld.param.u64 	%rd20, [copy16_param_1];
	ld.param.u64 	%rd18, [copy16_param_2];
	cvta.to.global.u64 	%rd1, %rd20;
	cvta.to.global.u64 	%rd2, %rd19;
	mov.u32 	%r1, %nctaid.x;
	cvt.u64.u32 	%rd3, %r1;
	mov.u32 	%r2, %ntid.x;
	cvt.u64.u32 	%rd4, %r2;
	mul.wide.u32 	%rd5, %r1, %r2;
	mov.u32 	%r3, %ctaid.x;
	mul.wide.u32 	%rd21, %r3, %r2;
	mov.u32 	%r4, %tid.x;
	cvt.u64.u32 	%rd22, %r4;
	add.s64 	%rd44, %rd21, %rd22;
	mul.lo.s64 	%rd7, %rd5, 3;
	add.s64 	%rd23, %rd44, %rd7;
	setp.ge.u64 	%p1, %rd23, %rd18;
	@%p1 bra 	$L__BB0_3;

	mul.lo.s64 	%rd24, %rd3, %rd4;
	shl.b64 	%rd8, %rd24, 4;
	shl.b64 	%rd25, %rd44, 4;
	add.s64 	%rd43, %rd1, %rd25;
	neg.s64 	%rd10, %rd24;
	shl.b64 	%rd33, %rd10, 4;

$L__BB0_2:
	shl.b64 	%rd26, %rd44, 4;
	add.s64 	%rd27, %rd2, %rd26;
	shl.b64 	%rd28, %rd5, 2;
	shl.b64 	%rd29, %rd5, 4;
	add.s64 	%rd30, %rd27, %rd29;
	ld.global.nc.v4.u32 	{%r5, %r6, %r7, %r8}, [%rd30];
	add.s64 	%rd31, %rd30, %rd8;
	ld.global.nc.v4.u32 	{%r13, %r14, %r15, %r16}, [%rd31];
	add.s64 	%rd32, %rd31, %rd8;
	ld.global.nc.v4.u32 	{%r21, %r22, %r23, %r24}, [%rd32];
	add.s64 	%rd34, %rd30, %rd33;
	ld.global.nc.v4.u32 	{%r29, %r30, %r31, %r32}, [%rd34];
	st.global.v4.u32 	[%rd43], {%r29, %r30, %r31, %r32};
	add.s64 	%rd35, %rd43, %rd8;
	st.global.v4.u32 	[%rd35], {%r5, %r6, %r7, %r8};
	add.s64 	%rd36, %rd35, %rd8;
	st.global.v4.u32 	[%rd36], {%r13, %r14, %r15, %r16};
	add.s64 	%rd37, %rd36, %rd8;
	add.s64 	%rd43, %rd37, %rd8;
	st.global.v4.u32 	[%rd37], {%r21, %r22, %r23, %r24};
	add.s64 	%rd44, %rd28, %rd44;
	add.s64 	%rd38, %rd44, %rd7;
	setp.lt.u64 	%p2, %rd38, %rd18;
	@%p2 bra 	$L__BB0_2;

$L__BB0_3:
	setp.ge.u64 	%p3, %rd44, %rd18;
	@%p3 bra 	$L__BB0_6;

$L__BB0_5:
	shl.b64 	%rd39, %rd44, 4;
	add.s64 	%rd40, %rd2, %rd39;
	add.s64 	%rd41, %rd1, %rd39;
	ld.global.nc.v4.u32 	{%r37, %r38, %r39, %r40}, [%rd40];
	st.global.v4.u32 	[%rd41], {%r37, %r38, %r39, %r40};
	add.s64 	%rd44, %rd44, %rd5;
	setp.lt.u64 	%p4, %rd44, %rd18;
	@%p4 bra 	$L__BB0_5;

$L__BB0_6:
	ret;

}
`

// gpu returns a retained primary context of device 0, or skips the test
// when there is no usable driver.
func gpu(t testing.TB) *Context {
	t.Helper()
	if err := Init(); err != nil {
		t.Skip("no CUDA driver: " + err.Error())
	}
	d, err := GetDevice(0)
	require.NoError(t, err)
	c, err := d.PrimaryContext()
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Release()) })
	return c
}

// packArgs lays out kernel parameters at their natural alignment.
type packArgs struct{ b []byte }

func (p *packArgs) align(n int) {
	for len(p.b)%n != 0 {
		p.b = append(p.b, 0)
	}
}
func (p *packArgs) u64(v uint64) { p.align(8); p.b = binary.LittleEndian.AppendUint64(p.b, v) }
func (p *packArgs) u32(v uint32) { p.align(4); p.b = binary.LittleEndian.AppendUint32(p.b, v) }

func TestGPUDevice(t *testing.T) {
	c := gpu(t)
	d := c.Device()
	v, err := DriverVersion()
	require.NoError(t, err)
	assert.GreaterOrEqual(t, v, 11000)
	n, err := DeviceCount()
	require.NoError(t, err)
	require.Positive(t, n)
	_, err = GetDevice(n)
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrInvalidDevice)
	assert.Contains(t, err.Error(), fmt.Sprintf("ordinal %d", n))
	assert.Contains(t, err.Error(), fmt.Sprintf("%d device(s)", n))
	_, err = GetDevice(-1)
	assert.ErrorIs(t, err, ErrInvalidDevice)

	name, err := d.Name()
	require.NoError(t, err)
	assert.NotEmpty(t, name)
	for _, a := range []DeviceAttribute{DevAttrMultiprocessorCount, DevAttrMaxThreadsPerBlock,
		DevAttrMaxSharedMemoryPerMultiprocessor, DevAttrMaxRegistersPerMultiprocessor,
		DevAttrMaxThreadsPerMultiprocessor, DevAttrClockRate, DevAttrUnifiedAddressing} {
		v, err := d.Attribute(a)
		require.NoError(t, err)
		assert.Positive(t, v, "attribute %d", a)
	}
	major, minor, err := d.ComputeCapability()
	require.NoError(t, err)
	assert.GreaterOrEqual(t, major, 7)
	mem, err := d.TotalMem()
	require.NoError(t, err)
	assert.Greater(t, mem, uint64(1<<30))
	bus, err := d.PCIBusIDString()
	require.NoError(t, err)
	assert.Regexp(t, regexp.MustCompile(`^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]$`), bus)
	busAttr, err := d.Attribute(DevAttrPCIBusID)
	require.NoError(t, err)
	assert.Contains(t, bus, fmt.Sprintf(":%02x:", busAttr))
	uuid, err := d.UUID()
	require.NoError(t, err)
	assert.NotEqual(t, [16]byte{}, uuid)
	_, err = d.CanAccessPeer(d)
	assert.NoError(t, err)
	_, err = d.Attribute(DeviceAttribute(100000))
	assert.ErrorIs(t, err, ErrInvalidValue)
	t.Logf("%s sm_%d%d bus %s, %d GiB, driver %d", name, major, minor, bus, mem>>30, v)
}

func TestGPUPrimaryContextTwice(t *testing.T) {
	c1 := gpu(t)
	c2, err := c1.Device().PrimaryContext()
	require.NoError(t, err)
	assert.Equal(t, c1.Handle(), c2.Handle())
	p, err := c2.MemAlloc(64)
	require.NoError(t, err)
	require.NoError(t, c2.MemFree(p))
	require.NoError(t, c2.Release())
	assert.ErrorIs(t, c2.Release(), ErrInvalidValue, "second release of the same *Context")
	_, err = c2.MemAlloc(64)
	assert.ErrorIs(t, err, ErrInvalidValue)
	// c1's retain keeps the context alive.
	p, err = c1.MemAlloc(64)
	require.NoError(t, err)
	require.NoError(t, c1.MemFree(p))
	require.NoError(t, c1.EnablePeerAccess(c1))
}

func TestGPUMemRoundTrip(t *testing.T) {
	c := gpu(t)
	const n = 1 << 20
	src := make([]byte, n)
	for i := range src {
		src[i] = byte(i*7 + 3)
	}
	a, err := c.MemAlloc(n)
	require.NoError(t, err)
	defer func() { assert.NoError(t, c.MemFree(a)) }()
	b, err := c.MemAlloc(n)
	require.NoError(t, err)
	defer func() { assert.NoError(t, c.MemFree(b)) }()

	require.NoError(t, c.MemcpyHtoD(a, unsafe.Pointer(&src[0]), n))
	require.NoError(t, c.MemcpyDtoD(b, a, n))
	dst := make([]byte, n)
	require.NoError(t, c.MemcpyDtoH(unsafe.Pointer(&dst[0]), b, n))
	assert.True(t, bytes.Equal(src, dst))

	require.NoError(t, c.MemsetD8(b+16, 0xab, 100))
	require.NoError(t, c.MemcpyDtoH(unsafe.Pointer(&dst[0]), b, n))
	assert.Equal(t, src[:16], dst[:16])
	assert.Equal(t, bytes.Repeat([]byte{0xab}, 100), dst[16:116])
	assert.Equal(t, src[116:], dst[116:])

	free, total, err := c.MemGetInfo()
	require.NoError(t, err)
	assert.Positive(t, free)
	assert.LessOrEqual(t, free, total)

	_, err = c.MemAlloc(0)
	assert.ErrorIs(t, err, ErrInvalidValue)
	assert.Contains(t, err.Error(), "size is 0")
	_, err = c.MemAlloc(1 << 60)
	assert.ErrorIs(t, err, ErrOutOfMemory)
	assert.Contains(t, err.Error(), "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY")
	assert.ErrorIs(t, c.MemcpyHtoD(a, nil, 8), ErrInvalidValue)
	assert.NoError(t, c.MemcpyHtoD(a, nil, 0))
}

// TestGPUGoroutines uses one context from many goroutines that migrate
// between OS threads; each call must make the context current itself.
func TestGPUGoroutines(t *testing.T) {
	c := gpu(t)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]uint32, 1024)
			for it := range 20 {
				p, err := c.MemAlloc(4096)
				if err != nil {
					errs <- err
					return
				}
				for i := range buf {
					buf[i] = uint32(g*1000000 + it*1000 + i)
				}
				out := make([]uint32, 1024)
				err = c.MemcpyHtoD(p, unsafe.Pointer(&buf[0]), 4096)
				if err == nil {
					err = c.MemcpyDtoH(unsafe.Pointer(&out[0]), p, 4096)
				}
				if err == nil && out[1023] != buf[1023] {
					err = fmt.Errorf("goroutine %d: got %d want %d", g, out[1023], buf[1023])
				}
				if ferr := c.MemFree(p); err == nil {
					err = ferr
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestGPUStreamEvent(t *testing.T) {
	c := gpu(t)
	s, err := c.NewStream(true)
	require.NoError(t, err)
	s2, err := c.NewStream(false)
	require.NoError(t, err)
	start, err := c.NewEvent(false)
	require.NoError(t, err)
	end, err := c.NewEvent(false)
	require.NoError(t, err)
	nt, err := c.NewEvent(true)
	require.NoError(t, err)

	const words = 64 << 20
	p, err := c.MemAlloc(4 * words)
	require.NoError(t, err)
	q, err := c.MemAlloc(4 * words)
	require.NoError(t, err)
	host, err := c.MemAllocHost(4 * 1024)
	require.NoError(t, err)

	require.NoError(t, start.Record(s))
	require.NoError(t, s.MemsetD32Async(p, 0xdeadbeef, words))
	require.NoError(t, s.MemcpyDtoDAsync(q, p, 4*words))
	require.NoError(t, end.Record(s))
	// s2 waits for s, then copies back a slice.
	require.NoError(t, s2.WaitEvent(end))
	require.NoError(t, s2.MemsetD8Async(q, 0x11, 4))
	require.NoError(t, s2.MemcpyDtoHAsync(host, q, 4*1024))
	require.NoError(t, nt.Record(s2))
	require.NoError(t, nt.Synchronize())
	done, err := nt.Query()
	require.NoError(t, err)
	assert.True(t, done)
	done, err = s2.Query()
	require.NoError(t, err)
	assert.True(t, done)
	words32 := unsafe.Slice((*uint32)(host), 1024)
	assert.Equal(t, uint32(0x11111111), words32[0])
	assert.Equal(t, uint32(0xdeadbeef), words32[1])
	assert.Equal(t, uint32(0xdeadbeef), words32[1023])

	require.NoError(t, end.Synchronize())
	ms, err := ElapsedMillis(start, end)
	require.NoError(t, err)
	assert.Greater(t, ms, float32(0))
	t.Logf("memset+copy of %d MiB: %.3f ms", 4*words>>20, ms)
	_, err = ElapsedMillis(start, nt)
	assert.Error(t, err, "timing-disabled event")

	// HtoD async from pinned memory.
	for i := range words32 {
		words32[i] = uint32(i)
	}
	require.NoError(t, s.MemcpyHtoDAsync(p, host, 4096))
	require.NoError(t, s.Synchronize())
	back := make([]uint32, 1024)
	require.NoError(t, c.MemcpyDtoH(unsafe.Pointer(&back[0]), p, 4096))
	assert.Equal(t, words32, back)

	// The legacy default stream, wrapped.
	def := WrapStream(c, 0)
	assert.Equal(t, uintptr(0), def.Handle())
	require.NoError(t, def.MemsetD8Async(p, 1, 16))
	require.NoError(t, def.Synchronize())
	require.NoError(t, def.Destroy())
	require.NoError(t, def.Synchronize(), "Destroy of a wrapped stream is a no-op")
	// A wrapped existing stream.
	w := WrapStream(c, s.Handle())
	require.NoError(t, w.Synchronize())
	require.NoError(t, w.Destroy())

	assert.ErrorIs(t, s.MemsetD32Async(p+1, 0, 1), ErrInvalidValue)
	require.NoError(t, c.MemFreeHost(host))
	require.NoError(t, c.MemFree(p))
	require.NoError(t, c.MemFree(q))
	for _, e := range []*Event{start, end, nt} {
		require.NoError(t, e.Destroy())
	}
	require.NoError(t, s.Destroy())
	require.NoError(t, s2.Destroy())
	assert.ErrorIs(t, s.Synchronize(), ErrInvalidValue, "destroyed stream")
	assert.ErrorIs(t, start.Record(s2), ErrInvalidValue, "destroyed event")
}

func TestGPUMappedHostMemory(t *testing.T) {
	c := gpu(t)
	host, err := c.MemAllocHost(4096)
	require.NoError(t, err)
	defer func() { assert.NoError(t, c.MemFreeHost(host)) }()
	dp, err := c.HostDevicePointer(host)
	require.NoError(t, err)
	require.NotZero(t, dp)
	// A device-side write through the mapped pointer is visible on the host.
	require.NoError(t, c.MemsetD8(dp, 0x5c, 4096))
	hb := unsafe.Slice((*byte)(host), 4096)
	assert.Equal(t, bytes.Repeat([]byte{0x5c}, 4096), hb)
	// And a host write is visible to the device.
	hb[7] = 0x01
	out := make([]byte, 8)
	require.NoError(t, c.MemcpyDtoH(unsafe.Pointer(&out[0]), dp, 8))
	assert.Equal(t, byte(0x01), out[7])
	_, err = c.HostDevicePointer(nil)
	assert.ErrorIs(t, err, ErrInvalidValue)
}

func loadTestModule(t testing.TB, c *Context) *Module {
	t.Helper()
	m, err := c.LoadModule([]byte(testPTX))
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, m.Unload()) })
	return m
}

func TestGPUModuleAdd1(t *testing.T) {
	c := gpu(t)
	m := loadTestModule(t, c)
	f, err := m.Function("add1")
	require.NoError(t, err)
	assert.Equal(t, "add1", f.Name())

	const n = 1000
	in := make([]int32, n)
	for i := range in {
		in[i] = int32(i * 3)
	}
	p, err := c.MemAlloc(4 * n)
	require.NoError(t, err)
	defer func() { assert.NoError(t, c.MemFree(p)) }()
	require.NoError(t, c.MemcpyHtoD(p, unsafe.Pointer(&in[0]), 4*n))

	s, err := c.NewStream(true)
	require.NoError(t, err)
	defer func() { assert.NoError(t, s.Destroy()) }()
	var a packArgs
	a.u64(uint64(p))
	a.u32(n)
	require.NoError(t, s.Launch(f, Dim1((n+255)/256), Dim1(256), 0, a.b))
	require.NoError(t, s.Synchronize())
	out := make([]int32, n)
	require.NoError(t, c.MemcpyDtoH(unsafe.Pointer(&out[0]), p, 4*n))
	for i := range out {
		if out[i] != in[i]+1 {
			t.Fatalf("p[%d] = %d, want %d", i, out[i], in[i]+1)
		}
	}

	g, size, err := m.Global("ncclgo_flag")
	require.NoError(t, err)
	assert.Equal(t, uint64(4), size)
	var flag int32
	require.NoError(t, c.MemcpyDtoH(unsafe.Pointer(&flag), g, 4))
	assert.Equal(t, int32(42), flag)

	blocks, err := f.MaxActiveBlocksPerSM(256, 0)
	require.NoError(t, err)
	assert.Positive(t, blocks)
	regs, err := f.Attribute(FuncAttrNumRegs)
	require.NoError(t, err)
	assert.Positive(t, regs)
	maxT, err := f.Attribute(FuncAttrMaxThreadsPerBlock)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, maxT, 256)
	_, err = f.Attribute(FuncAttrLocalSizeBytes)
	require.NoError(t, err)
	_, err = f.Attribute(FuncAttrSharedSizeBytes)
	require.NoError(t, err)
	require.NoError(t, f.SetAttribute(FuncAttrMaxDynamicSharedSizeBytes, 1024))
	t.Logf("add1: %d regs, %d blocks/SM at 256 threads", regs, blocks)

	// Bad arguments name what was wrong.
	_, err = m.Function("no_such_kernel")
	assert.ErrorIs(t, err, ErrNotFound)
	assert.Contains(t, err.Error(), `"no_such_kernel"`)
	_, _, err = m.Global("no_such_global")
	assert.ErrorIs(t, err, ErrNotFound)
	assert.Contains(t, err.Error(), "no_such_global")
	err = s.Launch(f, Dim3{X: 4}, Dim1(256), 0, a.b)
	assert.ErrorIs(t, err, ErrInvalidValue)
	assert.Contains(t, err.Error(), "grid (4,0,0)")
	assert.ErrorIs(t, s.Launch(nil, Dim1(1), Dim1(1), 0, a.b), ErrInvalidValue)
	_, err = f.MaxActiveBlocksPerSM(0, 0)
	assert.ErrorIs(t, err, ErrInvalidValue)
	err = s.Launch(f, Dim1(1), Dim1(1<<20), 0, a.b)
	assert.ErrorIs(t, err, ErrInvalidValue, "block too large: %v", err)
}

func TestGPULaunch4KiBParam(t *testing.T) {
	c := gpu(t)
	m := loadTestModule(t, c)
	f, err := m.Function("big")
	require.NoError(t, err)
	out, err := c.MemAlloc(4 * 1020)
	require.NoError(t, err)
	defer func() { assert.NoError(t, c.MemFree(out)) }()

	var a packArgs
	a.u64(uint64(out))
	a.u32(1000) // n
	a.u32(0)    // pad
	for i := range 1020 {
		a.u32(uint32(i * i))
	}
	require.Len(t, a.b, 4096)
	s := WrapStream(c, 0)
	require.NoError(t, s.Launch(f, Dim1(1), Dim1(256), 0, a.b))
	require.NoError(t, s.Synchronize())
	got := make([]uint32, 1020)
	require.NoError(t, c.MemcpyDtoH(unsafe.Pointer(&got[0]), out, 4*1020))
	for i := range got {
		if got[i] != uint32(i*i+1000) {
			t.Fatalf("out[%d] = %d, want %d", i, got[i], i*i+1000)
		}
	}
}

func TestGPULoadModuleErrors(t *testing.T) {
	c := gpu(t)
	_, err := c.LoadModule(nil)
	assert.ErrorIs(t, err, ErrInvalidValue)
	_, err = c.LoadModule([]byte(".version 7.8\n.target sm_80\n.address_size 64\n.visible .entry broken( {\n"))
	require.Error(t, err)
	var ce *Error
	require.ErrorAs(t, err, &ce)
	t.Log(err)
	m, err := c.LoadModule([]byte(testPTX))
	require.NoError(t, err)
	require.NoError(t, m.Unload())
	_, err = m.Function("add1")
	assert.ErrorIs(t, err, ErrInvalidValue, "unloaded module")
}

func TestGPUVirtualMemory(t *testing.T) {
	c := gpu(t)
	if ok, err := c.Device().Attribute(DevAttrVirtualMemoryManagementSupported); err != nil || ok == 0 {
		t.Skip("no virtual memory management on this device")
	}
	gran, err := c.MemGetAllocationGranularity(false)
	require.NoError(t, err)
	rec, err := c.MemGetAllocationGranularity(true)
	require.NoError(t, err)
	require.Positive(t, gran)
	assert.GreaterOrEqual(t, rec, gran)
	size := gran

	h, err := c.MemCreate(size)
	if err != nil && (isCode(err, ResultNotSupported) || isCode(err, ResultNotPermitted)) {
		t.Skip("cuMemCreate with POSIX fd handles unavailable: " + err.Error())
	}
	require.NoError(t, err)
	fd, err := c.MemExportToShareableHandle(h)
	require.NoError(t, err)
	defer syscall.Close(fd)
	h2, err := c.MemImportFromShareableHandle(fd)
	require.NoError(t, err)

	va, err := c.MemAddressReserve(2*size, 0)
	require.NoError(t, err)
	require.NoError(t, c.MemMap(va, size, h))
	require.NoError(t, c.MemMap(va+DevicePtr(size), size, h2))
	require.NoError(t, c.MemSetAccess(va, 2*size))

	// Both mappings show the same physical memory.
	require.NoError(t, c.MemsetD8(va, 0x3c, size))
	out := make([]byte, 256)
	require.NoError(t, c.MemcpyDtoH(unsafe.Pointer(&out[0]), va+DevicePtr(size)+1000, 256))
	assert.Equal(t, bytes.Repeat([]byte{0x3c}, 256), out)

	require.NoError(t, c.MemUnmap(va, 2*size))
	require.NoError(t, c.MemRelease(h2))
	require.NoError(t, c.MemRelease(h))
	require.NoError(t, c.MemAddressFree(va, 2*size))
	_, err = c.MemCreate(0)
	assert.ErrorIs(t, err, ErrInvalidValue)
	_, err = c.MemImportFromShareableHandle(-1)
	assert.ErrorIs(t, err, ErrInvalidValue)
}

// TestGPUMemCreateWith: an allocation with the handle types ncclMemAlloc
// asks for (POSIX fd, and fabric where the device has it) maps, reads as
// device memory of its device (PointerInfo) and exports as a POSIX fd.
func TestGPUMemCreateWith(t *testing.T) {
	c := gpu(t)
	if ok, err := c.Device().Attribute(DevAttrVirtualMemoryManagementSupported); err != nil || ok == 0 {
		t.Skip("no virtual memory management on this device")
	}
	prop := AllocProp{HandleTypes: MemHandlePOSIXFD}
	if ok, err := c.Device().Attribute(DevAttrHandleTypeFabricSupported); err == nil && ok != 0 {
		prop.HandleTypes |= MemHandleFabric
	}
	if ok, err := c.Device().Attribute(DevAttrGPUDirectRDMAWithCUDAVMMSupported); err == nil && ok != 0 {
		prop.GPUDirectRDMA = true
	}
	gran, err := c.MemGranularityFor(prop, true)
	require.NoError(t, err)
	h, err := c.MemCreateWith(gran, prop)
	if err != nil && prop.HandleTypes&MemHandleFabric != 0 && (isCode(err, ResultNotPermitted) || isCode(err, ResultNotSupported)) {
		t.Logf("fabric handles refused (%v): POSIX fd only", err)
		prop.HandleTypes = MemHandlePOSIXFD
		h, err = c.MemCreateWith(gran, prop)
	}
	require.NoError(t, err)
	defer func() { assert.NoError(t, c.MemRelease(h)) }()
	fd, err := c.MemExportToShareableHandle(h)
	require.NoError(t, err)
	require.NoError(t, syscall.Close(fd))
	va, err := c.MemAddressReserve(gran, gran)
	require.NoError(t, err)
	defer func() { assert.NoError(t, c.MemAddressFree(va, gran)) }()
	require.NoError(t, c.MemMap(va, gran, h))
	defer func() { assert.NoError(t, c.MemUnmap(va, gran)) }()
	require.NoError(t, c.MemSetAccess(va, gran))
	info, err := c.PointerInfo(va + 100)
	require.NoError(t, err)
	assert.Equal(t, PointerInfo{Type: MemoryTypeDevice, Device: c.Device()}, info)
	base, n, err := c.MemGetAddressRange(va + 100)
	require.NoError(t, err)
	assert.Equal(t, va, base)
	assert.Equal(t, gran, n)

	var host [8]byte
	info, err = c.PointerInfo(DevicePtr(uintptr(unsafe.Pointer(&host[0]))))
	if err == nil { // with HMM the driver may know pageable memory
		assert.Equal(t, MemoryTypeHost, info.Type, "plain host memory")
	} else {
		assert.ErrorIs(t, err, ErrInvalidValue, "plain host memory is unknown to CUDA")
	}
}

func isCode(err error, r Result) bool { return errors.Is(err, &Error{Code: r}) }

const ipcEnv = "NCCLGO_CUDA_TEST_IPC_HANDLE"

// TestGPUIpc exports an allocation and has a child process (this test
// binary, re-executed) open it and check its contents.
func TestGPUIpc(t *testing.T) {
	if os.Getenv(ipcEnv) != "" {
		t.Skip("in child")
	}
	c := gpu(t)
	const n = 1 << 20
	p, err := c.MemAlloc(n)
	require.NoError(t, err)
	defer func() { assert.NoError(t, c.MemFree(p)) }()
	require.NoError(t, c.MemsetD8(p, 0x5a, n))
	h, err := c.IpcGetMemHandle(p)
	require.NoError(t, err)
	assert.NotEqual(t, IpcMemHandle{}, h)
	// A process cannot open its own handle.
	_, err = c.IpcOpenMemHandle(h)
	assert.Error(t, err)

	cmd := exec.Command(os.Args[0], "-test.run=^TestGPUIpcChild$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), ipcEnv+"="+hex.EncodeToString(h[:]))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "child:\n%s", out)
	assert.Contains(t, string(out), "--- PASS: TestGPUIpcChild")
}

func TestGPUIpcChild(t *testing.T) {
	hs := os.Getenv(ipcEnv)
	if hs == "" {
		t.Skip("only run by TestGPUIpc")
	}
	c := gpu(t)
	raw, err := hex.DecodeString(hs)
	require.NoError(t, err)
	var h IpcMemHandle
	require.Equal(t, len(h), copy(h[:], raw))
	p, err := c.IpcOpenMemHandle(h)
	require.NoError(t, err)
	buf := make([]byte, 1<<20)
	require.NoError(t, c.MemcpyDtoH(unsafe.Pointer(&buf[0]), p, uint64(len(buf))))
	assert.Equal(t, bytes.Repeat([]byte{0x5a}, len(buf)), buf)
	require.NoError(t, c.IpcCloseMemHandle(p))
}

func TestGPUPeerAccess(t *testing.T) {
	c := gpu(t)
	n, err := DeviceCount()
	require.NoError(t, err)
	if n < 2 {
		t.Skip("needs 2 GPUs")
	}
	d1, err := GetDevice(1)
	require.NoError(t, err)
	ok, err := c.Device().CanAccessPeer(d1)
	require.NoError(t, err)
	if !ok {
		t.Skip("devices 0 and 1 cannot access each other")
	}
	c1, err := d1.PrimaryContext()
	require.NoError(t, err)
	defer func() { assert.NoError(t, c1.Release()) }()
	require.NoError(t, c.EnablePeerAccess(c1))
	require.NoError(t, c.EnablePeerAccess(c1), "already enabled is not an error")
	require.NoError(t, c1.EnablePeerAccess(c))

	// Copy between devices through unified addressing.
	a, err := c.MemAlloc(4096)
	require.NoError(t, err)
	defer func() { assert.NoError(t, c.MemFree(a)) }()
	b, err := c1.MemAlloc(4096)
	require.NoError(t, err)
	defer func() { assert.NoError(t, c1.MemFree(b)) }()
	require.NoError(t, c.MemsetD8(a, 0x77, 4096))
	require.NoError(t, c1.MemcpyDtoD(b, a, 4096))
	out := make([]byte, 4096)
	require.NoError(t, c1.MemcpyDtoH(unsafe.Pointer(&out[0]), b, 4096))
	assert.Equal(t, bytes.Repeat([]byte{0x77}, 4096), out)
}

// TestGPUMemHostRegister page-locks shared memory (an anonymous shared
// mapping, as the SHM transport's memfd segments are) and checks that the
// device address reads what the host wrote and the host sees what the
// device wrote.
func TestGPUMemHostRegister(t *testing.T) {
	c := gpu(t)
	const n = 1 << 16
	mem, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED|syscall.MAP_ANONYMOUS)
	require.NoError(t, err)
	defer syscall.Munmap(mem)
	for i := range mem {
		mem[i] = byte(i * 5)
	}
	p := unsafe.Pointer(&mem[0])
	require.NoError(t, c.MemHostRegister(p, n))
	d, err := c.HostDevicePointer(p)
	require.NoError(t, err)
	out := make([]byte, 256)
	require.NoError(t, c.MemcpyDtoH(unsafe.Pointer(&out[0]), d+1000, 256))
	assert.Equal(t, mem[1000:1256], out)
	require.NoError(t, c.MemsetD8(d+4096, 0x7e, 64))
	require.NoError(t, c.Synchronize())
	assert.Equal(t, bytes.Repeat([]byte{0x7e}, 64), mem[4096:4160])
	require.NoError(t, c.MemHostUnregister(p))
	assert.Error(t, c.MemHostUnregister(p), "unregistered twice")
	assert.ErrorIs(t, c.MemHostRegister(nil, n), ErrInvalidValue)
}

// SMLimit answers with at most the device's SMs: all of them outside MPS,
// the client's share under MPS with CUDA_MPS_ACTIVE_THREAD_PERCENTAGE
// (the test logs both, so that a run under MPS shows what the driver
// reports).
func TestGPUSMLimit(t *testing.T) {
	c := gpu(t)
	sms, err := c.Device().Attribute(DevAttrMultiprocessorCount)
	require.NoError(t, err)
	n, err := c.SMLimit()
	if isCode(err, ResultNotSupported) || isCode(err, 224) {
		t.Skipf("cuCtxGetExecAffinity unsupported here: %v", err)
	}
	require.NoError(t, err)
	t.Logf("device attribute: %d SMs; cuCtxGetExecAffinity: %d SMs; %s=%q", sms, n,
		"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", os.Getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"))
	assert.Positive(t, n)
	assert.LessOrEqual(t, n, sms)
}
