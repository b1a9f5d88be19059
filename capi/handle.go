package main

/*
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

static __thread uint64_t ncclgo_thread;
static uint64_t ncclgo_threads;

// ncclgo_thread_id is the calling thread's number: given at its first
// call, never given to another thread (thread ids are reused).
static uint64_t ncclgo_thread_id(void) {
  if (ncclgo_thread == 0) ncclgo_thread = __atomic_add_fetch(&ncclgo_threads, 1, __ATOMIC_RELAXED);
  return ncclgo_thread;
}

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

// threadID numbers the calling OS thread for the life of the process. It
// keys the thread's group: a thread that ends with a group open (an
// unmatched ncclGroupStart) must not hand it to a later thread that the
// kernel gives the same thread id.
func threadID() uint64 { return uint64(C.ncclgo_thread_id()) }
