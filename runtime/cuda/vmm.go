package cuda

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// IpcMemHandle is a CUDA IPC memory handle (CUipcMemHandle), which another
// process opens with IpcOpenMemHandle.
type IpcMemHandle [64]byte

// MemHandle is a physical allocation made by MemCreate or imported by
// MemImportFromShareableHandle (CUmemGenericAllocationHandle).
type MemHandle uint64

// IpcGetMemHandle returns an IPC handle for memory from MemAlloc
// (cuIpcGetMemHandle).
func (c *Context) IpcGetMemHandle(p DevicePtr) (IpcMemHandle, error) {
	var out IpcMemHandle
	h, err := c.ctx("IpcGetMemHandle")
	if err != nil {
		return out, err
	}
	if p == 0 {
		return out, badArg("IpcGetMemHandle", "null device pointer")
	}
	var ch C.CUipcMemHandle
	if err := check("cuIpcGetMemHandle", Result(C.ncu_ipc_get(h, &ch, C.CUdeviceptr(p)))); err != nil {
		return out, c.wrap(fmt.Sprintf("IpcGetMemHandle(%#x)", uint64(p)), err)
	}
	out = *(*IpcMemHandle)(unsafe.Pointer(&ch))
	return out, nil
}

// IpcOpenMemHandle maps another process's IPC allocation into this context
// (cuIpcOpenMemHandle_v2, with CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS). A
// process cannot open its own handles. Close with IpcCloseMemHandle.
func (c *Context) IpcOpenMemHandle(handle IpcMemHandle) (DevicePtr, error) {
	h, err := c.ctx("IpcOpenMemHandle")
	if err != nil {
		return 0, err
	}
	ch := *(*C.CUipcMemHandle)(unsafe.Pointer(&handle))
	var p C.CUdeviceptr
	if err := check("cuIpcOpenMemHandle", Result(C.ncu_ipc_open(h, &p, &ch))); err != nil {
		return 0, c.wrap("IpcOpenMemHandle", err)
	}
	return DevicePtr(p), nil
}

// MemGetAddressRange returns the allocation that holds p: its base address
// and size in bytes (cuMemGetAddressRange_v2). For memory opened from an
// IPC handle it is the exporter's whole allocation, which bounds what a
// peer may publish about it.
func (c *Context) MemGetAddressRange(p DevicePtr) (base DevicePtr, size uint64, err error) {
	h, err := c.ctx("MemGetAddressRange")
	if err != nil {
		return 0, 0, err
	}
	var b C.CUdeviceptr
	var n C.size_t
	if err := check("cuMemGetAddressRange", Result(C.ncu_mem_range(h, C.CUdeviceptr(p), &b, &n))); err != nil {
		return 0, 0, c.wrap(fmt.Sprintf("MemGetAddressRange(%#x)", uint64(p)), err)
	}
	return DevicePtr(b), uint64(n), nil
}

// IpcCloseMemHandle unmaps memory opened by IpcOpenMemHandle
// (cuIpcCloseMemHandle).
func (c *Context) IpcCloseMemHandle(p DevicePtr) error {
	h, err := c.ctx("IpcCloseMemHandle")
	if err != nil {
		return err
	}
	if p == 0 {
		return badArg("IpcCloseMemHandle", "null device pointer")
	}
	return c.wrap(fmt.Sprintf("IpcCloseMemHandle(%#x)", uint64(p)), check("cuIpcCloseMemHandle", Result(C.ncu_ipc_close(h, C.CUdeviceptr(p)))))
}

// MemHandleType is a set of ways a MemCreate allocation can be exported
// (CUmemAllocationHandleType bits).
type MemHandleType int

// The handle types ncclgo exports allocations as.
const (
	MemHandlePOSIXFD MemHandleType = 0x1 // CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
	MemHandleFabric  MemHandleType = 0x8 // CU_MEM_HANDLE_TYPE_FABRIC (multi-node NVLink, IMEX)
)

// AllocProp is what MemCreateWith asks of a physical allocation beyond
// pinned memory on the context's device (CUmemAllocationProp).
type AllocProp struct {
	HandleTypes   MemHandleType // how it can be exported; 0 means MemHandlePOSIXFD
	GPUDirectRDMA bool          // allocFlags.gpuDirectRDMACapable: NICs may read and write it
}

func (p AllocProp) c() (types, gdr C.int) {
	if p.HandleTypes == 0 {
		p.HandleTypes = MemHandlePOSIXFD
	}
	if p.GPUDirectRDMA {
		gdr = 1
	}
	return C.int(p.HandleTypes), gdr
}

// MemGetAllocationGranularity returns the minimum (or, with recommended,
// the recommended) granularity of MemCreate allocations on the context's
// device, for pinned device memory shareable as a POSIX file descriptor
// (cuMemGetAllocationGranularity).
func (c *Context) MemGetAllocationGranularity(recommended bool) (uint64, error) {
	return c.granularity("MemGetAllocationGranularity", AllocProp{}, recommended)
}

// MemGranularityFor is MemGetAllocationGranularity for allocations of
// MemCreateWith with prop.
func (c *Context) MemGranularityFor(prop AllocProp, recommended bool) (uint64, error) {
	return c.granularity("MemGranularityFor", prop, recommended)
}

func (c *Context) granularity(op string, prop AllocProp, recommended bool) (uint64, error) {
	h, err := c.ctx(op)
	if err != nil {
		return 0, err
	}
	var g C.size_t
	var rec C.int
	if recommended {
		rec = 1
	}
	types, gdr := prop.c()
	if err := check("cuMemGetAllocationGranularity", Result(C.ncu_mem_granularity(h, &g, C.CUdevice(c.dev), types, gdr, rec))); err != nil {
		return 0, c.wrap(fmt.Sprintf("%s(%+v)", op, prop), err)
	}
	return uint64(g), nil
}

// MemCreate allocates size bytes of physical memory on the context's
// device, pinned and exportable as a POSIX file descriptor (cuMemCreate).
// size must be a multiple of MemGetAllocationGranularity. Map it with
// MemAddressReserve, MemMap and MemSetAccess; free it with MemRelease.
func (c *Context) MemCreate(size uint64) (MemHandle, error) {
	return c.create("MemCreate", size, AllocProp{})
}

// MemCreateWith is MemCreate with the handle types and flags of prop; size
// must be a multiple of MemGranularityFor(prop). A driver or system that
// cannot make such handles (fabric handles without IMEX, say) fails with
// CUDA_ERROR_NOT_PERMITTED or CUDA_ERROR_NOT_SUPPORTED.
func (c *Context) MemCreateWith(size uint64, prop AllocProp) (MemHandle, error) {
	return c.create("MemCreateWith", size, prop)
}

func (c *Context) create(op string, size uint64, prop AllocProp) (MemHandle, error) {
	h, err := c.ctx(op)
	if err != nil {
		return 0, err
	}
	if size == 0 {
		return 0, badArg(op, "size is 0")
	}
	var mh C.CUmemGenericAllocationHandle
	types, gdr := prop.c()
	if err := check("cuMemCreate", Result(C.ncu_mem_create(h, &mh, C.size_t(size), C.CUdevice(c.dev), types, gdr))); err != nil {
		return 0, c.wrap(fmt.Sprintf("%s(%d bytes, %+v)", op, size, prop), err)
	}
	return MemHandle(mh), nil
}

// MemoryType is the kind of memory an address refers to (CUmemorytype).
type MemoryType int

// The memory types of PointerInfo.
const (
	MemoryTypeHost    MemoryType = 1 // page-locked host memory the device can address
	MemoryTypeDevice  MemoryType = 2
	MemoryTypeArray   MemoryType = 3
	MemoryTypeUnified MemoryType = 4
)

// PointerInfo is what the driver knows of an address: the kind of memory
// and the device it was allocated on or registered with.
type PointerInfo struct {
	Type   MemoryType
	Device Device
}

// PointerInfo returns what the driver knows of p (cuPointerGetAttribute,
// CU_POINTER_ATTRIBUTE_MEMORY_TYPE and _DEVICE_ORDINAL). An address CUDA
// does not know (plain host memory, say) fails with
// CUDA_ERROR_INVALID_VALUE.
func (c *Context) PointerInfo(p DevicePtr) (PointerInfo, error) {
	var out PointerInfo
	h, err := c.ctx("PointerInfo")
	if err != nil {
		return out, err
	}
	var typ C.uint
	var dev C.int
	err = check("cuPointerGetAttribute", Result(C.ncu_pointer_attribute(h, unsafe.Pointer(&typ), 2 /* MEMORY_TYPE */, C.CUdeviceptr(p))))
	if err == nil {
		err = check("cuPointerGetAttribute", Result(C.ncu_pointer_attribute(h, unsafe.Pointer(&dev), 9 /* DEVICE_ORDINAL */, C.CUdeviceptr(p))))
	}
	if err != nil {
		return out, c.wrap(fmt.Sprintf("PointerInfo(%#x)", uint64(p)), err)
	}
	return PointerInfo{Type: MemoryType(typ), Device: Device(dev)}, nil
}

// MemAddressReserve reserves size bytes of device virtual address space
// aligned to alignment (0 for the default) (cuMemAddressReserve).
func (c *Context) MemAddressReserve(size, alignment uint64) (DevicePtr, error) {
	h, err := c.ctx("MemAddressReserve")
	if err != nil {
		return 0, err
	}
	if size == 0 {
		return 0, badArg("MemAddressReserve", "size is 0")
	}
	var p C.CUdeviceptr
	if err := check("cuMemAddressReserve", Result(C.ncu_mem_address_reserve(h, &p, C.size_t(size), C.size_t(alignment)))); err != nil {
		return 0, c.wrap(fmt.Sprintf("MemAddressReserve(%d bytes, align %d)", size, alignment), err)
	}
	return DevicePtr(p), nil
}

// MemMap maps the whole of allocation mh (size bytes, from offset 0) at
// reserved address p (cuMemMap).
func (c *Context) MemMap(p DevicePtr, size uint64, mh MemHandle) error {
	h, err := c.ctx("MemMap")
	if err != nil {
		return err
	}
	if p == 0 || size == 0 || mh == 0 {
		return badArg("MemMap", "address %#x, size %d, handle %#x", uint64(p), size, uint64(mh))
	}
	return c.wrap(fmt.Sprintf("MemMap(%#x, %d bytes)", uint64(p), size), check("cuMemMap", Result(C.ncu_mem_map(h, C.CUdeviceptr(p), C.size_t(size), C.CUmemGenericAllocationHandle(mh)))))
}

// MemSetAccess grants read-write access to the mapped range [p, p+size) to
// the given devices, or to the context's device when none is given
// (cuMemSetAccess).
func (c *Context) MemSetAccess(p DevicePtr, size uint64, devices ...Device) error {
	h, err := c.ctx("MemSetAccess")
	if err != nil {
		return err
	}
	if p == 0 || size == 0 {
		return badArg("MemSetAccess", "address %#x, size %d", uint64(p), size)
	}
	if len(devices) == 0 {
		devices = []Device{c.dev}
	}
	if len(devices) > 64 {
		return badArg("MemSetAccess", "%d devices (at most 64)", len(devices))
	}
	devs := make([]C.int, len(devices))
	for i, d := range devices {
		devs[i] = C.int(d)
	}
	return c.wrap(fmt.Sprintf("MemSetAccess(%#x, %d bytes, devices %v)", uint64(p), size, devices),
		check("cuMemSetAccess", Result(C.ncu_mem_set_access(h, C.CUdeviceptr(p), C.size_t(size), &devs[0], C.size_t(len(devs))))))
}

// MemUnmap unmaps the range [p, p+size) (cuMemUnmap).
func (c *Context) MemUnmap(p DevicePtr, size uint64) error {
	h, err := c.ctx("MemUnmap")
	if err != nil {
		return err
	}
	if p == 0 || size == 0 {
		return badArg("MemUnmap", "address %#x, size %d", uint64(p), size)
	}
	return c.wrap(fmt.Sprintf("MemUnmap(%#x, %d bytes)", uint64(p), size), check("cuMemUnmap", Result(C.ncu_mem_unmap(h, C.CUdeviceptr(p), C.size_t(size)))))
}

// MemAddressFree returns a reservation from MemAddressReserve
// (cuMemAddressFree).
func (c *Context) MemAddressFree(p DevicePtr, size uint64) error {
	h, err := c.ctx("MemAddressFree")
	if err != nil {
		return err
	}
	if p == 0 || size == 0 {
		return badArg("MemAddressFree", "address %#x, size %d", uint64(p), size)
	}
	return c.wrap(fmt.Sprintf("MemAddressFree(%#x, %d bytes)", uint64(p), size), check("cuMemAddressFree", Result(C.ncu_mem_address_free(h, C.CUdeviceptr(p), C.size_t(size)))))
}

// MemRelease releases an allocation handle (cuMemRelease); the memory is
// freed once no mapping uses it.
func (c *Context) MemRelease(mh MemHandle) error {
	h, err := c.ctx("MemRelease")
	if err != nil {
		return err
	}
	if mh == 0 {
		return badArg("MemRelease", "zero handle")
	}
	return c.wrap("MemRelease", check("cuMemRelease", Result(C.ncu_mem_release(h, C.CUmemGenericAllocationHandle(mh)))))
}

// MemExportToShareableHandle exports an allocation from MemCreate as a
// POSIX file descriptor (cuMemExportToShareableHandle), which the caller
// owns and must close.
func (c *Context) MemExportToShareableHandle(mh MemHandle) (int, error) {
	h, err := c.ctx("MemExportToShareableHandle")
	if err != nil {
		return -1, err
	}
	if mh == 0 {
		return -1, badArg("MemExportToShareableHandle", "zero handle")
	}
	var fd C.int
	if err := check("cuMemExportToShareableHandle", Result(C.ncu_mem_export_fd(h, &fd, C.CUmemGenericAllocationHandle(mh)))); err != nil {
		return -1, c.wrap("MemExportToShareableHandle", err)
	}
	return int(fd), nil
}

// MemImportFromShareableHandle imports an allocation from a POSIX file
// descriptor made by MemExportToShareableHandle, possibly in another
// process (cuMemImportFromShareableHandle). The fd stays owned by the
// caller. Release the handle with MemRelease.
func (c *Context) MemImportFromShareableHandle(fd int) (MemHandle, error) {
	h, err := c.ctx("MemImportFromShareableHandle")
	if err != nil {
		return 0, err
	}
	if fd < 0 {
		return 0, badArg("MemImportFromShareableHandle", "file descriptor %d", fd)
	}
	var mh C.CUmemGenericAllocationHandle
	if err := check("cuMemImportFromShareableHandle", Result(C.ncu_mem_import_fd(h, &mh, C.int(fd)))); err != nil {
		return 0, c.wrap(fmt.Sprintf("MemImportFromShareableHandle(fd %d)", fd), err)
	}
	return MemHandle(mh), nil
}

// MemHostRegister page-locks the existing host range [p, p+n) (which must
// stay mapped until MemHostUnregister) and maps it into the device address
// space of every context (cuMemHostRegister_v2 with
// CU_MEMHOSTREGISTER_PORTABLE|CU_MEMHOSTREGISTER_DEVICEMAP). Shared memory
// mapped by several processes may be registered in each of them;
// HostDevicePointer gives the range's device address.
func (c *Context) MemHostRegister(p unsafe.Pointer, n uint64) error {
	h, err := c.ctx("MemHostRegister")
	if err != nil {
		return err
	}
	if p == nil || n == 0 {
		return badArg("MemHostRegister", "pointer %p, size %d", p, n)
	}
	if err := check("cuMemHostRegister", Result(C.ncu_mem_host_register(h, p, C.size_t(n), 0x1|0x2))); err != nil {
		return c.wrap(fmt.Sprintf("MemHostRegister(%d bytes)", n), err)
	}
	pinAdd(p, n)
	return nil
}

// MemHostUnregister undoes MemHostRegister (cuMemHostUnregister).
func (c *Context) MemHostUnregister(p unsafe.Pointer) error {
	h, err := c.ctx("MemHostUnregister")
	if err != nil {
		return err
	}
	if p == nil {
		return badArg("MemHostUnregister", "nil pointer")
	}
	if err := check("cuMemHostUnregister", Result(C.ncu_mem_host_unregister(h, p))); err != nil {
		return c.wrap("MemHostUnregister", err)
	}
	pinDrop(p)
	return nil
}

// VMMapper is the part of the virtual memory API that maps an allocation
// handle at a reserved address range and undoes it, which every user of
// VMM memory needs (the transports, windows, ncclMemAlloc); each declares
// what else it asks beside it. *Context implements it.
type VMMapper interface {
	MemAddressReserve(size, alignment uint64) (DevicePtr, error)
	MemMap(p DevicePtr, size uint64, mh MemHandle) error
	MemSetAccess(p DevicePtr, size uint64, devices ...Device) error
	MemUnmap(p DevicePtr, size uint64) error
	MemAddressFree(p DevicePtr, size uint64) error
	MemRelease(mh MemHandle) error
}

var _ VMMapper = (*Context)(nil)
