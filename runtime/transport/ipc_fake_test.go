package transport

import (
	"encoding/binary"
	"fmt"
	"sync"
	"syscall"
	"unsafe"

	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/ncclgo/ncclgo/runtime/transport/ipc"
)

// fakeIPC is a device whose "device memory" from MemCreate is a memfd
// segment, so that two ranks in this test process, posing as two
// processes, really share the bytes behind the addresses they exchange.
// translate maps an address back to the host bytes behind it.
type fakeIPC struct {
	*fakeMem
	dev cuda.Device

	mu         sync.Mutex
	noVMM      bool
	handles    map[cuda.MemHandle]*ipc.Segment
	reserved   map[cuda.DevicePtr]uint64
	mapped     map[cuda.DevicePtr]*ipc.Segment
	registered map[unsafe.Pointer]cuda.DevicePtr
	hostMapped map[cuda.DevicePtr][]byte
	ipcOpened  map[cuda.DevicePtr]uint64 // the opened allocation's size
	ipcShort   uint64                    // IpcGetMemHandle: allocations this many bytes smaller than allocated (a peer that over-publishes)
	nextHandle cuda.MemHandle
}

// fakeWorld gives every fake device distinct addresses.
var fakeWorld struct {
	mu   sync.Mutex
	next uint64
	all  []*fakeIPC
}

func newFakeIPC(dev int) *fakeIPC {
	f := &fakeIPC{fakeMem: newFakeMem(), dev: cuda.Device(dev), handles: map[cuda.MemHandle]*ipc.Segment{},
		reserved: map[cuda.DevicePtr]uint64{}, mapped: map[cuda.DevicePtr]*ipc.Segment{},
		registered: map[unsafe.Pointer]cuda.DevicePtr{}, hostMapped: map[cuda.DevicePtr][]byte{}, ipcOpened: map[cuda.DevicePtr]uint64{}}
	fakeWorld.mu.Lock()
	fakeWorld.all = append(fakeWorld.all, f)
	fakeWorld.mu.Unlock()
	return f
}

func freshAddr(n uint64) cuda.DevicePtr {
	fakeWorld.mu.Lock()
	defer fakeWorld.mu.Unlock()
	fakeWorld.next += (n + 0x1fffff) &^ 0x1fffff
	return cuda.DevicePtr(0x500000000000 + fakeWorld.next)
}

// live counts what the device still holds.
func (f *fakeIPC) liveCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fakeMem.mu.Lock()
	defer f.fakeMem.mu.Unlock()
	return len(f.handles) + len(f.reserved) + len(f.mapped) + len(f.registered) + len(f.ipcOpened) + len(f.fakeMem.live)
}

// translate returns the n host bytes behind address a of this device.
func (f *fakeIPC) translate(a uint64, n int) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for base, seg := range f.mapped {
		if a >= uint64(base) && a+uint64(n) <= uint64(base)+uint64(seg.Size()) {
			off := a - uint64(base)
			return seg.Bytes()[off : off+uint64(n)], nil
		}
	}
	for base, b := range f.hostMapped {
		if a >= uint64(base) && a+uint64(n) <= uint64(base)+uint64(len(b)) {
			off := a - uint64(base)
			return b[off : off+uint64(n)], nil
		}
	}
	return nil, fmt.Errorf("address %#x (%d bytes) is not mapped on fake device %d", a, n, f.dev)
}

func (f *fakeIPC) Device() cuda.Device { return f.dev }

func (f *fakeIPC) MemGetAllocationGranularity(bool) (uint64, error) { return 2 << 20, nil }

func (f *fakeIPC) MemCreate(size uint64) (cuda.MemHandle, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.noVMM {
		return 0, cuda.ErrNotSupported
	}
	if size%(2<<20) != 0 {
		return 0, fmt.Errorf("MemCreate(%d): not a multiple of the granularity", size)
	}
	seg, err := ipc.CreateSegment("fake-vmm", int(size))
	if err != nil {
		return 0, err
	}
	f.nextHandle++
	f.handles[f.nextHandle] = seg
	return f.nextHandle, nil
}

func (f *fakeIPC) MemAddressReserve(size, align uint64) (cuda.DevicePtr, error) {
	p := freshAddr(size)
	f.mu.Lock()
	f.reserved[p] = size
	f.mu.Unlock()
	return p, nil
}

func (f *fakeIPC) MemMap(p cuda.DevicePtr, size uint64, h cuda.MemHandle) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	seg, ok := f.handles[h]
	if !ok || f.reserved[p] != size || uint64(seg.Size()) != size {
		return fmt.Errorf("MemMap(%#x, %d, %d): bad arguments", p, size, h)
	}
	// The mapping keeps the memory: share the segment by mapping it again.
	fd, err := seg.Dup()
	if err != nil {
		return err
	}
	m, err := ipc.MapSegment(fd, int(size))
	if err != nil {
		return err
	}
	f.mapped[p] = m
	return nil
}

func (f *fakeIPC) MemSetAccess(p cuda.DevicePtr, size uint64, devices ...cuda.Device) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.mapped[p]; !ok || len(devices) != 1 || devices[0] != f.dev {
		return fmt.Errorf("MemSetAccess(%#x, %v): unmapped, or not this device", p, devices)
	}
	return nil
}

func (f *fakeIPC) MemUnmap(p cuda.DevicePtr, size uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, err := take(f.mapped, p, "MemUnmap", "mapped")
	if err != nil {
		return err
	}
	return m.Close()
}

func (f *fakeIPC) MemAddressFree(p cuda.DevicePtr, size uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.mapped[p]; ok {
		return fmt.Errorf("MemAddressFree(%#x): still mapped", p)
	}
	if f.reserved[p] != size {
		return fmt.Errorf("MemAddressFree(%#x, %d): not reserved", p, size)
	}
	delete(f.reserved, p)
	return nil
}

func (f *fakeIPC) MemRelease(h cuda.MemHandle) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	seg, err := take(f.handles, h, "MemRelease", "a handle")
	if err != nil {
		return err
	}
	return seg.Close()
}

func (f *fakeIPC) MemExportToShareableHandle(h cuda.MemHandle) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	seg, ok := f.handles[h]
	if !ok {
		return -1, fmt.Errorf("export %d: unknown handle", h)
	}
	return seg.Dup()
}

func (f *fakeIPC) MemImportFromShareableHandle(fd int) (cuda.MemHandle, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return 0, err
	}
	// Import keeps its own reference (the caller closes fd), as the driver does.
	dup, err := syscall.Dup(fd)
	if err != nil {
		return 0, err
	}
	seg0, err := ipc.MapSegment(dup, int(st.Size))
	if err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextHandle++
	f.handles[f.nextHandle] = seg0
	return f.nextHandle, nil
}

// IpcGetMemHandle's handle carries the allocation's address and size (less
// ipcShort), which IpcOpenMemHandle's mapping then has.
func (f *fakeIPC) IpcGetMemHandle(p cuda.DevicePtr) (cuda.IpcMemHandle, error) {
	f.fakeMem.mu.Lock()
	n, ok := f.live[p]
	f.fakeMem.mu.Unlock()
	if !ok {
		return cuda.IpcMemHandle{}, fmt.Errorf("IpcGetMemHandle(%#x): not an allocation", uint64(p))
	}
	f.mu.Lock()
	n -= min(n, f.ipcShort)
	f.mu.Unlock()
	var h cuda.IpcMemHandle
	copy(h[:], "fake-ipc")
	binary.LittleEndian.PutUint64(h[8:], uint64(p))
	binary.LittleEndian.PutUint64(h[16:], n)
	return h, nil
}

func (f *fakeIPC) IpcOpenMemHandle(h cuda.IpcMemHandle) (cuda.DevicePtr, error) {
	if string(h[:8]) != "fake-ipc" {
		return 0, fmt.Errorf("not a fake IPC handle")
	}
	n := binary.LittleEndian.Uint64(h[16:])
	p := freshAddr(max(n, 1))
	f.mu.Lock()
	f.ipcOpened[p] = n
	f.mu.Unlock()
	return p, nil
}

func (f *fakeIPC) MemGetAddressRange(p cuda.DevicePtr) (cuda.DevicePtr, uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for base, n := range f.ipcOpened {
		if p >= base && uint64(p-base) < max(n, 1) {
			return base, n, nil
		}
	}
	return 0, 0, fmt.Errorf("MemGetAddressRange(%#x): not opened from an IPC handle (the fake knows no other)", uint64(p))
}

func (f *fakeIPC) IpcCloseMemHandle(p cuda.DevicePtr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, err := take(f.ipcOpened, p, "IpcCloseMemHandle", "open")
	return err
}

func (f *fakeIPC) MemHostRegister(p unsafe.Pointer, n uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, dup := f.registered[p]; dup {
		return fmt.Errorf("MemHostRegister(%p): registered twice", p)
	}
	a := freshAddr(n)
	f.registered[p] = a
	f.hostMapped[a] = unsafe.Slice((*byte)(p), n)
	return nil
}

func (f *fakeIPC) MemHostUnregister(p unsafe.Pointer) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	a, err := take(f.registered, p, "MemHostUnregister", "registered")
	if err != nil {
		return err
	}
	delete(f.hostMapped, a)
	return nil
}

func (f *fakeIPC) HostDevicePointer(p unsafe.Pointer) (cuda.DevicePtr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a, ok := f.registered[p]
	if !ok {
		return 0, fmt.Errorf("HostDevicePointer(%p): not registered", p)
	}
	return a, nil
}

// take removes and returns m[k] (f.mu held), or says that op's argument k
// is not what it must be (mapped, a handle, ...).
func take[K comparable, V any](m map[K]V, k K, op, must string) (V, error) {
	v, ok := m[k]
	if !ok {
		return v, fmt.Errorf("%s(%#v): not %s", op, k, must)
	}
	delete(m, k)
	return v, nil
}
