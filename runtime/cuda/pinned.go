package cuda

import (
	"sync"
	"unsafe"
)

// pinned counts the live page-locked host memory of this process that went
// through MemAllocHost or MemHostRegister, by start address.
var pinned struct {
	sync.Mutex
	size  map[unsafe.Pointer]uint64
	bytes uint64
}

func pinAdd(p unsafe.Pointer, n uint64) {
	pinned.Lock()
	defer pinned.Unlock()
	if pinned.size == nil {
		pinned.size = map[unsafe.Pointer]uint64{}
	}
	pinned.bytes -= pinned.size[p] // a stale entry of an address reused outside our calls
	pinned.size[p] = n
	pinned.bytes += n
}

func pinDrop(p unsafe.Pointer) {
	pinned.Lock()
	defer pinned.Unlock()
	pinned.bytes -= pinned.size[p]
	delete(pinned.size, p)
}

// PinnedHostMemory returns the bytes and the number of ranges of
// page-locked host memory that this process holds through MemAllocHost and
// MemHostRegister and has not yet released with MemFreeHost or
// MemHostUnregister. Leak checks compare it before and after a workload.
func PinnedHostMemory() (bytes uint64, ranges int) {
	pinned.Lock()
	defer pinned.Unlock()
	return pinned.bytes, len(pinned.size)
}
