package cuda

import (
	"sync"
	"testing"
	"unsafe"
)

func TestPinnedCounter(t *testing.T) {
	b0, n0 := PinnedHostMemory()
	bufs := make([][64]byte, 8)
	var wg sync.WaitGroup
	for i := range bufs {
		wg.Go(func() { pinAdd(unsafe.Pointer(&bufs[i]), uint64(100+i)) })
	}
	wg.Wait()
	b, n := PinnedHostMemory()
	if b-b0 != 8*100+28 || n-n0 != 8 {
		t.Fatalf("after 8 adds: %d bytes in %d ranges more, want 828 in 8", b-b0, n-n0)
	}
	pinAdd(unsafe.Pointer(&bufs[0]), 1) // the address reused: its old size goes
	for i := range bufs {
		wg.Go(func() { pinDrop(unsafe.Pointer(&bufs[i])) })
	}
	wg.Wait()
	pinDrop(unsafe.Pointer(&bufs[0])) // unknown now: no effect
	if b, n := PinnedHostMemory(); b != b0 || n != n0 {
		t.Fatalf("after the drops: %d bytes in %d ranges, want %d in %d", b, n, b0, n0)
	}
}
