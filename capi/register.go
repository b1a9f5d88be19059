package main

/*
#include "nccl.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"unsafe"

	"github.com/ncclgo/ncclgo"
	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// Registration (ncclCommRegister) checks the buffer and hands out a
// handle; it changes nothing else, since ncclgo's kernels copy through the
// communicator's own buffers (see the package doc). Windows
// (ncclCommWindowRegister) are checked alike and then registered with
// ncclgo.Comm.RegisterWindow, collectively: where ranks of several
// processes share a GPU or NVLink, DIRECT runs on calls whose buffers lie
// in windows. The handles are kept so that a handle of another
// communicator, a deregistered one or one that never was is refused.

// memInspector is what registration asks the driver of an address: the
// communicator's context (*cuda.Context), or a fake in tests.
type memInspector interface {
	PointerInfo(p cuda.DevicePtr) (cuda.PointerInfo, error)
	MemGetAddressRange(p cuda.DevicePtr) (base cuda.DevicePtr, size uint64, err error)
}

// inspector returns the memInspector for c's buffers; tests replace it.
var inspector = func(c *comm) memInspector { return c.cctx }

// registration is one handle of ncclCommRegister or ncclCommWindowRegister.
type registration struct {
	comm         C.ncclComm_t
	buf          uintptr
	size         uint64
	window       bool           // ncclCommWindowRegister's
	win          *ncclgo.Window // the window registered (window)
	deregistered bool           // kept until the communicator goes, to name a second deregister
}

var (
	regsMu sync.Mutex
	regs   = map[unsafe.Pointer]*registration{}
)

// dropRegistrations forgets the registrations of communicator h (at its
// destroy or abort): their handles are no longer accepted.
func dropRegistrations(h C.ncclComm_t) {
	regsMu.Lock()
	defer regsMu.Unlock()
	for t, r := range regs {
		if r.comm == h {
			delete(regs, t)
		}
	}
}

// checkBuffer checks that [buf, buf+size) is memory CUDA knows, on device:
// it walks the allocations the range spans (an allocator's segment may be
// several VMM mappings). host reports page-locked host memory, which NCCL
// leaves unregistered; managed memory is accepted wherever it lives.
func checkBuffer(mem memInspector, device int, buf uintptr, size uint64) (host bool, err error) {
	if size > math.MaxUint64-uint64(buf) {
		return false, &ncclgo.ArgError{Arg: "size", Value: size, Want: fmt.Sprintf("a size that does not run past the end of the address space from buff=%#x", buf)}
	}
	end := uint64(buf) + size
	for p := uint64(buf); ; {
		unknown := func(err error) error {
			if !errors.Is(err, cuda.ErrInvalidValue) {
				return err // the driver failed, not the argument
			}
			where := "buff"
			if p != uint64(buf) {
				where = fmt.Sprintf("byte %d of the buffer (%#x; size=%d)", p-uint64(buf), p, size)
			}
			return &ncclgo.ArgError{Arg: "buff", Value: fmt.Sprintf("%#x", buf),
				Want: fmt.Sprintf("device memory of device %d (CUDA knows no memory at %s: %v)", device, where, err)}
		}
		info, err := mem.PointerInfo(cuda.DevicePtr(p))
		if err != nil {
			return false, unknown(err)
		}
		switch info.Type {
		case cuda.MemoryTypeHost:
			return true, nil
		case cuda.MemoryTypeDevice:
			if int(info.Device) != device {
				return false, &ncclgo.ArgError{Arg: "buff", Value: fmt.Sprintf("%#x", buf),
					Want: fmt.Sprintf("memory of the communicator's device %d (the memory at %#x is on device %d)", device, p, info.Device)}
			}
		}
		base, n, err := mem.MemGetAddressRange(cuda.DevicePtr(p))
		if err != nil {
			return false, unknown(err)
		}
		next := uint64(base) + n
		if n == 0 || next <= p {
			return false, fmt.Errorf("the driver says the allocation holding %#x is %d bytes at %#x", p, n, uint64(base))
		}
		if next >= end {
			return false, nil
		}
		p = next
	}
}

// registerWindow is Comm.RegisterWindow; tests replace it.
var registerWindow = func(gc *ncclgo.Comm, ctx context.Context, buf cuda.DevicePtr, size uint64) (*ncclgo.Window, error) {
	return gc.RegisterWindow(ctx, buf, size)
}

// abstainWindow takes this rank's part in a window registration that it
// refuses (its arguments failed a check here): registering no buffer
// fails the registration on every rank at once, naming this one, where
// returning early would leave the peers waiting for it in the exchange.
// It says nothing itself: the caller reports its own error.
func abstainWindow(h C.ncclComm_t, size C.size_t) {
	c := find(h)
	if c == nil {
		return // no communicator: no exchange to take part in
	}
	gc, err := c.goComm()
	if err != nil || gc == nil {
		return // not initialized: it cannot take part in an exchange
	}
	keepContext(func() result {
		_, _ = registerWindow(gc, context.Background(), 0, uint64(size)) // fails: buf=0
		return C.ncclSuccess
	})
}

// register is ncclCommRegister (window false) and ncclCommWindowRegister:
// it checks the communicator and the buffer and hands out a new handle
// through out (NULL for host memory, which a plain registration skips as
// NCCL does).
func register(op string, h C.ncclComm_t, buf unsafe.Pointer, size C.size_t, out *unsafe.Pointer, window bool) result {
	outArg, want := "handle", "a pointer to a void*"
	if window {
		outArg, want = "win", "a pointer to an ncclWindow_t"
	}
	c, r := lookupFor(op, h, outArg, unsafe.Pointer(out), want)
	if r != C.ncclSuccess {
		return r
	}
	*out = nil
	if _, r := c.ready(op); r != C.ncclSuccess {
		return r
	}
	if buf == nil {
		if window {
			abstainWindow(h, size)
		}
		return argError(op, "buff", "NULL", fmt.Sprintf("a buffer in device memory of device %d", c.device))
	}
	var host bool
	var err error
	keepContext(func() result {
		host, err = checkBuffer(inspector(c), c.device, uintptr(buf), uint64(size))
		return C.ncclSuccess
	})
	if window && (err != nil || host) {
		abstainWindow(h, size)
	}
	switch {
	case err != nil:
		return fail(op, fmt.Errorf("%s: %w", c.who(), err))
	case host && window:
		return argError(op, "buff", fmt.Sprintf("%p", buf), fmt.Sprintf("device memory of device %d (a window is never host memory)", c.device))
	case host:
		return C.ncclSuccess // NCCL registers no host memory: a NULL handle
	}
	reg := &registration{comm: h, buf: uintptr(buf), size: uint64(size), window: window}
	if window {
		gc, _ := c.ready(op)
		r := keepContext(func() result {
			reg.win, err = registerWindow(gc, context.Background(), cuda.DevicePtr(uintptr(buf)), uint64(size))
			if err != nil {
				return fail(op, fmt.Errorf("%s: %w", c.who(), err))
			}
			return C.ncclSuccess
		})
		if r != C.ncclSuccess {
			return r
		}
	}
	t := newHandle()
	regsMu.Lock()
	regs[t] = reg
	regsMu.Unlock()
	// A destroy that ran meanwhile has dropped the communicator's
	// registrations before this one was added: drop it too.
	if _, r := lookup(op, h); r != C.ncclSuccess {
		regsMu.Lock()
		delete(regs, t)
		regsMu.Unlock()
		return r
	}
	*out = t
	return C.ncclSuccess
}

// deregister is ncclCommDeregister (window false) and
// ncclCommWindowDeregister.
func deregister(op string, h C.ncclComm_t, handle unsafe.Pointer, window bool) result {
	if _, r := lookup(op, h); r != C.ncclSuccess {
		return r
	}
	arg, kind, other := "handle", "a handle from ncclCommRegister", "a window from ncclCommWindowRegister: use ncclCommWindowDeregister"
	if window {
		arg, kind, other = "win", "a window from ncclCommWindowRegister", "a handle from ncclCommRegister: use ncclCommDeregister"
	}
	if handle == nil {
		if window {
			return argError(op, arg, "NULL", kind)
		}
		return C.ncclSuccess // NCCL: nothing to deregister (host memory's handle)
	}
	regsMu.Lock()
	reg := regs[handle]
	var why string
	switch {
	case reg == nil:
		why = "not " + kind + " of a live communicator"
	case reg.window != window:
		why = "it is " + other
	case reg.comm != h:
		why = fmt.Sprintf("it belongs to another communicator (%p)", unsafe.Pointer(reg.comm))
	case reg.deregistered:
		why = fmt.Sprintf("it was deregistered already (buffer %#x, %d bytes)", reg.buf, reg.size)
	default:
		reg.deregistered = true
	}
	regsMu.Unlock()
	if why != "" {
		// ncclInvalidUsage, NCCL's code for a handle it does not find.
		return fail(op, fmt.Errorf("%w: %s=%p: %s", ncclgo.ErrInvalidUsage, arg, handle, why))
	}
	if reg.win != nil { // collective, as its registration was
		return keepContext(func() result { return fail(op, reg.win.Deregister(context.Background())) })
	}
	return C.ncclSuccess
}

// ncclCommRegister checks that buff is device memory of the
// communicator's device, size bytes of it, and returns a handle for
// ncclCommDeregister. It changes nothing else (see the package doc).
//
//export ncclCommRegister
func ncclCommRegister(h C.ncclComm_t, buf unsafe.Pointer, size C.size_t, handle *unsafe.Pointer) (res result) {
	defer guard("CommRegister", &res)
	return register("CommRegister", h, buf, size, handle, false)
}

//export ncclCommDeregister
func ncclCommDeregister(h C.ncclComm_t, handle unsafe.Pointer) (res result) {
	defer guard("CommDeregister", &res)
	return deregister("CommDeregister", h, handle, false)
}

// ncclCommWindowRegister checks the buffer as ncclCommRegister does,
// registers it as a window (collectively: every rank, in the same order,
// the same size; ncclgo.Comm.RegisterWindow) and returns its handle.
// NCCL_WIN_COLL_SYMMETRIC and NCCL_WIN_DEFAULT register alike: DIRECT
// across processes runs on calls whose buffers lie in windows on every
// rank, as NCCL's symmetric kernels do.
//
//export ncclCommWindowRegister
func ncclCommWindowRegister(h C.ncclComm_t, buf unsafe.Pointer, size C.size_t, win *unsafe.Pointer, flags C.int) (res result) {
	defer guard("CommWindowRegister", &res)
	const op = "CommWindowRegister"
	if flags != C.NCCL_WIN_DEFAULT && flags != C.NCCL_WIN_COLL_SYMMETRIC {
		if win != nil {
			*win = nil
		}
		abstainWindow(h, size)
		return argError(op, "winFlags", int(flags), "NCCL_WIN_DEFAULT (0) or NCCL_WIN_COLL_SYMMETRIC (1)")
	}
	return register(op, h, buf, size, win, true)
}

//export ncclCommWindowDeregister
func ncclCommWindowDeregister(h C.ncclComm_t, win unsafe.Pointer) (res result) {
	defer guard("CommWindowDeregister", &res)
	return deregister("CommWindowDeregister", h, win, true)
}
