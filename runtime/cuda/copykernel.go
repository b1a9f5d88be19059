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

// copyKernels holds the copy kernel of each context that made a
// kernel-mode copy, by context handle (a sync.Map, so that a copy's check
// takes no lock and asks the driver nothing), and the shim's table
// (ncu_copy_fn_set) holds its function, which the copies launch.
//
// The lifetime rule: a context's copy kernel lives exactly as long as the
// context, and the entry with it. Its module is never unloaded: it goes
// with its context. A context that lives on keeps its one kernel however
// often it is acquired and released (a communicator's create and destroy
// retain and release the primary context that the host keeps; a wrapped
// caller's context outlives its wrappers), and an entry whose context is
// gone is dropped before a later context with the same handle could copy:
//
//   - DestroyContext drops it, and so does the release of a primary
//     context's last retain (cuDevicePrimaryCtxGetState reports it
//     inactive: the release reset it);
//   - each entry carries its context's id (cuCtxGetId, unique for the
//     process's life), and every acquisition of a handle with an entry
//     (Device.PrimaryContext, WrapContext, CurrentContext) checks it,
//     dropping the entry of a context destroyed behind our back (a
//     caller's own, a primary context reset by the host) whose handle a
//     new one got; NewContext drops any entry at its new handle;
//   - where the driver has no cuCtxGetId (before CUDA 12.0) an entry has
//     no id, and every Release drops it, as nothing could tell it stale
//     later: each acquisition then loads the kernel again.
//
// A load that finds the shim's table full (copyKernelContexts) first
// drops the entries of contexts that are gone, by their ids.
//
// copyMu orders loads, checks and drops.
var (
	copyMu      sync.Mutex
	copyKernels sync.Map // C.CUcontext → *copyKernelEntry
)

// copyKernelContexts is how many contexts can hold a copy kernel at once
// (the shim's table).
const copyKernelContexts = C.NCU_COPY_FNS

// copyKernelEntry is one context's copy kernel.
type copyKernelEntry struct {
	m  *Module // loaded in the context; goes with it (nil: the load failed in the default mode, which then copies through cuMemcpyAsync)
	id uint64  // the context's cuCtxGetId; 0: none (dropped at every Release)
}

// ctxID returns context h's id (cuCtxGetId): an error for a context that
// is gone, or a driver without the entry point (before CUDA 12.0).
func ctxID(h C.CUcontext) (uint64, error) {
	var id C.ulonglong
	if err := check("cuCtxGetId", Result(C.ncu_ctx_get_id(h, &id))); err != nil {
		return 0, err
	}
	return uint64(id), nil
}

// ensureCopyKernel loads c's copy kernel and registers it with the shim
// before c's first copy through it; afterwards it is a map lookup. Where
// the load fails, the default mode (copyAuto) notes the context as one
// without the kernel, whose copies the shim makes with cuMemcpyAsync, and
// NCCLGO_COPY_API=kernel fails the copy, naming CopyAPIEnv; its next copy
// tries again.
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
	m, err := c.loadCopyKernelLocked()
	if err != nil {
		if copyMode(copyModeNow.Load()) == copyAuto {
			// The default mode copies through cuMemcpyAsync in a context
			// without the kernel (the shim has no function for it): an
			// entry without a module keeps later copies from trying again.
			id, _ := ctxID(h)
			copyKernels.Store(h, &copyKernelEntry{id: id})
			return nil
		}
		return err
	}
	id, err := ctxID(h)
	if err != nil {
		id = 0 // no id: dropped at every Release
	}
	copyKernels.Store(h, &copyKernelEntry{m: m, id: id})
	return nil
}

// loadCopyKernelLocked loads c's copy kernel and registers its function
// with the shim; copyMu is held.
func (c *Context) loadCopyKernelLocked() (*Module, error) {
	m, err := c.LoadModule([]byte(copyPTX))
	if err != nil {
		return nil, fmt.Errorf("cuda: the copy kernel (%s=kernel): %w", CopyAPIEnv, err)
	}
	f, err := m.Function("ngcopy")
	if err == nil {
		// Loaded now, not at its first launch: under lazy loading
		// (CUDA_MODULE_LOADING=LAZY, a host's choice) that load may wait
		// for the device to drain, behind kernels that wait for peers.
		err = f.Load()
	}
	if err == nil && C.ncu_copy_fn_set(c.h, f.h) == 0 {
		// Full: contexts that went behind our back may hold places.
		pruneCopyKernelsLocked()
		if C.ncu_copy_fn_set(c.h, f.h) == 0 {
			err = fmt.Errorf("cuda: the copy kernel (%s=kernel): more than %d live contexts hold one", CopyAPIEnv, copyKernelContexts)
		}
	}
	if err != nil {
		_ = m.Unload()
		return nil, err
	}
	return m, nil
}

// dropCopyKernelLocked drops context h's entry and its function in the
// shim, leaving the module loaded (it goes with its context); copyMu is
// held.
func dropCopyKernelLocked(h C.CUcontext) {
	if _, ok := copyKernels.LoadAndDelete(h); ok {
		C.ncu_copy_fn_set(h, nil)
	}
}

// forgetCopyKernel drops context h's copy kernel: the context goes now
// (DestroyContext), or is new (NewContext: an entry at its handle is a
// dead context's).
func forgetCopyKernel(h C.CUcontext) {
	copyMu.Lock()
	defer copyMu.Unlock()
	dropCopyKernelLocked(h)
}

// checkCopyKernel runs at each acquisition of context h: it drops h's
// entry when the context it was loaded in is gone (its id is not h's
// now). Without an entry it asks the driver nothing.
func checkCopyKernel(h C.CUcontext) {
	if _, ok := copyKernels.Load(h); !ok {
		return
	}
	copyMu.Lock()
	defer copyMu.Unlock()
	v, ok := copyKernels.Load(h)
	if !ok {
		return
	}
	// An entry without an id is dropped at every Release, so one that is
	// here has a live holder: the context is the same.
	if e := v.(*copyKernelEntry); e.id != 0 {
		if id, err := ctxID(h); err != nil || id != e.id {
			dropCopyKernelLocked(h)
		}
	}
}

// pruneCopyKernelsLocked drops the entries of contexts that are gone; copyMu
// is held.
func pruneCopyKernelsLocked() {
	copyKernels.Range(func(k, v any) bool {
		h := k.(C.CUcontext)
		if e := v.(*copyKernelEntry); e.id != 0 {
			if id, err := ctxID(h); err != nil || id != e.id {
				dropCopyKernelLocked(h)
			}
		}
		return true
	})
}

// releaseCopyKernel runs at the Release of a Context for h, before the
// driver's release: it drops h's entry when it has no id, and reports
// whether one stays (afterPrimaryRelease settles that for a primary
// context; a wrapped context's stays, checked at its next acquisition).
func releaseCopyKernel(h C.CUcontext) (kept bool) {
	v, ok := copyKernels.Load(h)
	if !ok {
		return false
	}
	if v.(*copyKernelEntry).id == 0 {
		forgetCopyKernel(h)
		return false
	}
	return true
}

// afterPrimaryRelease drops h's entry when the release of device d's
// primary context reset it (cuDevicePrimaryCtxGetState: inactive, or no
// answer).
func afterPrimaryRelease(h C.CUcontext, d Device) {
	copyMu.Lock()
	defer copyMu.Unlock()
	// Under copyMu: a retain that comes after the reset and loads a new
	// kernel does so either before the question (the context is active:
	// kept) or after the drop.
	if active, err := primaryActive(d); err != nil || !active {
		dropCopyKernelLocked(h)
	}
}

// primaryActive reports whether device d's primary context is active
// (cuDevicePrimaryCtxGetState).
func primaryActive(d Device) (bool, error) {
	var active C.int
	if err := check("cuDevicePrimaryCtxGetState", Result(C.ncu_primary_ctx_active(C.CUdevice(d), &active))); err != nil {
		return false, err
	}
	return active != 0, nil
}
