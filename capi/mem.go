package main

/*
#include <stdlib.h>
#include "nccl.h"
*/
import "C"

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"sync"
	"unsafe"

	"github.com/ncclgo/ncclgo"
	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/ncclgo/ncclgo/runtime/transport"
)

// vmm is what ncclMemAlloc and ncclMemFree ask of the driver: a device's
// primary context (*cuda.Context), or a fake in tests.
type vmm interface {
	MemGranularityFor(prop cuda.AllocProp, recommended bool) (uint64, error)
	MemCreateWith(size uint64, prop cuda.AllocProp) (cuda.MemHandle, error)
	cuda.VMMapper
	MemAlloc(size uint64) (cuda.DevicePtr, error)
	MemFree(p cuda.DevicePtr) error
	Release() error
}

// allocPlan is how ncclMemAlloc allocates on a device.
type allocPlan struct {
	vmm    bool           // cuMemCreate and friends; false: cuMemAlloc
	device cuda.Device    // the device the memory is on
	prop   cuda.AllocProp // the handle types and flags to ask for
	peers  []cuda.Device  // other devices that get read-write access
}

// allocation is what ncclMemAlloc made, so that ncclMemFree undoes exactly
// that.
type allocation struct {
	ctx   vmm            // holds a reference on the primary context until freed
	vmm   bool           // mapped VMM memory; false: cuMemAlloc's
	size  uint64         // bytes mapped (the request rounded up to the granularity), or cuMemAlloc's
	mem   cuda.MemHandle // the physical allocation (vmm)
	asked uint64         // the bytes the caller asked for
}

// allocs are ncclMemAlloc's allocations by their address.
var (
	allocsMu sync.Mutex
	allocs   = map[uintptr]*allocation{}
)

// planAlloc decides how to allocate on device d, as NCCL does: a VMM
// allocation exportable as a POSIX file descriptor, and as a fabric handle
// where the device supports them, GPUDirect RDMA capable where the driver
// allows it, readable and writable by every device with peer access to d;
// cuMemAlloc where the device has no VMM or NCCL_CUMEM_ENABLE=0.
func planAlloc(d cuda.Device) (allocPlan, error) {
	plan := allocPlan{device: d}
	pol, err := transport.PolicyFromEnv(false, false, func(k string) string {
		if k == "NCCL_CUMEM_ENABLE" {
			return os.Getenv(k)
		}
		return ""
	})
	if err != nil {
		return plan, fmt.Errorf("%w: %w", ncclgo.ErrInvalidUsage, err)
	}
	if v, err := d.Attribute(cuda.DevAttrVirtualMemoryManagementSupported); err != nil || v == 0 || pol.NoCuMem {
		return plan, err
	}
	plan.vmm = true
	plan.prop.HandleTypes = cuda.MemHandlePOSIXFD
	if v, err := d.Attribute(cuda.DevAttrHandleTypeFabricSupported); err == nil && v != 0 {
		plan.prop.HandleTypes |= cuda.MemHandleFabric
	}
	if v, err := d.Attribute(cuda.DevAttrGPUDirectRDMAWithCUDAVMMSupported); err == nil && v != 0 {
		plan.prop.GPUDirectRDMA = true
	}
	n, err := cuda.DeviceCount()
	if err != nil {
		return plan, err
	}
	for i := range n {
		if p := cuda.Device(i); p != d {
			if ok, err := p.CanAccessPeer(d); err == nil && ok {
				plan.peers = append(plan.peers, p)
			}
		}
	}
	return plan, nil
}

// memAlloc allocates size bytes with ctx as plan says. A VMM allocation is
// rounded up to the recommended granularity, its address range aligned to
// it; a failed step undoes the ones before it.
func memAlloc(ctx vmm, plan allocPlan, size uint64) (cuda.DevicePtr, *allocation, error) {
	if !plan.vmm {
		p, err := ctx.MemAlloc(size)
		if err != nil {
			return 0, nil, err
		}
		return p, &allocation{ctx: ctx, size: size, asked: size}, nil
	}
	props := []cuda.AllocProp{plan.prop}
	if plan.prop.HandleTypes&cuda.MemHandleFabric != 0 {
		// A system without IMEX channels refuses fabric handles: POSIX fd only then.
		noFabric := plan.prop
		noFabric.HandleTypes &^= cuda.MemHandleFabric
		props = append(props, noFabric)
	}
	// create makes the physical allocation with prop: n bytes, size
	// rounded up to the granularity gran.
	create := func(prop cuda.AllocProp) (mh cuda.MemHandle, gran, n uint64, err error) {
		if gran, err = ctx.MemGranularityFor(prop, true); err != nil {
			return 0, 0, 0, err
		}
		if gran == 0 || size > math.MaxUint64-(gran-1) {
			return 0, 0, 0, &ncclgo.ArgError{Arg: "size", Value: size, Want: fmt.Sprintf("a size that rounds up to a multiple of %d bytes", gran)}
		}
		n = (size + gran - 1) / gran * gran
		mh, err = ctx.MemCreateWith(n, prop)
		return mh, gran, n, err
	}
	var (
		mh      cuda.MemHandle
		gran, n uint64
		err     error
	)
	for i, prop := range props {
		mh, gran, n, err = create(prop)
		refused := errors.Is(err, cuda.ErrNotSupported) || errors.Is(err, &cuda.Error{Code: cuda.ResultNotPermitted})
		if err == nil || !refused || i == len(props)-1 {
			break
		}
	}
	if err != nil {
		return 0, nil, err
	}
	p, err := ctx.MemAddressReserve(n, gran)
	if err != nil {
		return 0, nil, errors.Join(err, ctx.MemRelease(mh))
	}
	if err := ctx.MemMap(p, n, mh); err != nil {
		return 0, nil, errors.Join(err, ctx.MemAddressFree(p, n), ctx.MemRelease(mh))
	}
	if err := ctx.MemSetAccess(p, n, append([]cuda.Device{plan.device}, plan.peers...)...); err != nil {
		return 0, nil, errors.Join(err, ctx.MemUnmap(p, n), ctx.MemAddressFree(p, n), ctx.MemRelease(mh))
	}
	return p, &allocation{ctx: ctx, vmm: true, size: n, mem: mh, asked: size}, nil
}

// free undoes memAlloc: unmaps, releases the physical memory, frees the
// address range (or cuMemFree), then drops the context reference. It
// goes on after a failed step, so that what can be freed is.
func (a *allocation) free(p cuda.DevicePtr) error {
	var err error
	if !a.vmm {
		err = a.ctx.MemFree(p)
	} else {
		err = errors.Join(a.ctx.MemUnmap(p, a.size), a.ctx.MemRelease(a.mem), a.ctx.MemAddressFree(p, a.size))
	}
	return errors.Join(err, a.ctx.Release())
}

// ncclMemAlloc allocates device memory on the calling thread's device as
// NCCL does (see planAlloc): memory that can be exported to other
// processes and registered. Free it with ncclMemFree.
//
//export ncclMemAlloc
func ncclMemAlloc(out *unsafe.Pointer, size C.size_t) (res result) {
	defer guard("MemAlloc", &res)
	const op = "MemAlloc"
	if out == nil {
		return argError(op, "ptr", "NULL", "a pointer to a void*")
	}
	*out = nil
	if size == 0 {
		return argError(op, "size", 0, "at least 1 byte")
	}
	dev, r := currentDevice(op)
	if r != C.ncclSuccess {
		return r
	}
	return keepContext(func() result {
		d, err := cuda.GetDevice(dev)
		if err != nil {
			return fail(op, err)
		}
		plan, err := planAlloc(d)
		if err != nil {
			return fail(op, fmt.Errorf("device %d: %w", dev, err))
		}
		ctx, err := d.PrimaryContext()
		if err != nil {
			return fail(op, err)
		}
		p, a, err := memAlloc(ctx, plan, uint64(size))
		if err != nil {
			_ = ctx.Release()
			return fail(op, fmt.Errorf("%d bytes on device %d: %w", uint64(size), dev, err))
		}
		allocsMu.Lock()
		allocs[uintptr(p)] = a
		allocsMu.Unlock()
		*(*uintptr)(unsafe.Pointer(out)) = uintptr(p) // a device address, never dereferenced by Go
		return C.ncclSuccess
	})
}

// ncclMemFree frees memory from ncclMemAlloc: exactly what that call
// mapped and allocated. Any other pointer is an invalid argument.
//
//export ncclMemFree
func ncclMemFree(p unsafe.Pointer) (res result) {
	defer guard("MemFree", &res)
	const op = "MemFree"
	if p == nil {
		return C.ncclSuccess
	}
	addr := uintptr(p)
	allocsMu.Lock()
	a := allocs[addr]
	delete(allocs, addr)
	var inside uintptr // the allocation p points into, if any
	if a == nil {
		for base, o := range allocs {
			if addr > base && uint64(addr-base) < o.asked {
				inside = base
			}
		}
	}
	allocsMu.Unlock()
	switch {
	case inside != 0:
		return argError(op, "ptr", fmt.Sprintf("%#x", addr), fmt.Sprintf("the address ncclMemAlloc returned (this one is inside the allocation at %#x)", inside))
	case a == nil:
		return argError(op, "ptr", fmt.Sprintf("%#x", addr), "a pointer from ncclMemAlloc that is not yet freed")
	}
	return keepContext(func() result {
		if err := a.free(cuda.DevicePtr(addr)); err != nil {
			return fail(op, fmt.Errorf("%#x (%d bytes): %w", addr, a.size, err))
		}
		return C.ncclSuccess
	})
}

// The device API of nccl_device.h (NCCL 2.28): its structs are the
// client's, so the pointers stay opaque here.

//export ncclDevCommCreate
func ncclDevCommCreate(h C.ncclComm_t, reqs, out unsafe.Pointer) (res result) {
	defer guard("DevCommCreate", &res)
	const op = "DevCommCreate"
	if _, r := lookupFor(op, h, "outDevComm", out, "a pointer to an ncclDevComm"); r != C.ncclSuccess {
		return r
	}
	if reqs == nil {
		return argError(op, "reqs", "NULL", "a pointer to an ncclDevCommRequirements")
	}
	return notImplemented(op, "the device API (nccl_device.h)")
}

//export ncclDevCommDestroy
func ncclDevCommDestroy(h C.ncclComm_t, devComm unsafe.Pointer) (res result) {
	defer guard("DevCommDestroy", &res)
	const op = "DevCommDestroy"
	if _, r := lookupFor(op, h, "devComm", devComm, "a device communicator from ncclDevCommCreate"); r != C.ncclSuccess {
		return r
	}
	return notImplemented(op, "the device API (nccl_device.h)")
}

// hostScalar reads one element of t at p (ncclScalarHostImmediate) as the
// number it encodes.
func hostScalar(p unsafe.Pointer, t ncclgo.DataType) float64 {
	b := unsafe.Slice((*byte)(p), t.Size())
	le := binary.LittleEndian
	switch t {
	case ncclgo.Int8:
		return float64(int8(b[0]))
	case ncclgo.Uint8:
		return float64(b[0])
	case ncclgo.Int32:
		return float64(int32(le.Uint32(b)))
	case ncclgo.Uint32:
		return float64(le.Uint32(b))
	case ncclgo.Int64:
		return float64(int64(le.Uint64(b)))
	case ncclgo.Uint64:
		return float64(le.Uint64(b))
	case ncclgo.Float16:
		return minifloat(uint64(le.Uint16(b)), 5, 10, false)
	case ncclgo.Bfloat16:
		return minifloat(uint64(le.Uint16(b)), 8, 7, false)
	case ncclgo.Float8e4m3:
		return minifloat(uint64(b[0]), 4, 3, true)
	case ncclgo.Float8e5m2:
		return minifloat(uint64(b[0]), 5, 2, false)
	case ncclgo.Float32:
		return float64(math.Float32frombits(le.Uint32(b)))
	case ncclgo.Float64:
		return math.Float64frombits(le.Uint64(b))
	}
	return 0
}

// minifloat decodes a binary float of expBits exponent and manBits
// mantissa bits (IEEE-like; fn: OCP E4M3, no infinities, S.1111.111 NaN).
func minifloat(bits uint64, expBits, manBits int, fn bool) float64 {
	bias := 1<<(expBits-1) - 1
	sign := 1.0
	if bits>>(expBits+manBits)&1 != 0 {
		sign = -1
	}
	e := int(bits>>manBits) & (1<<expBits - 1)
	m := bits & (1<<manBits - 1)
	switch {
	case e == 1<<expBits-1 && fn && m == 1<<manBits-1:
		return math.NaN()
	case e == 1<<expBits-1 && !fn && m == 0:
		return math.Inf(int(sign))
	case e == 1<<expBits-1 && !fn:
		return math.NaN()
	case e == 0:
		return sign * math.Ldexp(float64(m), 1-bias-manBits)
	}
	return sign * math.Ldexp(1+float64(m)/float64(uint64(1)<<manBits), e-bias)
}
