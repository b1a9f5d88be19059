package main

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>

typedef int ncclResult_t;
typedef void* ncclComm_t;
typedef struct { char internal[128]; } ncclUniqueId;

typedef ncclResult_t (*pGetVersion)(int*);
typedef const char* (*pGetErrorString)(ncclResult_t);
typedef ncclResult_t (*pCommInitAll)(ncclComm_t*, int, const int*);
typedef ncclResult_t (*pCommDestroy)(ncclComm_t);
typedef ncclResult_t (*pGroup)(void);
typedef ncclResult_t (*pAllReduce)(const void*, void*, size_t, int, int, ncclComm_t, void*);
typedef ncclResult_t (*pAllGather)(const void*, void*, size_t, int, ncclComm_t, void*);
typedef ncclResult_t (*pReduceScatter)(const void*, void*, size_t, int, int, ncclComm_t, void*);
typedef ncclResult_t (*pBroadcast)(const void*, void*, size_t, int, int, ncclComm_t, void*);
typedef ncclResult_t (*pReduce)(const void*, void*, size_t, int, int, int, ncclComm_t, void*);
typedef ncclResult_t (*pSend)(const void*, size_t, int, int, ncclComm_t, void*);
typedef ncclResult_t (*pRecv)(void*, size_t, int, int, ncclComm_t, void*);

typedef struct {
	void* h;
	pGetVersion getVersion;
	pGetErrorString errorString;
	pCommInitAll commInitAll;
	pCommDestroy commDestroy;
	pGroup groupStart, groupEnd;
	pAllReduce allReduce;
	pAllGather allGather;
	pReduceScatter reduceScatter;
	pBroadcast broadcast;
	pReduce reduce;
	pSend send;
	pRecv recv;
} ncclLib;

static const char* ng_nccl_open(const char* path, ncclLib* l) {
	l->h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!l->h) return dlerror();
#define SYM(field, type, name) l->field = (type)dlsym(l->h, name); if (!l->field) return "missing symbol " name;
	SYM(getVersion, pGetVersion, "ncclGetVersion")
	SYM(errorString, pGetErrorString, "ncclGetErrorString")
	SYM(commInitAll, pCommInitAll, "ncclCommInitAll")
	SYM(commDestroy, pCommDestroy, "ncclCommDestroy")
	SYM(groupStart, pGroup, "ncclGroupStart")
	SYM(groupEnd, pGroup, "ncclGroupEnd")
	SYM(allReduce, pAllReduce, "ncclAllReduce")
	SYM(allGather, pAllGather, "ncclAllGather")
	SYM(reduceScatter, pReduceScatter, "ncclReduceScatter")
	SYM(broadcast, pBroadcast, "ncclBroadcast")
	SYM(reduce, pReduce, "ncclReduce")
	SYM(send, pSend, "ncclSend")
	SYM(recv, pRecv, "ncclRecv")
#undef SYM
	return 0;
}
static int ng_nccl_version(ncclLib* l, int* v) { return l->getVersion(v); }
static const char* ng_nccl_err(ncclLib* l, int r) { return l->errorString(r); }
static int ng_nccl_init_all(ncclLib* l, ncclComm_t* comms, int n, const int* devs) { return l->commInitAll(comms, n, devs); }
static int ng_nccl_destroy(ncclLib* l, ncclComm_t c) { return l->commDestroy(c); }
static int ng_nccl_group_start(ncclLib* l) { return l->groupStart(); }
static int ng_nccl_group_end(ncclLib* l) { return l->groupEnd(); }

// ng_nccl_coll runs one collective on every rank inside a group.
// coll 5 is nccl-tests' sendrecv (to the next rank, from the previous), 6
// its alltoall (count elements of esize bytes to and from every rank).
static int ng_nccl_coll(ncclLib* l, int coll, int n, ncclComm_t* comms, uintptr_t* send, uintptr_t* recv,
                        size_t count, int dt, int op, int root, uintptr_t* streams, size_t esize) {
	int r = l->groupStart();
	if (r) return r;
	for (int i = 0; i < n; i++) {
		const void* s = (const void*)send[i]; void* d = (void*)recv[i]; void* st = (void*)streams[i];
		switch (coll) {
		case 0: r = l->allReduce(s, d, count, dt, op, comms[i], st); break;
		case 1: r = l->allGather(s, d, count, dt, comms[i], st); break;
		case 2: r = l->reduceScatter(s, d, count, dt, op, comms[i], st); break;
		case 3: r = l->broadcast(s, d, count, dt, root, comms[i], st); break;
		case 4: r = l->reduce(s, d, count, dt, op, root, comms[i], st); break;
		case 5:
			r = l->send(s, count, dt, (i + 1) % n, comms[i], st);
			if (!r) r = l->recv(d, count, dt, (i + n - 1) % n, comms[i], st);
			break;
		case 6:
			for (int j = 0; j < n && !r; j++) {
				r = l->send((const char*)s + (size_t)j * count * esize, count, dt, j, comms[i], st);
				if (!r) r = l->recv((char*)d + (size_t)j * count * esize, count, dt, j, comms[i], st);
			}
			break;
		default: r = 4;
		}
		if (r) { l->groupEnd(); return r; }
	}
	return l->groupEnd();
}
*/
import "C"

import (
	"fmt"
	"os"
	"unsafe"

	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// ncclBackend runs the sweep through a real NCCL shared library, for the
// side-by-side ratio.
type ncclBackend struct {
	lib     *C.ncclLib
	comms   []C.ncclComm_t
	version int
}

// openNCCL loads lib (a path or a soname) and initialises one communicator
// per entry of devices; a device may repeat (NCCL 2.30+ needs
// NCCL_MULTI_RANK_GPU_ENABLE=1 for that, which is set here).
func openNCCL(lib string, devices []int) (*ncclBackend, error) {
	if err := os.Setenv("NCCL_MULTI_RANK_GPU_ENABLE", "1"); err != nil {
		return nil, err
	}
	b := &ncclBackend{lib: (*C.ncclLib)(C.calloc(1, C.size_t(unsafe.Sizeof(C.ncclLib{}))))}
	cpath := C.CString(lib)
	defer C.free(unsafe.Pointer(cpath))
	if msg := C.ng_nccl_open(cpath, b.lib); msg != nil {
		C.free(unsafe.Pointer(b.lib))
		return nil, fmt.Errorf("-compare %q: %s", lib, C.GoString(msg))
	}
	var v C.int
	if err := b.check("ncclGetVersion", C.ng_nccl_version(b.lib, &v)); err != nil {
		return nil, err
	}
	b.version = int(v)
	n := len(devices)
	comms := (*C.ncclComm_t)(C.calloc(C.size_t(n), C.size_t(unsafe.Sizeof(C.ncclComm_t(nil)))))
	defer C.free(unsafe.Pointer(comms))
	devs := (*C.int)(C.calloc(C.size_t(n), C.size_t(unsafe.Sizeof(C.int(0)))))
	defer C.free(unsafe.Pointer(devs))
	for i, d := range devices {
		unsafe.Slice(devs, n)[i] = C.int(d)
	}
	if err := b.check("ncclCommInitAll", C.ng_nccl_init_all(b.lib, comms, C.int(n), devs)); err != nil {
		if sharesGPU(devices) && b.version < 23000 {
			return nil, fmt.Errorf("-compare %q: %s refuses ranks that share a GPU (devices %v); NCCL 2.30 or newer allows it with NCCL_MULTI_RANK_GPU_ENABLE=1: %w", lib, b.Name(), devices, err)
		}
		return nil, err
	}
	b.comms = append([]C.ncclComm_t(nil), unsafe.Slice(comms, n)...)
	return b, nil
}

// sharesGPU reports whether a device appears twice.
func sharesGPU(devices []int) bool {
	seen := map[int]bool{}
	for _, d := range devices {
		if seen[d] {
			return true
		}
		seen[d] = true
	}
	return false
}

func (b *ncclBackend) check(op string, r C.int) error {
	if r == 0 {
		return nil
	}
	return fmt.Errorf("%s: NCCL error %d (%s)", op, int(r), C.GoString(C.ng_nccl_err(b.lib, r)))
}

func (b *ncclBackend) Name() string {
	return fmt.Sprintf("NCCL %d.%d.%d", b.version/10000, b.version/100%100, b.version%100)
}

func (b *ncclBackend) Run(c coll, send, recv []cuda.DevicePtr, count int, dt dataType, op redOp, root int, streams []*cuda.Stream) error {
	n := len(b.comms)
	arr := func(vals func(i int) uintptr) *C.uintptr_t {
		p := (*C.uintptr_t)(C.calloc(C.size_t(n), 8))
		for i := range n {
			unsafe.Slice(p, n)[i] = C.uintptr_t(vals(i))
		}
		return p
	}
	s := arr(func(i int) uintptr { return uintptr(send[i]) })
	defer C.free(unsafe.Pointer(s))
	r := arr(func(i int) uintptr { return uintptr(recv[i]) })
	defer C.free(unsafe.Pointer(r))
	st := arr(func(i int) uintptr { return streams[i].Handle() })
	defer C.free(unsafe.Pointer(st))
	comms := (*C.ncclComm_t)(C.calloc(C.size_t(n), C.size_t(unsafe.Sizeof(C.ncclComm_t(nil)))))
	defer C.free(unsafe.Pointer(comms))
	copy(unsafe.Slice(comms, n), b.comms)
	return b.check(c.String(), C.ng_nccl_coll(b.lib, C.int(c), C.int(n), comms, s, r, C.size_t(count), C.int(dt), C.int(op), C.int(root), st, C.size_t(dt.size())))
}

func (b *ncclBackend) Close() error {
	var first error
	for _, c := range b.comms {
		if err := b.check("ncclCommDestroy", C.ng_nccl_destroy(b.lib, c)); err != nil && first == nil {
			first = err
		}
	}
	b.comms = nil
	return first
}
