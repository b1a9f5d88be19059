package cuda

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// Context is a CUDA context: a device's primary context, retained by
// Device.PrimaryContext, or a caller's own context wrapped by WrapContext or
// CurrentContext. Every operation through it makes it current on the calling
// thread inside the same cgo call, so it can be used from any goroutine.
type Context struct {
	h       C.CUcontext
	dev     Device
	wrapped bool // a caller's context: Release only forgets it
}

// DevicePtr is a device address (CUdeviceptr).
type DevicePtr uint64

// badArg returns an error for a bad argument, wrapping ErrInvalidValue.
func badArg(op, format string, args ...any) error {
	return fmt.Errorf("cuda: %s: %s: %w", op, fmt.Sprintf(format, args...), ErrInvalidValue)
}

// wrap adds the operation and device to a driver error. Calls on the
// launch path build a formatted op only once the driver has failed, so
// that a call that succeeds allocates nothing.
func (c *Context) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("cuda: %s on device %d: %w", op, int(c.dev), err)
}

// ctx checks that the driver is usable and c is a live context, and returns
// its handle.
func (c *Context) ctx(op string) (C.CUcontext, error) {
	if err := Init(); err != nil {
		return nil, err
	}
	if c == nil {
		return nil, badArg(op, "nil *Context")
	}
	if c.h == nil {
		return nil, badArg(op, "context of device %d is released", int(c.dev))
	}
	return c.h, nil
}

// PrimaryContext retains the device's primary context
// (cuDevicePrimaryCtxRetain). Each call retains it once more and returns a
// separate *Context for the same underlying context; release each with
// Release.
func (d Device) PrimaryContext() (*Context, error) {
	if err := Init(); err != nil {
		return nil, err
	}
	var h C.CUcontext
	if err := check("cuDevicePrimaryCtxRetain", Result(C.ncu_primary_ctx_retain(&h, C.CUdevice(d)))); err != nil {
		return nil, fmt.Errorf("cuda: device %d: %w", int(d), err)
	}
	checkCopyKernel(h) // the host may have reset it since our last retain
	return &Context{h: h, dev: d}, nil
}

// WrapContext wraps a caller's existing CUcontext (a user-created context,
// or one that a cudart-based library made current), so that ncclgo runs in
// it instead of the device's primary context. The caller keeps owning the
// context: Release on the result only forgets it, and the context must
// outlive every communicator that uses it.
func WrapContext(handle uintptr) (*Context, error) {
	if err := Init(); err != nil {
		return nil, err
	}
	if handle == 0 {
		return nil, badArg("WrapContext", "handle 0 (want a live CUcontext)")
	}
	h := C.ncu_ctx_from(C.uintptr_t(handle))
	var d C.CUdevice
	if err := check("cuCtxGetDevice", Result(C.ncu_ctx_get_device(h, &d))); err != nil {
		return nil, fmt.Errorf("cuda: WrapContext(%#x): %w", handle, err)
	}
	checkCopyKernel(h) // its owner may have destroyed one and made another here
	return &Context{h: h, dev: Device(d), wrapped: true}, nil
}

// CurrentContext wraps the context current on the calling OS thread
// (cuCtxGetCurrent), as WrapContext does. It fails with ErrInvalidValue when
// no context is current. Call it from a goroutine locked to its thread
// (runtime.LockOSThread) or from a cgo callback, where "current" is defined.
func CurrentContext() (*Context, error) {
	if err := Init(); err != nil {
		return nil, err
	}
	var h C.CUcontext
	if err := check("cuCtxGetCurrent", Result(C.ncu_ctx_get_current(&h))); err != nil {
		return nil, fmt.Errorf("cuda: CurrentContext: %w", err)
	}
	if h == nil {
		return nil, badArg("CurrentContext", "no context is current on this thread")
	}
	return WrapContext(uintptr(C.ncu_ctx_to(h)))
}

// NewContext creates a new context on d (cuCtxCreate), separate from its
// primary context, as a program that manages its own contexts would; it
// leaves the calling thread's current context as it was. The result is a
// caller's context (Wrapped reports true): free it with DestroyContext, not
// Release.
func NewContext(d Device) (*Context, error) {
	if err := Init(); err != nil {
		return nil, err
	}
	var h C.CUcontext
	if err := check("cuCtxCreate", Result(C.ncu_ctx_create(&h, C.CUdevice(d)))); err != nil {
		return nil, fmt.Errorf("cuda: NewContext on device %d: %w", int(d), err)
	}
	forgetCopyKernel(h) // a new context: a kernel at its handle is a dead one's
	return &Context{h: h, dev: d, wrapped: true}, nil
}

// DestroyContext destroys a context made by NewContext (cuCtxDestroy),
// and with it the context's copy kernel (copykernel.go).
func DestroyContext(c *Context) error {
	h, err := c.ctx("DestroyContext")
	if err != nil {
		return err
	}
	c.h = nil
	forgetCopyKernel(h)
	return c.wrap("DestroyContext", check("cuCtxDestroy", Result(C.ncu_ctx_destroy(h))))
}

// Wrapped reports whether c is a caller's context (WrapContext,
// CurrentContext) rather than a retained primary context.
func (c *Context) Wrapped() bool { return c.wrapped }

// Release releases this retain of the primary context
// (cuDevicePrimaryCtxRelease_v2); for a wrapped context it only forgets the
// handle. The Context is unusable afterwards; the underlying context lives
// on while other retains (or its owner) hold it, and so does its copy
// kernel (copykernel.go): a later acquisition of the same context reuses
// it. The release of a primary context's last retain resets the context
// and drops its kernel.
func (c *Context) Release() error {
	h, err := c.ctx("Release")
	if err != nil {
		return err
	}
	c.h = nil
	kept := releaseCopyKernel(h)
	if c.wrapped {
		return nil
	}
	err = check("cuDevicePrimaryCtxRelease", Result(C.ncu_primary_ctx_release(C.CUdevice(c.dev))))
	if kept {
		afterPrimaryRelease(h, c.dev)
	}
	return c.wrap("Release", err)
}

// Device returns the context's device.
func (c *Context) Device() Device { return c.dev }

// Handle returns the raw CUcontext, for passing to other CUDA libraries.
func (c *Context) Handle() uintptr { return uintptr(unsafe.Pointer(c.h)) } // no cgo call

// Synchronize waits for all work in the context to finish
// (cuCtxSynchronize).
func (c *Context) Synchronize() error {
	h, err := c.ctx("Synchronize")
	if err != nil {
		return err
	}
	return c.wrap("Synchronize", check("cuCtxSynchronize", Result(C.ncu_ctx_synchronize(h))))
}

// EnablePeerAccess lets kernels in c access memory allocated in peer's
// context (cuCtxEnablePeerAccess). Access that is already enabled, and a
// peer on the same device, are not errors.
func (c *Context) EnablePeerAccess(peer *Context) error {
	h, err := c.ctx("EnablePeerAccess")
	if err != nil {
		return err
	}
	ph, err := peer.ctx("EnablePeerAccess (peer)")
	if err != nil {
		return err
	}
	if peer.dev == c.dev {
		return nil
	}
	r := Result(C.ncu_ctx_enable_peer_access(h, ph))
	if r == ResultPeerAccessAlreadyEnabled {
		return nil
	}
	if err := check("cuCtxEnablePeerAccess", r); err != nil {
		return c.wrap(fmt.Sprintf("EnablePeerAccess(peer device %d)", int(peer.dev)), err)
	}
	return nil
}

// MemAlloc allocates n bytes of device memory (cuMemAlloc_v2).
func (c *Context) MemAlloc(n uint64) (DevicePtr, error) {
	h, err := c.ctx("MemAlloc")
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, badArg("MemAlloc", "size is 0")
	}
	var p C.CUdeviceptr
	if err := check("cuMemAlloc", Result(C.ncu_mem_alloc(h, &p, C.size_t(n)))); err != nil {
		return 0, c.wrap(fmt.Sprintf("MemAlloc(%d bytes)", n), err)
	}
	return DevicePtr(p), nil
}

// MemFree frees memory from MemAlloc (cuMemFree_v2).
func (c *Context) MemFree(p DevicePtr) error {
	h, err := c.ctx("MemFree")
	if err != nil {
		return err
	}
	if p == 0 {
		return badArg("MemFree", "null device pointer")
	}
	if err := check("cuMemFree", Result(C.ncu_mem_free(h, C.CUdeviceptr(p)))); err != nil {
		return c.wrap(fmt.Sprintf("MemFree(%#x)", uint64(p)), err)
	}
	return nil
}

// MemAllocHost allocates n bytes of page-locked host memory that is
// portable across contexts and mapped into the device address space
// (cuMemHostAlloc with CU_MEMHOSTALLOC_PORTABLE|CU_MEMHOSTALLOC_DEVICEMAP).
// HostDevicePointer gives its device address. Free it with MemFreeHost.
func (c *Context) MemAllocHost(n uint64) (unsafe.Pointer, error) {
	h, err := c.ctx("MemAllocHost")
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, badArg("MemAllocHost", "size is 0")
	}
	var p unsafe.Pointer
	if err := check("cuMemHostAlloc", Result(C.ncu_mem_host_alloc(h, &p, C.size_t(n), 0x1|0x2))); err != nil {
		return nil, c.wrap(fmt.Sprintf("MemAllocHost(%d bytes)", n), err)
	}
	pinAdd(p, n)
	return p, nil
}

// MemFreeHost frees memory from MemAllocHost (cuMemFreeHost).
func (c *Context) MemFreeHost(p unsafe.Pointer) error {
	h, err := c.ctx("MemFreeHost")
	if err != nil {
		return err
	}
	if p == nil {
		return badArg("MemFreeHost", "nil pointer")
	}
	if err := check("cuMemFreeHost", Result(C.ncu_mem_free_host(h, p))); err != nil {
		return c.wrap("MemFreeHost", err)
	}
	pinDrop(p)
	return nil
}

// HostDevicePointer returns the device address of mapped page-locked host
// memory (cuMemHostGetDevicePointer_v2).
func (c *Context) HostDevicePointer(p unsafe.Pointer) (DevicePtr, error) {
	h, err := c.ctx("HostDevicePointer")
	if err != nil {
		return 0, err
	}
	if p == nil {
		return 0, badArg("HostDevicePointer", "nil pointer")
	}
	var d C.CUdeviceptr
	if err := check("cuMemHostGetDevicePointer", Result(C.ncu_mem_host_device_pointer(h, &d, p))); err != nil {
		return 0, c.wrap("HostDevicePointer", err)
	}
	return DevicePtr(d), nil
}

// checkCopy validates copy arguments; a zero-length copy needs no pointers.
func checkCopy(op string, n uint64, ptrs ...bool) error {
	if n == 0 {
		return nil
	}
	for i, ok := range ptrs {
		if !ok {
			which := "destination"
			if i == 1 {
				which = "source"
			}
			return badArg(op, "nil/null %s for %d bytes", which, n)
		}
	}
	return nil
}

// MemcpyHtoD copies n bytes from host memory src to device memory dst and
// waits for the copy (cuMemcpyHtoD_v2). src may be Go memory holding no Go
// pointers.
func (c *Context) MemcpyHtoD(dst DevicePtr, src unsafe.Pointer, n uint64) error {
	h, err := c.ctx("MemcpyHtoD")
	if err != nil {
		return err
	}
	if err := checkCopy("MemcpyHtoD", n, dst != 0, src != nil); err != nil || n == 0 {
		return err
	}
	if err := check("cuMemcpyHtoD", Result(C.ncu_memcpy_htod(h, C.CUdeviceptr(dst), src, C.size_t(n)))); err != nil {
		return c.wrap(fmt.Sprintf("MemcpyHtoD(%d bytes)", n), err)
	}
	return nil
}

// MemcpyDtoH copies n bytes from device memory src to host memory dst and
// waits for the copy (cuMemcpyDtoH_v2).
func (c *Context) MemcpyDtoH(dst unsafe.Pointer, src DevicePtr, n uint64) error {
	h, err := c.ctx("MemcpyDtoH")
	if err != nil {
		return err
	}
	if err := checkCopy("MemcpyDtoH", n, dst != nil, src != 0); err != nil || n == 0 {
		return err
	}
	if err := check("cuMemcpyDtoH", Result(C.ncu_memcpy_dtoh(h, dst, C.CUdeviceptr(src), C.size_t(n)))); err != nil {
		return c.wrap(fmt.Sprintf("MemcpyDtoH(%d bytes)", n), err)
	}
	return nil
}

// MemcpyDtoD copies n bytes between device addresses (cuMemcpyDtoD_v2).
func (c *Context) MemcpyDtoD(dst, src DevicePtr, n uint64) error {
	h, err := c.ctx("MemcpyDtoD")
	if err != nil {
		return err
	}
	if err := checkCopy("MemcpyDtoD", n, dst != 0, src != 0); err != nil || n == 0 {
		return err
	}
	if err := check("cuMemcpyDtoD", Result(C.ncu_memcpy_dtod(h, C.CUdeviceptr(dst), C.CUdeviceptr(src), C.size_t(n)))); err != nil {
		return c.wrap(fmt.Sprintf("MemcpyDtoD(%d bytes)", n), err)
	}
	return nil
}

// MemsetD8 sets n bytes at p to v (cuMemsetD8_v2).
func (c *Context) MemsetD8(p DevicePtr, v byte, n uint64) error {
	h, err := c.ctx("MemsetD8")
	if err != nil {
		return err
	}
	if err := checkCopy("MemsetD8", n, p != 0); err != nil || n == 0 {
		return err
	}
	if err := check("cuMemsetD8", Result(C.ncu_memset_d8(h, C.CUdeviceptr(p), C.uchar(v), C.size_t(n)))); err != nil {
		return c.wrap(fmt.Sprintf("MemsetD8(%d bytes)", n), err)
	}
	return nil
}

// SMLimit returns how many SMs kernels of c may use
// (cuCtxGetExecAffinity with CU_EXEC_AFFINITY_TYPE_SM_COUNT): under MPS
// with an active thread percentage, the client's share; for a context
// created with an SM affinity, that count; otherwise the device's SMs.
// Drivers without the entry point (before CUDA 11.4) give an error
// matching ErrNotSupported; some devices answer
// CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY.
func (c *Context) SMLimit() (int, error) {
	h, err := c.ctx("SMLimit")
	if err != nil {
		return 0, err
	}
	var n C.int
	if err := check("cuCtxGetExecAffinity", Result(C.ncu_ctx_sm_limit(h, &n))); err != nil {
		return 0, c.wrap("SMLimit", err)
	}
	return int(n), nil
}

// MemGetInfo returns the free and total memory of the context's device
// (cuMemGetInfo_v2).
func (c *Context) MemGetInfo() (free, total uint64, err error) {
	h, err := c.ctx("MemGetInfo")
	if err != nil {
		return 0, 0, err
	}
	var f, t C.size_t
	if err := check("cuMemGetInfo", Result(C.ncu_mem_get_info(h, &f, &t))); err != nil {
		return 0, 0, c.wrap("MemGetInfo", err)
	}
	return uint64(f), uint64(t), nil
}
