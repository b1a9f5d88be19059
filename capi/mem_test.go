package main

import (
	"fmt"
	"math"
	"runtime"
	"syscall"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo"
	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// fakeVMM is a driver for memAlloc and allocation.free: it hands out
// addresses and handles, keeps what is live, logs the calls and fails the
// step named in failAt. Fabric handles are refused when noFabric is set,
// as on a system without IMEX channels.
type fakeVMM struct {
	gran     uint64
	noFabric bool
	failAt   string
	log      []string
	next     uint64
	handles  map[cuda.MemHandle]cuda.AllocProp // created, not released
	reserved map[cuda.DevicePtr]uint64         // reserved, not freed
	mapped   map[cuda.DevicePtr]uint64         // mapped, not unmapped
	access   map[cuda.DevicePtr][]cuda.Device
	plain    map[cuda.DevicePtr]uint64 // MemAlloc's
	refs     int                       // context references (Release drops one)
}

var errInjected = &cuda.Error{Op: "cuInjected", Code: cuda.ResultOutOfMemory}

func newFakeVMM() *fakeVMM {
	return &fakeVMM{gran: 2 << 20, next: 0x7e0000000000, refs: 1,
		handles: map[cuda.MemHandle]cuda.AllocProp{}, reserved: map[cuda.DevicePtr]uint64{},
		mapped: map[cuda.DevicePtr]uint64{}, access: map[cuda.DevicePtr][]cuda.Device{}, plain: map[cuda.DevicePtr]uint64{}}
}

func (f *fakeVMM) step(name string, args ...any) error {
	f.log = append(f.log, name+fmt.Sprint(args...))
	if f.failAt == name {
		return errInjected
	}
	return nil
}

// live says what is still allocated; empty when everything was undone.
func (f *fakeVMM) live() []string {
	var out []string
	for h := range f.handles {
		out = append(out, fmt.Sprintf("handle %d", h))
	}
	for p, n := range f.reserved {
		out = append(out, fmt.Sprintf("reservation %#x+%d", uint64(p), n))
	}
	for p, n := range f.mapped {
		out = append(out, fmt.Sprintf("mapping %#x+%d", uint64(p), n))
	}
	for p := range f.plain {
		out = append(out, fmt.Sprintf("cuMemAlloc %#x", uint64(p)))
	}
	return out
}

func (f *fakeVMM) MemGranularityFor(prop cuda.AllocProp, rec bool) (uint64, error) {
	if err := f.step("granularity", prop, rec); err != nil {
		return 0, err
	}
	return f.gran, nil
}

func (f *fakeVMM) MemCreateWith(size uint64, prop cuda.AllocProp) (cuda.MemHandle, error) {
	if err := f.step("create", size, prop); err != nil {
		return 0, err
	}
	if f.noFabric && prop.HandleTypes&cuda.MemHandleFabric != 0 {
		return 0, &cuda.Error{Op: "cuMemCreate", Code: cuda.ResultNotPermitted}
	}
	if size%f.gran != 0 {
		return 0, &cuda.Error{Op: "cuMemCreate", Code: cuda.ResultInvalidValue}
	}
	f.next += 0x1000
	h := cuda.MemHandle(f.next)
	f.handles[h] = prop
	return h, nil
}

func (f *fakeVMM) MemAddressReserve(size, align uint64) (cuda.DevicePtr, error) {
	if err := f.step("reserve", size, align); err != nil {
		return 0, err
	}
	f.next = (f.next + size + align) / align * align
	p := cuda.DevicePtr(f.next)
	f.next += size
	f.reserved[p] = size
	return p, nil
}

func (f *fakeVMM) MemMap(p cuda.DevicePtr, size uint64, h cuda.MemHandle) error {
	if err := f.step("map", size); err != nil {
		return err
	}
	if _, ok := f.handles[h]; !ok || f.reserved[p] != size {
		return &cuda.Error{Op: "cuMemMap", Code: cuda.ResultInvalidValue}
	}
	f.mapped[p] = size
	return nil
}

func (f *fakeVMM) MemSetAccess(p cuda.DevicePtr, size uint64, devs ...cuda.Device) error {
	if err := f.step("access", size, devs); err != nil {
		return err
	}
	if f.mapped[p] != size {
		return &cuda.Error{Op: "cuMemSetAccess", Code: cuda.ResultInvalidValue}
	}
	f.access[p] = devs
	return nil
}

func (f *fakeVMM) MemUnmap(p cuda.DevicePtr, size uint64) error {
	if err := f.step("unmap", size); err != nil {
		return err
	}
	if f.mapped[p] != size {
		return &cuda.Error{Op: "cuMemUnmap", Code: cuda.ResultInvalidValue}
	}
	delete(f.mapped, p)
	return nil
}

func (f *fakeVMM) MemAddressFree(p cuda.DevicePtr, size uint64) error {
	if err := f.step("addressFree", size); err != nil {
		return err
	}
	if f.reserved[p] != size {
		return &cuda.Error{Op: "cuMemAddressFree", Code: cuda.ResultInvalidValue}
	}
	delete(f.reserved, p)
	return nil
}

func (f *fakeVMM) MemRelease(h cuda.MemHandle) error {
	if err := f.step("release"); err != nil {
		return err
	}
	if _, ok := f.handles[h]; !ok {
		return &cuda.Error{Op: "cuMemRelease", Code: cuda.ResultInvalidValue}
	}
	delete(f.handles, h)
	return nil
}

func (f *fakeVMM) MemAlloc(size uint64) (cuda.DevicePtr, error) {
	if err := f.step("alloc", size); err != nil {
		return 0, err
	}
	f.next += 0x100000
	p := cuda.DevicePtr(f.next)
	f.plain[p] = size
	return p, nil
}

func (f *fakeVMM) MemFree(p cuda.DevicePtr) error {
	if err := f.step("free"); err != nil {
		return err
	}
	if _, ok := f.plain[p]; !ok {
		return &cuda.Error{Op: "cuMemFree", Code: cuda.ResultInvalidValue}
	}
	delete(f.plain, p)
	return nil
}

func (f *fakeVMM) Release() error {
	f.refs--
	return nil
}

var vmmPlan = allocPlan{vmm: true, device: 1,
	prop:  cuda.AllocProp{HandleTypes: cuda.MemHandlePOSIXFD | cuda.MemHandleFabric, GPUDirectRDMA: true},
	peers: []cuda.Device{0, 3}}

// TestMemAllocVMM: ncclMemAlloc's allocation is NCCL's: cuMemCreate with
// the plan's handle types and flags, the size rounded up to the
// granularity, an address range aligned to it, mapped and opened to the
// device and its peers; free undoes exactly that (it used to be
// cuMemAlloc, which cannot be exported as a file descriptor).
func TestMemAllocVMM(t *testing.T) {
	f := newFakeVMM()
	const size = 3<<20 + 1
	p, a, err := memAlloc(f, vmmPlan, size)
	require.NoError(t, err)
	assert.Equal(t, uint64(4<<20), a.size, "rounded up to the 2 MiB granularity")
	assert.Equal(t, uint64(size), a.asked)
	assert.Zero(t, uint64(p)%f.gran, "the address is aligned to the granularity")
	assert.Equal(t, vmmPlan.prop, f.handles[a.mem], "the handle types and flags asked for")
	assert.Equal(t, []cuda.Device{1, 0, 3}, f.access[p], "read-write for the device and its peers")
	assert.Equal(t, []string{
		fmt.Sprint("granularity", vmmPlan.prop, true),
		fmt.Sprint("create", uint64(4<<20), vmmPlan.prop),
		fmt.Sprint("reserve", uint64(4<<20), f.gran),
		fmt.Sprint("map", uint64(4<<20)),
		fmt.Sprint("access", uint64(4<<20), []cuda.Device{1, 0, 3}),
	}, f.log)
	require.NoError(t, a.free(p))
	assert.Empty(t, f.live(), "free leaves nothing behind")
	assert.Zero(t, f.refs, "free drops the context reference")
}

// TestMemAllocFabricRefused: where fabric handles are refused (no IMEX),
// the allocation is made again with POSIX file descriptors only, as NCCL
// does; another failure of cuMemCreate is the error.
func TestMemAllocFabricRefused(t *testing.T) {
	f := newFakeVMM()
	f.noFabric = true
	p, a, err := memAlloc(f, vmmPlan, 100)
	require.NoError(t, err)
	assert.Equal(t, cuda.AllocProp{HandleTypes: cuda.MemHandlePOSIXFD, GPUDirectRDMA: true}, f.handles[a.mem])
	require.NoError(t, a.free(p))
	assert.Empty(t, f.live())

	f = newFakeVMM()
	f.failAt = "create"
	_, _, err = memAlloc(f, vmmPlan, 100)
	assert.ErrorIs(t, err, cuda.ErrOutOfMemory)
	assert.Len(t, f.log, 2, "no retry after a failure other than a refusal: %v", f.log)
}

// TestMemAllocUnwinds: a failed step of memAlloc undoes the steps before
// it: no handle, reservation or mapping is left.
func TestMemAllocUnwinds(t *testing.T) {
	for _, step := range []string{"granularity", "create", "reserve", "map", "access"} {
		f := newFakeVMM()
		f.failAt = step
		_, a, err := memAlloc(f, vmmPlan, 5<<20)
		assert.ErrorIs(t, err, cuda.ErrOutOfMemory, step)
		assert.Nil(t, a, step)
		assert.Empty(t, f.live(), "after a failed %s", step)
	}
	_, _, err := memAlloc(newFakeVMM(), vmmPlan, math.MaxUint64)
	assert.ErrorIs(t, err, ncclgo.ErrInvalidArgument, "a size that cannot be rounded up")
}

// TestMemAllocPlain: without VMM (no device support, NCCL_CUMEM_ENABLE=0)
// the allocation is cuMemAlloc's and free is cuMemFree.
func TestMemAllocPlain(t *testing.T) {
	f := newFakeVMM()
	p, a, err := memAlloc(f, allocPlan{device: 0}, 100)
	require.NoError(t, err)
	assert.False(t, a.vmm)
	assert.Equal(t, []string{fmt.Sprint("alloc", uint64(100))}, f.log)
	require.NoError(t, a.free(p))
	assert.Empty(t, f.live())
	assert.Zero(t, f.refs)
}

// addr is a device address as the void* a C caller passes (never
// dereferenced; outside Go's heap).
func addr(a uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&a)) }

// TestMemFreeTable: ncclMemFree frees exactly what ncclMemAlloc recorded,
// once; a pointer inside an allocation, a freed one or a foreign one is an
// invalid argument that names it; a failed free names the address and the
// driver's error.
func TestMemFreeTable(t *testing.T) {
	f := newFakeVMM()
	p, a, err := memAlloc(f, vmmPlan, 1000)
	require.NoError(t, err)
	allocsMu.Lock()
	allocs[uintptr(p)] = a
	allocsMu.Unlock()

	assert.EqualValues(t, cInvalidArgument, ncclMemFree(addr(uintptr(p)+8)))
	assert.Contains(t, lastError(), fmt.Sprintf("ncclMemFree: ncclgo: ptr=%#x", uintptr(p)+8))
	assert.Contains(t, lastError(), fmt.Sprintf("inside the allocation at %#x", uintptr(p)))
	assert.Len(t, f.mapped, 1, "a refused pointer frees nothing")

	assert.EqualValues(t, cSuccess, ncclMemFree(addr(uintptr(p))))
	assert.Empty(t, f.live())
	assert.EqualValues(t, cInvalidArgument, ncclMemFree(addr(uintptr(p))), "a second free")
	assert.Contains(t, lastError(), fmt.Sprintf("ncclMemFree: ncclgo: ptr=%#x: want a pointer from ncclMemAlloc that is not yet freed", uintptr(p)))
	assert.EqualValues(t, cInvalidArgument, ncclMemFree(addr(0x7d0000001234)))
	assert.Contains(t, lastError(), "ptr=0x7d0000001234")

	f = newFakeVMM()
	p, a, err = memAlloc(f, vmmPlan, 1000)
	require.NoError(t, err)
	allocsMu.Lock()
	allocs[uintptr(p)] = a
	allocsMu.Unlock()
	f.failAt = "unmap"
	assert.EqualValues(t, cUnhandledCudaError, ncclMemFree(addr(uintptr(p))))
	assert.Contains(t, lastError(), fmt.Sprintf("ncclMemFree: %#x (%d bytes): cuInjected", uintptr(p), f.gran))
	assert.Empty(t, f.handles, "the handle is released after a failed unmap")
	assert.Empty(t, f.reserved)
	assert.Zero(t, f.refs)
}

// TestGPUMemAlloc: on a GPU with VMM, ncclMemAlloc's memory is a mapping
// of the rounded-up size on the calling thread's device that exports as a
// POSIX file descriptor, and ncclMemFree unmaps it.
func TestGPUMemAlloc(t *testing.T) {
	if err := cuda.Init(); err != nil {
		t.Skipf("no usable CUDA driver: %v", err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var p unsafe.Pointer
	require.EqualValues(t, cSuccess, ncclMemAlloc(&p, 1000), lastError())
	allocsMu.Lock()
	a := allocs[uintptr(p)]
	allocsMu.Unlock()
	require.NotNil(t, a)
	ctx := a.ctx.(*cuda.Context)
	dev, _, err := cuda.CurrentDevice()
	require.NoError(t, err)
	info, err := ctx.PointerInfo(cuda.DevicePtr(uintptr(p)))
	require.NoError(t, err)
	assert.Equal(t, cuda.PointerInfo{Type: cuda.MemoryTypeDevice, Device: dev}, info)
	base, n, err := ctx.MemGetAddressRange(cuda.DevicePtr(uintptr(p)))
	require.NoError(t, err)
	assert.Equal(t, uintptr(p), uintptr(base))
	assert.Equal(t, a.size, n)
	if v, _ := ctx.Device().Attribute(cuda.DevAttrVirtualMemoryManagementSupported); v != 0 {
		require.True(t, a.vmm, "a device with VMM gets a VMM allocation")
		fd, err := ctx.MemExportToShareableHandle(a.mem)
		require.NoError(t, err, "ncclMemAlloc's memory exports as a file descriptor")
		require.NoError(t, syscall.Close(fd))
	}
	require.NoError(t, ctx.MemsetD8(cuda.DevicePtr(uintptr(p)), 7, 1000))
	require.EqualValues(t, cSuccess, ncclMemFree(p), lastError())
	_, _, err = ctx.MemGetAddressRange(cuda.DevicePtr(uintptr(p)))
	assert.Error(t, err, "the memory is unmapped")
}
