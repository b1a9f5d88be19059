package main

/*
#include <stdlib.h>
#include "nccl.h"
*/
import "C"

import (
	"encoding/binary"
	"fmt"
	"math"
	"sync"
	"unsafe"

	"github.com/ncclgo/ncclgo"
	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// allocs are ncclMemAlloc's allocations and the contexts that own them.
var (
	allocsMu sync.Mutex
	allocs   = map[uintptr]*cuda.Context{}
)

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
		ctx, err := d.PrimaryContext()
		if err != nil {
			return fail(op, err)
		}
		p, err := ctx.MemAlloc(uint64(size))
		if err != nil {
			_ = ctx.Release()
			return fail(op, fmt.Errorf("%d bytes on device %d: %w", uint64(size), dev, err))
		}
		allocsMu.Lock()
		allocs[uintptr(p)] = ctx
		allocsMu.Unlock()
		*(*uintptr)(unsafe.Pointer(out)) = uintptr(p) // a device address, never dereferenced by Go
		return C.ncclSuccess
	})
}

//export ncclMemFree
func ncclMemFree(p unsafe.Pointer) (res result) {
	defer guard("MemFree", &res)
	const op = "MemFree"
	if p == nil {
		return C.ncclSuccess
	}
	allocsMu.Lock()
	ctx := allocs[uintptr(p)]
	delete(allocs, uintptr(p))
	allocsMu.Unlock()
	if ctx == nil {
		return argError(op, "ptr", fmt.Sprintf("%p", p), "a pointer from ncclMemAlloc that is not yet freed")
	}
	return keepContext(func() result {
		err := ctx.MemFree(cuda.DevicePtr(uintptr(p)))
		if rerr := ctx.Release(); err == nil {
			err = rerr
		}
		return fail(op, err)
	})
}

// registrations are ncclCommRegister's handles (registration is a no-op).
var (
	regsMu sync.Mutex
	regs   = map[unsafe.Pointer]C.ncclComm_t{}
)

//export ncclCommRegister
func ncclCommRegister(h C.ncclComm_t, buf unsafe.Pointer, size C.size_t, handle *unsafe.Pointer) (res result) {
	defer guard("CommRegister", &res)
	const op = "CommRegister"
	if _, r := lookupFor(op, h, "handle", unsafe.Pointer(handle), "a pointer to a void*"); r != C.ncclSuccess {
		return r
	}
	*handle = nil
	if buf == nil && size > 0 {
		return argError(op, "buff", "NULL", "a device buffer of size bytes")
	}
	// ncclgo needs no registration: the handle only marks the call.
	t := newHandle()
	regsMu.Lock()
	regs[t] = h
	regsMu.Unlock()
	*handle = t
	return C.ncclSuccess
}

// dropRegistrations forgets the registration handles of communicator h.
func dropRegistrations(h C.ncclComm_t) {
	regsMu.Lock()
	defer regsMu.Unlock()
	for t, owner := range regs {
		if owner == h {
			delete(regs, t)
		}
	}
}

//export ncclCommDeregister
func ncclCommDeregister(h C.ncclComm_t, handle unsafe.Pointer) (res result) {
	defer guard("CommDeregister", &res)
	const op = "CommDeregister"
	if _, r := lookup(op, h); r != C.ncclSuccess {
		return r
	}
	regsMu.Lock()
	owner, ok := regs[handle]
	if ok && owner == h {
		delete(regs, handle)
	}
	regsMu.Unlock()
	if !ok || owner != h {
		return argError(op, "handle", fmt.Sprintf("%p", handle), "a handle from ncclCommRegister on this communicator")
	}
	return C.ncclSuccess
}

//export ncclCommWindowRegister
func ncclCommWindowRegister(h C.ncclComm_t, buf unsafe.Pointer, size C.size_t, win *unsafe.Pointer, flags C.int) (res result) {
	defer guard("CommWindowRegister", &res)
	const op = "CommWindowRegister"
	if _, r := lookupFor(op, h, "win", unsafe.Pointer(win), "a pointer to an ncclWindow_t"); r != C.ncclSuccess {
		return r
	}
	*win = nil
	return notImplemented(op, "memory windows (symmetric registration)")
}

//export ncclCommWindowDeregister
func ncclCommWindowDeregister(h C.ncclComm_t, win unsafe.Pointer) (res result) {
	defer guard("CommWindowDeregister", &res)
	const op = "CommWindowDeregister"
	if _, r := lookup(op, h); r != C.ncclSuccess {
		return r
	}
	return argError(op, "win", fmt.Sprintf("%p", win), "a window from ncclCommWindowRegister (ncclgo makes none)")
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
