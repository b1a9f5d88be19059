package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo"
	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// readyComm is a communicator of device whose init succeeded, over a Go
// communicator with no ranks and no device.
func readyComm(device int) *comm {
	c := newComm(&comm{op: "CommInitRank", nRanks: 1, device: device, blocking: true})
	c.startOnce.Do(func() {})
	c.c = new(ncclgo.Comm)
	close(c.done)
	return c
}

// fakeMem answers for the memory of a few allocations, as the driver does.
type fakeMem []struct {
	base, size uint64
	typ        cuda.MemoryType
	dev        cuda.Device
}

func (f fakeMem) PointerInfo(p cuda.DevicePtr) (cuda.PointerInfo, error) {
	for _, r := range f {
		if uint64(p) >= r.base && uint64(p) < r.base+r.size {
			return cuda.PointerInfo{Type: r.typ, Device: r.dev}, nil
		}
	}
	return cuda.PointerInfo{}, &cuda.Error{Op: "cuPointerGetAttribute", Code: cuda.ResultInvalidValue}
}

func (f fakeMem) MemGetAddressRange(p cuda.DevicePtr) (cuda.DevicePtr, uint64, error) {
	for _, r := range f {
		if uint64(p) >= r.base && uint64(p) < r.base+r.size {
			return cuda.DevicePtr(r.base), r.size, nil
		}
	}
	return 0, 0, &cuda.Error{Op: "cuMemGetAddressRange", Code: cuda.ResultNotFound}
}

// Device 2's memory: two adjacent 1 MiB mappings (as an allocator's
// expandable segment has), device 3's, and page-locked host memory.
const (
	segA  = 0x7e0000000000
	segB  = segA + 1<<20
	dev3  = 0x7e1000000000
	hostM = 0x7e2000000000
)

func useFakeMem(t *testing.T) {
	old := inspector
	fm := fakeMem{
		{segA, 1 << 20, cuda.MemoryTypeDevice, 2},
		{segB, 1 << 20, cuda.MemoryTypeDevice, 2},
		{dev3, 1 << 20, cuda.MemoryTypeDevice, 3},
		{hostM, 1 << 20, cuda.MemoryTypeHost, 0},
	}
	inspector = func(*comm) memInspector { return fm }
	t.Cleanup(func() { inspector = old })
}

// TestRegisterChecksBuffer: ncclCommRegister and ncclCommWindowRegister
// take device memory of the communicator's device, spanning adjacent
// allocations, and refuse, naming the argument, memory of another device,
// a range running past the memory CUDA knows, NULL, and a size past the
// end of the address space (they used to take anything). Host memory is
// not registered: a NULL handle, as NCCL gives.
func TestRegisterChecksBuffer(t *testing.T) {
	useFakeMem(t)
	c := readyComm(2)
	defer c.forget()
	h := c.h
	var handle unsafe.Pointer
	ok := func(buf uintptr, size uint64) {
		t.Helper()
		handle = nil
		require.EqualValues(t, cSuccess, ncclCommRegister(h, addr(buf), csize(size), &handle), lastError())
		assert.NotNil(t, handle)
		var win unsafe.Pointer
		require.EqualValues(t, cSuccess, ncclCommWindowRegister(h, addr(buf), csize(size), &win, 1), lastError())
		assert.NotNil(t, win)
		assert.NotEqual(t, handle, win)
	}
	ok(segA+16, 100)
	ok(segA, 2<<20)       // both mappings
	ok(segA+1000, 1<<20)  // across the two
	ok(segB+(1<<20)-1, 1) // the last byte
	ok(segA, 0)           // nothing
	refused := func(buf uintptr, size uint64, code result, says ...string) {
		t.Helper()
		handle = addr(0x99)
		assert.EqualValues(t, code, ncclCommRegister(h, addr(buf), csize(size), &handle))
		assert.Nil(t, handle, "a refused registration's handle is NULL")
		for _, s := range says {
			assert.Contains(t, lastError(), s)
		}
		var win unsafe.Pointer
		assert.EqualValues(t, code, ncclCommWindowRegister(h, addr(buf), csize(size), &win, 0))
		assert.Nil(t, win)
	}
	refused(segA, 2<<20+1, cInvalidArgument, "ncclCommRegister: rank 0: ", fmt.Sprintf("buff=%#x", segA),
		"device memory of device 2", fmt.Sprintf("byte %d of the buffer", 2<<20))
	refused(dev3, 8, cInvalidArgument, "communicator's device 2", "is on device 3")
	refused(0x7d0000000000, 8, cInvalidArgument, "CUDA knows no memory at buff")
	refused(segA, math.MaxUint64, cInvalidArgument, "size=18446744073709551615")
	refused(0, 8, cInvalidArgument, "ncclCommRegister: ncclgo: buff=NULL")

	handle = addr(0x99)
	assert.EqualValues(t, cSuccess, ncclCommRegister(h, addr(hostM), 64, &handle))
	assert.Nil(t, handle, "host memory is not registered (NCCL's NULL handle)")
	assert.EqualValues(t, cSuccess, ncclCommDeregister(h, nil), "NCCL deregisters a NULL handle")
	var win unsafe.Pointer
	assert.EqualValues(t, cInvalidArgument, ncclCommWindowRegister(h, addr(hostM), 64, &win, 0))
	assert.Contains(t, lastError(), "a window is never host memory")
	assert.EqualValues(t, cInvalidArgument, ncclCommWindowRegister(h, addr(segA), 64, &win, 7))
	assert.Contains(t, lastError(), "ncclCommWindowRegister: ncclgo: winFlags=7")
	assert.EqualValues(t, cInvalidArgument, ncclCommRegister(h, addr(segA), 64, nil))
	assert.Contains(t, lastError(), "handle=NULL")
}

// csize is n as a size_t.
func csize(n uint64) sizeT { return sizeT(n) }

// TestDeregister: a handle deregisters once, on its own communicator and
// by its own call; a second deregister, another communicator's handle, a
// window passed as a handle (and the reverse) and an unknown pointer are
// refused with ncclInvalidUsage (NCCL's code for a handle it does not
// find), saying which it is (it used to accept a second deregister of
// nothing but a never-seen handle).
func TestDeregister(t *testing.T) {
	useFakeMem(t)
	a, b := readyComm(2), readyComm(2)
	defer a.forget()
	defer b.forget()
	var ha, hb, wa unsafe.Pointer
	require.EqualValues(t, cSuccess, ncclCommRegister(a.h, addr(segA), 64, &ha))
	require.EqualValues(t, cSuccess, ncclCommRegister(b.h, addr(segA), 64, &hb))
	require.EqualValues(t, cSuccess, ncclCommWindowRegister(a.h, addr(segA), 64, &wa, 0))

	refused := func(call result, says string) {
		t.Helper()
		assert.EqualValues(t, cInvalidUsage, call)
		assert.Contains(t, lastError(), says)
	}
	refused(ncclCommDeregister(a.h, hb), fmt.Sprintf("ncclCommDeregister: invalid usage: handle=%p: it belongs to another communicator (%p)", hb, unsafe.Pointer(b.h)))
	refused(ncclCommDeregister(a.h, wa), "it is a window from ncclCommWindowRegister: use ncclCommWindowDeregister")
	refused(ncclCommWindowDeregister(a.h, ha), "ncclCommWindowDeregister: invalid usage: win=")
	refused(ncclCommDeregister(a.h, addr(0x7d0000000010)), "handle=0x7d0000000010: not a handle from ncclCommRegister")
	assert.EqualValues(t, cSuccess, ncclCommDeregister(a.h, ha))
	refused(ncclCommDeregister(a.h, ha), fmt.Sprintf("it was deregistered already (buffer %#x, 64 bytes)", segA))
	assert.EqualValues(t, cSuccess, ncclCommWindowDeregister(a.h, wa))
	refused(ncclCommWindowDeregister(a.h, wa), "deregistered already")
	assert.EqualValues(t, cInvalidArgument, ncclCommWindowDeregister(a.h, nil))
	assert.Contains(t, lastError(), "win=NULL")
	assert.EqualValues(t, cSuccess, ncclCommDeregister(b.h, hb))
}

// TestRegisterWhileInitializing: a communicator still initializing takes
// no registration (ncclInvalidUsage, as other calls).
func TestRegisterWhileInitializing(t *testing.T) {
	useFakeMem(t)
	c := newComm(&comm{op: "CommInitRankConfig", nRanks: 2, device: 2})
	defer c.forget()
	var handle unsafe.Pointer
	assert.EqualValues(t, cInvalidUsage, ncclCommRegister(c.h, addr(segA), 64, &handle))
	assert.Contains(t, lastError(), "still initializing")
}

// TestDestroyDropsRegistrations: ncclCommDestroy frees the registrations
// the client did not deregister; they are no longer accepted.
func TestDestroyDropsRegistrations(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	useFakeMem(t)
	c := readyComm(2)
	h := c.h
	handles := make([]unsafe.Pointer, 3)
	for i := range handles {
		require.EqualValues(t, cSuccess, ncclCommRegister(h, addr(segA), 8, &handles[i]))
	}
	assert.EqualValues(t, cSuccess, ncclCommDeregister(h, handles[0]))
	assert.EqualValues(t, cSuccess, ncclCommDestroy(h))
	regsMu.Lock()
	for _, p := range handles {
		_, ok := regs[p]
		assert.False(t, ok, "registration %p outlived its communicator", p)
	}
	regsMu.Unlock()
}

// TestWindowRegisterRefusedStillExchanges: ncclCommWindowRegister is
// collective, so a rank whose arguments are refused here (NULL, host
// memory, memory of another device, a bad winFlags) still takes its part
// in the ranks' exchange, registering no buffer (which fails the
// registration on every rank, naming it); it used to return first and
// leave its peers waiting in the exchange for ever.
func TestWindowRegisterRefusedStillExchanges(t *testing.T) {
	useFakeMem(t)
	c := readyComm(2)
	defer c.forget()
	var calls []cuda.DevicePtr
	old := registerWindow
	registerWindow = func(_ *ncclgo.Comm, _ context.Context, buf cuda.DevicePtr, _ uint64) (*ncclgo.Window, error) {
		calls = append(calls, buf)
		if buf == 0 {
			return nil, errors.New("fake: buf=0")
		}
		return new(ncclgo.Window), nil
	}
	t.Cleanup(func() { registerWindow = old })
	for _, tc := range []struct {
		name  string
		buf   uintptr
		flags int
	}{
		{"NULL", 0, 0},
		{"host memory", hostM, 0},
		{"another device", dev3, 0},
		{"unknown memory", 0x7d0000000000, 0},
		{"winFlags", segA, 7},
	} {
		calls = nil
		var win unsafe.Pointer
		var code result
		if tc.flags == 7 {
			code = ncclCommWindowRegister(c.h, addr(tc.buf), 64, &win, 7)
		} else {
			code = ncclCommWindowRegister(c.h, addr(tc.buf), 64, &win, 0)
		}
		assert.EqualValues(t, cInvalidArgument, code, tc.name)
		assert.Nil(t, win, tc.name)
		assert.Equal(t, []cuda.DevicePtr{0}, calls, "%s: the refused rank takes part in the exchange with no buffer", tc.name)
	}
	calls = nil
	var win unsafe.Pointer
	require.EqualValues(t, cSuccess, ncclCommWindowRegister(c.h, addr(segA), 64, &win, 0), lastError())
	assert.Equal(t, []cuda.DevicePtr{cuda.DevicePtr(segA)}, calls, "an accepted window registers once")
	var handle unsafe.Pointer
	calls = nil
	assert.EqualValues(t, cInvalidArgument, ncclCommRegister(c.h, addr(dev3), 64, &handle))
	assert.Empty(t, calls, "ncclCommRegister is local: no exchange")
}
