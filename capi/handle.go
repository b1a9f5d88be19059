package main

/*
#include <stdlib.h>
#include <sys/mman.h>

// ncclgo_reserve reserves n bytes of address space that nothing can
// touch (no memory behind it), or returns NULL.
static void* ncclgo_reserve(size_t n) {
  void* p = mmap(NULL, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}
*/
import "C"

import (
	"sync"
	"unsafe"
)

// Handles (ncclComm_t, ncclCommRegister's handles) are addresses no other
// handle ever had: a stale handle, kept by a client after
// ncclCommDestroy, never names a later communicator (malloc would hand the
// freed address out again), so calls with it keep failing with
// ncclInvalidArgument. They are taken in turn from a reserved range of
// address space with no memory behind it (PROT_NONE), so they cost
// nothing and need no freeing; nothing reads through them.
var handles struct {
	mu   sync.Mutex
	base unsafe.Pointer // the range handles are taken from now
	used uintptr        // bytes of it handed out
}

const (
	handleSpace = 1 << 30 // bytes reserved at a time: 2^27 handles
	handleStep  = 8
)

// newHandle returns an address no handle had before.
func newHandle() unsafe.Pointer {
	handles.mu.Lock()
	defer handles.mu.Unlock()
	if handles.base == nil || handles.used == handleSpace {
		p := C.ncclgo_reserve(handleSpace)
		if p == nil {
			// No address space to reserve: a C allocation that is
			// never freed is unique as well.
			return C.malloc(handleStep)
		}
		handles.base, handles.used = p, 0
	}
	h := unsafe.Add(handles.base, handles.used)
	handles.used += handleStep
	return h
}
