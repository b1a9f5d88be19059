package cuda

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"sync"
)

// copyPTX is the copy kernel of NCCLGO_COPY_API=kernel (PTX ISA 7.8,
// sm_80, JIT-compiled for the device at the first copy of each context):
//
//	// ngcopy copies n bytes from src to dst (not overlapping): 16 bytes a
//	// thread-step where both are 16-byte aligned, else byte by byte.
//	extern "C" __global__ void ngcopy(const unsigned char* __restrict__ src, unsigned char* __restrict__ dst,
//	                                  unsigned long long n) {
//	  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
//	  const unsigned long long tid = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
//	  unsigned long long done = 0;
//	  if ((((unsigned long long)src | (unsigned long long)dst) & 15) == 0) {
//	    const unsigned long long n16 = n >> 4;
//	    const uint4* s = reinterpret_cast<const uint4*>(src);
//	    uint4* d = reinterpret_cast<uint4*>(dst);
//	    for (unsigned long long i = tid; i < n16; i += stride) d[i] = s[i];
//	    done = n16 << 4;
//	  }
//	  for (unsigned long long i = done + tid; i < n; i += stride) dst[i] = src[i];
//	}
//
// (nvcc 11.8 -ptx -arch=sm_80 -O3; the shim launches it: ncu_dtod.)
const copyPTX = `.version 7.8
.target sm_80
.address_size 64

	// .globl	ngcopy

.visible .entry ngcopy(
	.param .u64 ngcopy_param_0,
	.param .u64 ngcopy_param_1,
	.param .u64 ngcopy_param_2
)
{
	.reg .pred 	%p<6>;
	.reg .b16 	%rs<2>;
	.reg .b32 	%r<13>;
	.reg .b64 	%rd<29>;


	ld.param.u64 	%rd15, [ngcopy_param_0];
	ld.param.u64 	%rd16, [ngcopy_param_1];
	ld.param.u64 	%rd13, [ngcopy_param_2];
	cvta.to.global.u64 	%rd1, %rd16;
	cvta.to.global.u64 	%rd2, %rd15;
	mov.u32 	%r1, %nctaid.x;
	mov.u32 	%r2, %ntid.x;
	mul.wide.u32 	%rd3, %r1, %r2;
	mov.u32 	%r3, %ctaid.x;
	mul.wide.u32 	%rd17, %r3, %r2;
	mov.u32 	%r4, %tid.x;
	cvt.u64.u32 	%rd18, %r4;
	add.s64 	%rd4, %rd17, %rd18;
	or.b64  	%rd19, %rd16, %rd15;
	and.b64  	%rd20, %rd19, 15;
	setp.ne.s64 	%p1, %rd20, 0;
	mov.u64 	%rd27, 0;
	@%p1 bra 	$L__BB0_5;

	shr.u64 	%rd5, %rd13, 4;
	setp.ge.u64 	%p2, %rd4, %rd5;
	@%p2 bra 	$L__BB0_4;

	mov.u64 	%rd26, %rd4;

$L__BB0_3:
	shl.b64 	%rd21, %rd26, 4;
	add.s64 	%rd22, %rd1, %rd21;
	add.s64 	%rd23, %rd2, %rd21;
	ld.global.nc.v4.u32 	{%r5, %r6, %r7, %r8}, [%rd23];
	st.global.v4.u32 	[%rd22], {%r5, %r6, %r7, %r8};
	add.s64 	%rd26, %rd26, %rd3;
	setp.lt.u64 	%p3, %rd26, %rd5;
	@%p3 bra 	$L__BB0_3;

$L__BB0_4:
	and.b64  	%rd27, %rd13, -16;

$L__BB0_5:
	add.s64 	%rd28, %rd27, %rd4;
	setp.ge.u64 	%p4, %rd28, %rd13;
	@%p4 bra 	$L__BB0_8;

$L__BB0_7:
	add.s64 	%rd24, %rd2, %rd28;
	ld.global.nc.u8 	%rs1, [%rd24];
	add.s64 	%rd25, %rd1, %rd28;
	st.global.u8 	[%rd25], %rs1;
	add.s64 	%rd28, %rd28, %rd3;
	setp.lt.u64 	%p5, %rd28, %rd13;
	@%p5 bra 	$L__BB0_7;

$L__BB0_8:
	ret;

}
`

// copyKernels holds the copy kernel's module of each context that made a
// kernel-mode copy, by context handle (a sync.Map, so that a copy's check
// takes no lock), so that the module stays loaded while the shim launches
// its function. copyMu orders loads and forgets. A forgotten context's
// module is left loaded (copies may still run it): it goes with the
// context.
var (
	copyMu      sync.Mutex
	copyKernels sync.Map // C.CUcontext → *Module
)

// ensureCopyKernel loads c's copy kernel and registers it with the shim
// before c's first kernel-mode copy. A failure fails the copy, naming
// CopyAPIEnv, and the next copy tries again.
func (c *Context) ensureCopyKernel() error {
	h := c.h
	if _, ok := copyKernels.Load(h); ok {
		return nil
	}
	copyMu.Lock()
	defer copyMu.Unlock()
	if _, ok := copyKernels.Load(h); ok {
		return nil
	}
	m, err := c.LoadModule([]byte(copyPTX))
	if err != nil {
		return fmt.Errorf("cuda: the copy kernel (%s=kernel): %w", CopyAPIEnv, err)
	}
	f, err := m.Function("ngcopy")
	if err == nil {
		// Loaded now, not at its first launch: under lazy loading
		// (CUDA_MODULE_LOADING=LAZY, a host's choice) that load may wait
		// for the device to drain, behind kernels that wait for peers.
		err = f.Load()
	}
	if err == nil && C.ncu_copy_fn_set(h, f.h) == 0 {
		err = fmt.Errorf("cuda: the copy kernel (%s=kernel): more than %d contexts hold one", CopyAPIEnv, C.NCU_COPY_FNS)
	}
	if err != nil {
		_ = m.Unload()
		return err
	}
	copyKernels.Store(h, m)
	return nil
}

// forgetCopyKernel drops context h's copy kernel from the shim before the
// context may go (Release, DestroyContext): a later context with the same
// handle loads its own.
func forgetCopyKernel(h C.CUcontext) {
	copyMu.Lock()
	defer copyMu.Unlock()
	if _, ok := copyKernels.LoadAndDelete(h); ok {
		C.ncu_copy_fn_set(h, nil)
	}
}
