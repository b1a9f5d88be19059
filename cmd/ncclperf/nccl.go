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
typedef ncclResult_t (*pGetUniqueId)(ncclUniqueId*);
typedef ncclResult_t (*pCommInitRank)(ncclComm_t*, int, ncclUniqueId, int);
typedef ncclResult_t (*pCommDestroy)(ncclComm_t);
typedef ncclResult_t (*pCommGetAsyncError)(ncclComm_t, ncclResult_t*);
typedef ncclResult_t (*pGroup)(void);
typedef ncclResult_t (*pAllReduce)(const void*, void*, size_t, int, int, ncclComm_t, void*);
typedef ncclResult_t (*pAllGather)(const void*, void*, size_t, int, ncclComm_t, void*);
typedef ncclResult_t (*pReduceScatter)(const void*, void*, size_t, int, int, ncclComm_t, void*);
typedef ncclResult_t (*pBroadcast)(const void*, void*, size_t, int, int, ncclComm_t, void*);
typedef ncclResult_t (*pReduce)(const void*, void*, size_t, int, int, int, ncclComm_t, void*);
typedef ncclResult_t (*pSend)(const void*, size_t, int, int, ncclComm_t, void*);
typedef ncclResult_t (*pRecv)(void*, size_t, int, int, ncclComm_t, void*);
typedef ncclResult_t (*pAlltoAll)(const void*, void*, size_t, int, ncclComm_t, void*);
typedef ncclResult_t (*pCommInt)(ncclComm_t, int*);
typedef ncclResult_t (*pMemAlloc)(void**, size_t);
typedef ncclResult_t (*pMemFree)(void*);
typedef int (*pCtxSetCurrent)(void*);

typedef struct {
	void* h;
	pGetVersion getVersion;
	pGetErrorString errorString;
	pCommInitAll commInitAll;
	pGetUniqueId getUniqueId;
	pCommInitRank commInitRank;
	pCommDestroy commDestroy, commAbort;
	pCommGetAsyncError commGetAsyncError;
	pGroup groupStart, groupEnd;
	pAllReduce allReduce;
	pAllGather allGather;
	pReduceScatter reduceScatter;
	pBroadcast broadcast;
	pReduce reduce;
	pSend send;
	pRecv recv;
	pAlltoAll alltoall;          // NULL before NCCL 2.28
	pCommInt commUserRank, commCount;
	pMemAlloc memAlloc; // NULL before NCCL 2.19
	pMemFree memFree;
	pCtxSetCurrent ctxSetCurrent; // the driver's cuCtxSetCurrent
} ncclLib;

static const char* ng_nccl_open(const char* path, ncclLib* l) {
	l->h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!l->h) return dlerror();
#define SYM(field, type, name) l->field = (type)dlsym(l->h, name); if (!l->field) return "missing symbol " name;
	SYM(getVersion, pGetVersion, "ncclGetVersion")
	SYM(errorString, pGetErrorString, "ncclGetErrorString")
	SYM(commInitAll, pCommInitAll, "ncclCommInitAll")
	SYM(getUniqueId, pGetUniqueId, "ncclGetUniqueId")
	SYM(commInitRank, pCommInitRank, "ncclCommInitRank")
	SYM(commDestroy, pCommDestroy, "ncclCommDestroy")
	SYM(commAbort, pCommDestroy, "ncclCommAbort")
	SYM(commGetAsyncError, pCommGetAsyncError, "ncclCommGetAsyncError")
	SYM(groupStart, pGroup, "ncclGroupStart")
	SYM(groupEnd, pGroup, "ncclGroupEnd")
	SYM(allReduce, pAllReduce, "ncclAllReduce")
	SYM(allGather, pAllGather, "ncclAllGather")
	SYM(reduceScatter, pReduceScatter, "ncclReduceScatter")
	SYM(broadcast, pBroadcast, "ncclBroadcast")
	SYM(reduce, pReduce, "ncclReduce")
	SYM(send, pSend, "ncclSend")
	SYM(recv, pRecv, "ncclRecv")
	SYM(commUserRank, pCommInt, "ncclCommUserRank")
	SYM(commCount, pCommInt, "ncclCommCount")
#undef SYM
	l->alltoall = (pAlltoAll)dlsym(l->h, "ncclAlltoAll");
	l->memAlloc = (pMemAlloc)dlsym(l->h, "ncclMemAlloc");
	l->memFree = (pMemFree)dlsym(l->h, "ncclMemFree");
	if (!l->memAlloc || !l->memFree) l->memAlloc = 0, l->memFree = 0;
	void* cu = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!cu) return dlerror();
	l->ctxSetCurrent = (pCtxSetCurrent)dlsym(cu, "cuCtxSetCurrent");
	if (!l->ctxSetCurrent) return "libcuda.so.1 lacks cuCtxSetCurrent";
	return 0;
}
// ng_nccl_set_ctx makes ctx current on the calling thread: what
// cudaSetDevice does for the device whose primary context ctx is.
static int ng_nccl_set_ctx(ncclLib* l, uintptr_t ctx) { return l->ctxSetCurrent((void*)ctx); }
static int ng_nccl_mem_alloc(ncclLib* l, uintptr_t* p, size_t n) {
	void* q = 0;
	int r = l->memAlloc(&q, n);
	*p = (uintptr_t)q;
	return r;
}
static int ng_nccl_mem_free(ncclLib* l, uintptr_t p) { return l->memFree((void*)p); }
static int ng_nccl_version(ncclLib* l, int* v) { return l->getVersion(v); }
static const char* ng_nccl_err(ncclLib* l, int r) { return l->errorString(r); }
static int ng_nccl_init_all(ncclLib* l, ncclComm_t* comms, int n, const int* devs) { return l->commInitAll(comms, n, devs); }
static int ng_nccl_destroy(ncclLib* l, ncclComm_t c) { return l->commDestroy(c); }
static int ng_nccl_abort(ncclLib* l, ncclComm_t c) { return l->commAbort(c); }
// ng_nccl_async_error is ncclCommGetAsyncError's failure, else the
// communicator's asynchronous error (0: none).
static int ng_nccl_async_error(ncclLib* l, ncclComm_t c) {
	ncclResult_t async = 0;
	int r = l->commGetAsyncError(c, &async);
	return r ? r : async;
}
static int ng_nccl_unique_id(ncclLib* l, ncclUniqueId* id) { return l->getUniqueId(id); }
static int ng_nccl_init_rank(ncclLib* l, ncclComm_t* comm, int n, const ncclUniqueId* id, int rank) { return l->commInitRank(comm, n, *id, rank); }
static int ng_nccl_group_start(ncclLib* l) { return l->groupStart(); }
static int ng_nccl_group_end(ncclLib* l) { return l->groupEnd(); }

// ng_nccl_coll runs one collective on the process's n ranks as nccl-tests'
// startColl and its RunColl
// functions issue it, call for call: a group around the ranks' calls only
// when there are several; Broadcast asks ncclCommUserRank first; sendrecv
// (coll 5: to the next rank, from the previous) asks ncclCommCount and
// ncclCommUserRank and groups its send and receive; alltoall (coll 6:
// count elements of esize bytes to and from every rank) is ncclAlltoAll
// from NCCL 2.28 (whose symbol the library has), before that ncclCommCount
// and a group of sends and receives.
static int ng_nccl_coll(ncclLib* l, int coll, int n, ncclComm_t* comms, uintptr_t* send, uintptr_t* recv,
                        size_t count, int dt, int op, int root, uintptr_t* streams, size_t esize) {
	int group = n > 1;
	int r = group ? l->groupStart() : 0;
	if (r) return r;
	for (int i = 0; i < n; i++) {
		const void* s = (const void*)send[i]; void* d = (void*)recv[i]; void* st = (void*)streams[i];
		int rank = 0, cnt = 0;
		switch (coll) {
		case 0: r = l->allReduce(s, d, count, dt, op, comms[i], st); break;
		case 1: r = l->allGather(s, d, count, dt, comms[i], st); break;
		case 2: r = l->reduceScatter(s, d, count, dt, op, comms[i], st); break;
		case 3:
			r = l->commUserRank(comms[i], &rank);
			if (!r) r = l->broadcast(s, d, count, dt, root, comms[i], st);
			break;
		case 4: r = l->reduce(s, d, count, dt, op, root, comms[i], st); break;
		case 5:
			r = l->commCount(comms[i], &cnt);
			if (!r) r = l->commUserRank(comms[i], &rank);
			if (!r && (cnt < 1 || rank < 0 || rank >= cnt)) r = 4; // ncclInvalidArgument: no sane ring
			if (!r) r = l->groupStart();
			if (!r) {
				r = l->send(s, count, dt, (rank + 1) % cnt, comms[i], st);
				if (!r) r = l->recv(d, count, dt, (rank - 1 + cnt) % cnt, comms[i], st);
				int e = l->groupEnd();
				if (!r) r = e;
			}
			break;
		case 6:
			if (l->alltoall) { r = l->alltoall(s, d, count, dt, comms[i], st); break; }
			r = l->commCount(comms[i], &cnt);
			if (!r && cnt < 1) r = 4;
			if (!r) r = l->groupStart();
			if (!r) {
				for (int j = 0; j < cnt && !r; j++) {
					r = l->send((const char*)s + (size_t)j * count * esize, count, dt, j, comms[i], st);
					if (!r) r = l->recv((char*)d + (size_t)j * count * esize, count, dt, j, comms[i], st);
				}
				int e = l->groupEnd();
				if (!r) r = e;
			}
			break;
		default: r = 4;
		}
		if (r) { if (group) l->groupEnd(); return r; }
	}
	return group ? l->groupEnd() : 0;
}

// ng_nccl_loop issues iters iterations of ng_nccl_coll back to back from C
// (-ref-loop=c): iteration i shifts every rank's send and receive pointer
// (send0, recv0: iteration 0's) by step * (i % steps) bytes, as the Go loop
// does; send and recv are the n-entry arrays it rewrites per iteration.
static int ng_nccl_loop(ncclLib* l, int coll, int n, ncclComm_t* comms, uintptr_t* send, uintptr_t* recv,
                        const uintptr_t* send0, const uintptr_t* recv0, size_t count, int dt, int op, int root, uintptr_t* streams,
                        size_t esize, int iters, size_t step, size_t steps) {
	for (int it = 0; it < iters; it++) {
		size_t sh = step * ((size_t)it % steps);
		for (int i = 0; i < n; i++) send[i] = send0[i] + sh, recv[i] = recv0[i] + sh;
		int r = ng_nccl_coll(l, coll, n, comms, send, recv, count, dt, op, root, streams, esize);
		if (r) return r;
	}
	return 0;
}
*/
import "C"

import (
	"context"
	"fmt"
	"os"
	"unsafe"

	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// ncclBackend runs the sweep through a real NCCL shared library, for the
// side-by-side ratio, issuing the calls as nccl-tests does: one cgo call
// per iteration that makes every rank's call inside one group, with
// argument arrays allocated once; the first rank's device current (set by
// Begin, not per call); buffers from ncclMemAlloc.
type ncclBackend struct {
	lib     *C.ncclLib
	n       int           // ranks in this process
	rank0   int           // the communicator rank of the first
	nRanks  int           // ranks in the communicator
	comms   *C.ncclComm_t // n communicators
	args    *C.uintptr_t  // each rank's send, receive and stream, then iteration 0's send and receive: 5n
	ctxs    []uintptr     // each rank's primary context
	version int
}

// openNCCL loads lib (a path or a soname) and initialises one communicator
// per entry of devices, in the process's current thread with the first
// rank's device current, configured as nccl-tests configures its own (see
// matchTestsConfig). A device may repeat (NCCL 2.30+ needs
// NCCL_MULTI_RANK_GPU_ENABLE=1 for that, which is then set here).
//
// With ranks in several processes (mp), this process's one rank (ranks[0],
// on devices[mp's rank]) joins with ncclCommInitRank, rank 0's
// ncclGetUniqueId handed to the others over the job's control channel.
func openNCCL(lib string, devices []int, ranks []rankBuffers, mp *mpRank) (*ncclBackend, error) {
	if sharesGPU(devices) {
		if err := os.Setenv("NCCL_MULTI_RANK_GPU_ENABLE", "1"); err != nil {
			return nil, err
		}
	}
	n := len(ranks)
	b := &ncclBackend{lib: (*C.ncclLib)(C.calloc(1, C.size_t(unsafe.Sizeof(C.ncclLib{})))), n: n, nRanks: len(devices)}
	if mp != nil {
		b.rank0 = mp.g.Rank()
	}
	cpath := C.CString(lib)
	defer C.free(unsafe.Pointer(cpath))
	if msg := C.ng_nccl_open(cpath, b.lib); msg != nil {
		C.free(unsafe.Pointer(b.lib))
		return nil, fmt.Errorf("-compare %q: %s (want a path or soname of NCCL's libnccl.so.2)", lib, C.GoString(msg))
	}
	for _, rb := range ranks {
		b.ctxs = append(b.ctxs, rb.ctx.Handle())
	}
	var v C.int
	if err := b.check("ncclGetVersion", C.ng_nccl_version(b.lib, &v)); err != nil {
		return nil, err
	}
	b.version = int(v)
	if err := matchTestsConfig(b.version); err != nil {
		return nil, err
	}
	if err := b.Begin(); err != nil {
		return nil, err
	}
	b.comms = (*C.ncclComm_t)(C.calloc(C.size_t(n), C.size_t(unsafe.Sizeof(C.ncclComm_t(nil)))))
	b.args = (*C.uintptr_t)(C.calloc(C.size_t(5*n), C.size_t(unsafe.Sizeof(C.uintptr_t(0)))))
	if mp != nil {
		if err := b.initRank(mp); err != nil {
			b.freeArrays()
			return nil, err
		}
		return b, nil
	}
	devs := (*C.int)(C.calloc(C.size_t(n), C.size_t(unsafe.Sizeof(C.int(0)))))
	defer C.free(unsafe.Pointer(devs))
	for i, d := range devices {
		unsafe.Slice(devs, n)[i] = C.int(d)
	}
	if err := b.check("ncclCommInitAll", C.ng_nccl_init_all(b.lib, b.comms, C.int(n), devs)); err != nil {
		b.freeArrays()
		if sharesGPU(devices) && b.version < 23000 {
			return nil, fmt.Errorf("-compare %q: %s refuses ranks that share a GPU (devices %v); NCCL 2.30 or newer allows it with NCCL_MULTI_RANK_GPU_ENABLE=1: %w", lib, b.Name(), devices, err)
		}
		return nil, err
	}
	return b, nil
}

// initRank creates this process's rank of the communicator (its device
// current, from Begin): rank 0 gets the unique id, every rank receives it
// over the control channel, then calls ncclCommInitRank, as nccl-tests
// does with MPI_Bcast.
func (b *ncclBackend) initRank(mp *mpRank) error {
	id := (*C.ncclUniqueId)(C.calloc(1, C.size_t(unsafe.Sizeof(C.ncclUniqueId{}))))
	defer C.free(unsafe.Pointer(id))
	raw := unsafe.Slice((*byte)(unsafe.Pointer(id)), unsafe.Sizeof(*id))
	var mine []byte
	if b.rank0 == 0 {
		if err := b.check("ncclGetUniqueId", C.ng_nccl_unique_id(b.lib, id)); err != nil {
			return err
		}
		mine = raw
	}
	all, err := mp.g.AllGather(context.Background(), mine)
	if err != nil {
		return fmt.Errorf("-compare: sharing rank 0's ncclUniqueId: %w", err)
	}
	if len(all[0]) != len(raw) {
		return fmt.Errorf("-compare: rank 0's ncclUniqueId has %d bytes, want %d", len(all[0]), len(raw))
	}
	copy(raw, all[0])
	return b.check("ncclCommInitRank", C.ng_nccl_init_rank(b.lib, b.comms, C.int(b.nRanks), id, C.int(b.rank0)))
}

// centricSchedEnv is NCCL's environment override of ncclConfig_t's
// nvlinkCentricSched.
const centricSchedEnv = "NCCL_NVLINK_UTIL_CENTRIC_SCHED_ENABLE"

// matchTestsConfig gives the communicators of NCCL version (ncclGetVersion's
// code) the one setting in which nccl-tests' ncclCommInitRankConfig differs
// from ncclCommInitAll's default config: from 2.28, nccl-tests sets
// config.nvlinkCentricSched = 1 (the NVLink-utilisation-centric launch
// attribute, which NCCL uses on compute capability 10.0 and later only). The
// environment variable stands for the config field, which ncclCommInitAll
// does not take; one the user set is left alone.
func matchTestsConfig(version int) error {
	if version < 22800 {
		return nil
	}
	if _, ok := os.LookupEnv(centricSchedEnv); ok {
		return nil
	}
	return os.Setenv(centricSchedEnv, "1")
}

func (b *ncclBackend) freeArrays() {
	C.free(unsafe.Pointer(b.comms))
	C.free(unsafe.Pointer(b.args))
	b.comms, b.args = nil, nil
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

// setCtx makes ctx current on the calling thread.
func (b *ncclBackend) setCtx(ctx uintptr) error {
	if r := C.ng_nccl_set_ctx(b.lib, C.uintptr_t(ctx)); r != 0 {
		return fmt.Errorf("cuCtxSetCurrent: CUDA error %d", int(r))
	}
	return nil
}

// Begin makes the first rank's device current, as nccl-tests'
// cudaSetDevice(gpus[0]) before its loops.
func (b *ncclBackend) Begin() error { return b.setCtx(b.ctxs[0]) }

// Alloc allocates with ncclMemAlloc on rank r's device, as nccl-tests does
// (cuMemAlloc before NCCL 2.19, which lacks it).
func (b *ncclBackend) Alloc(r int, ctx *cuda.Context, n uint64) (cuda.DevicePtr, error) {
	if b.lib.memAlloc == nil {
		return ctx.MemAlloc(n)
	}
	if err := b.setCtx(b.ctxs[r]); err != nil {
		return 0, err
	}
	var p C.uintptr_t
	if err := b.check("ncclMemAlloc", C.ng_nccl_mem_alloc(b.lib, &p, C.size_t(n))); err != nil {
		return 0, fmt.Errorf("rank %d, %d bytes: %w", r, n, err)
	}
	return cuda.DevicePtr(p), nil
}

func (b *ncclBackend) Free(r int, ctx *cuda.Context, p cuda.DevicePtr) error {
	if b.lib.memFree == nil {
		return ctx.MemFree(p)
	}
	if err := b.setCtx(b.ctxs[r]); err != nil {
		return err
	}
	return b.check("ncclMemFree", C.ng_nccl_mem_free(b.lib, C.uintptr_t(p)))
}

func (b *ncclBackend) Run(c coll, send, recv []cuda.DevicePtr, count int, dt dataType, op redOp, root int, streams []*cuda.Stream) error {
	return b.Loop(c, send, recv, count, dt, op, root, streams, 1, 0, 1)
}

// Loop issues iters iterations from C in one cgo call (-ref-loop=c), the
// pointers of iteration i those of iteration 0 (send, recv) shifted by
// step * (i % steps) bytes; Run is its one iteration.
func (b *ncclBackend) Loop(c coll, send, recv []cuda.DevicePtr, count int, dt dataType, op redOp, root int, streams []*cuda.Stream, iters int, step, steps int64) error {
	n := b.n
	a := unsafe.Slice(b.args, 5*n)
	for i := range n {
		a[2*n+i] = C.uintptr_t(streams[i].Handle())
		a[3*n+i], a[4*n+i] = C.uintptr_t(send[i]), C.uintptr_t(recv[i])
	}
	return b.check(c.String(), C.ng_nccl_loop(b.lib, C.int(c), C.int(n), b.comms, &a[0], &a[n], &a[3*n], &a[4*n],
		C.size_t(count), C.int(dt), C.int(op), C.int(root), &a[2*n], C.size_t(dt.size()), C.int(iters), C.size_t(step), C.size_t(max(steps, 1))))
}

// AsyncErr reports rank r's asynchronous error (ncclCommGetAsyncError),
// which drain polls while r's stream is busy, as nccl-tests'
// testStreamSynchronize does.
func (b *ncclBackend) AsyncErr(r int) error {
	return b.check("ncclCommGetAsyncError", C.ng_nccl_async_error(b.lib, unsafe.Slice(b.comms, b.n)[r]))
}

// Abort ends the communicators without waiting for their work
// (ncclCommAbort), for a job that lost a rank or hit an asynchronous
// error.
func (b *ncclBackend) Abort() error {
	if b.comms == nil {
		return nil
	}
	var first error
	for _, c := range unsafe.Slice(b.comms, b.n) {
		if err := b.check("ncclCommAbort", C.ng_nccl_abort(b.lib, c)); err != nil && first == nil {
			first = err
		}
	}
	b.freeArrays()
	return first
}

func (b *ncclBackend) Close() error {
	if b.comms == nil {
		return nil
	}
	var first error
	for _, c := range unsafe.Slice(b.comms, b.n) {
		if err := b.check("ncclCommDestroy", C.ng_nccl_destroy(b.lib, c)); err != nil && first == nil {
			first = err
		}
	}
	b.freeArrays()
	return first
}
