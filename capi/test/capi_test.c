// capi_test checks ncclgo's libnccl.so.2 through NCCL's C API: every entry
// point rejects bad arguments with ncclInvalidArgument (or says what it
// does not implement with ncclInvalidUsage) and never crashes; an init
// without a usable CUDA driver fails cleanly with a message; with a driver
// (argument "gpu"), one- and two-rank communicators run collectives whose
// results are checked, the two ranks made the way nccl-tests makes them.
//
// Build: cc -I<dir of nccl.h> capi_test.c -L<dir of libnccl.so> -lnccl -ldl
// Run:   capi_test nodriver|gpu
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "nccl.h"

// nccl_device.h (NCCL's device API) declares these; its structs stay
// opaque here.
ncclResult_t ncclDevCommCreate(ncclComm_t comm, const void* reqs, void* outDevComm);
ncclResult_t ncclDevCommDestroy(ncclComm_t comm, const void* devComm);

static int failures; // counted with __atomic builtins: threads() checks from several threads

#define EXPECT(call, want)                                                            \
  do {                                                                                \
    ncclResult_t got_ = (call);                                                       \
    if (got_ != (want)) {                                                             \
      fprintf(stderr, "FAIL %s:%d: %s = %d (%s), want %d (%s); last error: %s\n",     \
              __FILE__, __LINE__, #call, (int)got_, ncclGetErrorString(got_),         \
              (int)(want), ncclGetErrorString(want), ncclGetLastError(NULL));         \
      __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);                                                                     \
    }                                                                                 \
  } while (0)

#define CHECK(cond)                                                                   \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);                 \
      __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);                                                                     \
    }                                                                                 \
  } while (0)

// lastErrorSays checks that ncclGetLastError mentions s.
static void lastErrorSays(const char* s, int line) {
  const char* e = ncclGetLastError(NULL);
  if (e == NULL || strstr(e, s) == NULL) {
    fprintf(stderr, "FAIL line %d: last error %s does not mention %s\n", line, e ? e : "(null)", s);
    __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
  }
}

#define INV ncclInvalidArgument

// nestedGroup opens two nested groups on this thread, makes a bad call in
// them, ends both, and checks that one end more is invalid usage.
static void nestedGroup(void) {
  char buf[8];
  EXPECT(ncclGroupStart(), ncclSuccess);
  EXPECT(ncclGroupStart(), ncclSuccess);
  EXPECT(ncclAllReduce(buf, buf, 1, ncclFloat32, ncclSum, NULL, NULL), INV);
  EXPECT(ncclGroupEnd(), ncclSuccess);
  EXPECT(ncclGroupEnd(), ncclSuccess);
  EXPECT(ncclGroupEnd(), ncclInvalidUsage);
}

static void badArguments(void) {
  const ncclComm_t nul = NULL;
  // A pointer that is no communicator: it must be rejected, not followed.
  const ncclComm_t bogus = (ncclComm_t)(uintptr_t)0x1234;
  ncclComm_t comm = NULL, comms[2];
  ncclUniqueId id, zero;
  int v = 0;
  char buf[64];
  void* p = NULL;
  ncclResult_t r;
  ncclRedOp_t op;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  float scalar = 2;
  int devs[2] = {0, -1};

  memset(&zero, 0, sizeof(zero));
  memset(&id, 0, sizeof(id));

  // Version and strings.
  EXPECT(ncclGetVersion(NULL), INV);
  lastErrorSays("version", __LINE__);
  EXPECT(ncclGetVersion(&v), ncclSuccess);
  CHECK(v == NCCL_VERSION_CODE);
  CHECK(v >= 22800);
  for (int i = 0; i <= ncclNumResults; i++) {
    const char* s = ncclGetErrorString((ncclResult_t)i);
    CHECK(s != NULL && s[0] != 0);
  }
  CHECK(strstr(ncclGetErrorString(ncclInvalidArgument), "invalid argument") != NULL);
  CHECK(strstr(ncclGetErrorString((ncclResult_t)-3), "unknown") != NULL);

  // Ids and inits.
  EXPECT(ncclGetUniqueId(NULL), INV);
  EXPECT(ncclCommInitRank(NULL, 1, zero, 0), INV);
  EXPECT(ncclCommInitRank(&comm, 0, zero, 0), INV);
  EXPECT(ncclCommInitRank(&comm, 2, zero, -1), INV);
  lastErrorSays("rank", __LINE__);
  EXPECT(ncclCommInitRank(&comm, 2, zero, 2), INV);
  EXPECT(ncclCommInitRank(&comm, 1, zero, 0), INV); // not an id
  CHECK(comm == NULL);
  EXPECT(ncclCommInitRankConfig(NULL, 1, zero, 0, &cfg), INV);
  EXPECT(ncclGetUniqueId(&id), ncclSuccess);
  cfg.magic = 0;
  EXPECT(ncclCommInitRankConfig(&comm, 1, id, 0, &cfg), INV);
  lastErrorSays("magic", __LINE__);
  cfg.magic = 0xcafebeef;
  cfg.blocking = 7;
  EXPECT(ncclCommInitRankConfig(&comm, 1, id, 0, &cfg), INV);
  cfg.blocking = NCCL_CONFIG_UNDEF_INT;
  cfg.minCTAs = 0;
  EXPECT(ncclCommInitRankConfig(&comm, 1, id, 0, &cfg), INV);
  cfg.minCTAs = 8;
  cfg.maxCTAs = 4;
  EXPECT(ncclCommInitRankConfig(&comm, 1, id, 0, &cfg), INV);
  cfg.minCTAs = cfg.maxCTAs = NCCL_CONFIG_UNDEF_INT;
  cfg.size = 4;
  EXPECT(ncclCommInitRankConfig(&comm, 1, id, 0, &cfg), INV);
  cfg.size = sizeof(cfg);
  EXPECT(ncclCommInitRankScalable(&comm, 1, 0, 1, NULL, &cfg), INV);
  EXPECT(ncclCommInitRankScalable(&comm, 2, 0, 0, &id, &cfg), INV);
  EXPECT(ncclCommInitRankScalable(&comm, 2, 0, 3, &id, &cfg), INV);
  EXPECT(ncclCommInitAll(NULL, 1, NULL), INV);
  EXPECT(ncclCommInitAll(comms, 0, NULL), INV);
  EXPECT(ncclCommInitAll(comms, 2, devs), INV);
  lastErrorSays("devlist[1]", __LINE__);
  // A count no process has ranks for is refused before it sizes anything
  // (nothing is read from devlist or written to comms).
  EXPECT(ncclCommInitAll(comms, INT_MAX, devs), INV);
  lastErrorSays("ndev", __LINE__);
  EXPECT(ncclCommInitAll(comms, INT_MAX, NULL), INV);
  EXPECT(ncclCommInitRank(&comm, INT_MAX, id, 0), INV);
  lastErrorSays("nranks", __LINE__);

  // Communicator management and queries.
  EXPECT(ncclCommDestroy(nul), ncclSuccess);
  EXPECT(ncclCommAbort(nul), ncclSuccess);
  EXPECT(ncclCommDestroy(bogus), INV);
  EXPECT(ncclCommAbort(bogus), INV);
  EXPECT(ncclCommFinalize(nul), INV);
  EXPECT(ncclCommFinalize(bogus), INV);
  EXPECT(ncclCommGetAsyncError(nul, &r), INV);
  EXPECT(ncclCommGetAsyncError(bogus, &r), INV);
  EXPECT(ncclCommCount(nul, &v), INV);
  EXPECT(ncclCommCuDevice(nul, &v), INV);
  EXPECT(ncclCommUserRank(bogus, &v), INV);
  EXPECT(ncclCommSplit(nul, 0, 0, &comm, NULL), INV);
  EXPECT(ncclCommShrink(nul, NULL, 0, &comm, NULL, NCCL_SHRINK_DEFAULT), INV);
  EXPECT(ncclCommRevoke(nul, NCCL_REVOKE_DEFAULT), INV);
  EXPECT(ncclCommRegister(nul, buf, sizeof(buf), &p), INV);
  EXPECT(ncclCommDeregister(nul, p), INV);
  EXPECT(ncclCommWindowRegister(nul, buf, sizeof(buf), (ncclWindow_t*)&p, NCCL_WIN_DEFAULT), INV);
  EXPECT(ncclCommWindowDeregister(nul, NULL), INV);
  EXPECT(ncclRedOpCreatePreMulSum(NULL, &scalar, ncclFloat32, ncclScalarHostImmediate, nul), INV);
  EXPECT(ncclRedOpCreatePreMulSum(&op, NULL, ncclFloat32, ncclScalarHostImmediate, nul), INV);
  EXPECT(ncclRedOpCreatePreMulSum(&op, &scalar, (ncclDataType_t)12, ncclScalarHostImmediate, nul), INV);
  EXPECT(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat32, ncclScalarHostImmediate, nul), INV);
  EXPECT(ncclRedOpDestroy(ncclSum, nul), INV);

  // Collectives: NULL and bogus communicators, bad types and counts.
  EXPECT(ncclAllReduce(buf, buf, 1, ncclFloat32, ncclSum, nul, NULL), INV);
  EXPECT(ncclAllReduce(buf, buf, 1, ncclFloat32, ncclSum, bogus, NULL), INV);
  EXPECT(ncclAllReduce(buf, buf, 1, (ncclDataType_t)12, ncclSum, nul, NULL), INV);
  lastErrorSays("datatype", __LINE__);
  EXPECT(ncclAllReduce(buf, buf, 1, (ncclDataType_t)-1, ncclSum, nul, NULL), INV);
  EXPECT(ncclAllReduce(buf, buf, SIZE_MAX, ncclFloat32, ncclSum, nul, NULL), INV);
  lastErrorSays("count", __LINE__);
  EXPECT(ncclReduce(buf, buf, 1, ncclFloat32, ncclSum, -1, nul, NULL), INV);
  EXPECT(ncclReduceScatter(buf, buf, 1, ncclFloat32, ncclMax, nul, NULL), INV);
  EXPECT(ncclAllGather(buf, buf, 1, ncclInt8, nul, NULL), INV);
  EXPECT(ncclBroadcast(buf, buf, 1, ncclInt8, 0, nul, NULL), INV);
  EXPECT(ncclBcast(buf, 1, ncclInt8, 0, bogus, NULL), INV);
  EXPECT(ncclAlltoAll(buf, buf, 1, ncclBfloat16, nul, NULL), INV);
  EXPECT(ncclGather(buf, buf, 1, ncclFloat8e4m3, 0, nul, NULL), INV);
  EXPECT(ncclScatter(buf, buf, 1, ncclFloat8e5m2, 0, nul, NULL), INV);
  EXPECT(ncclSend(buf, 1, ncclUint64, 0, nul, NULL), INV);
  EXPECT(ncclRecv(buf, 1, ncclUint64, 0, nul, NULL), INV);
  EXPECT(ncclSend(buf, SIZE_MAX, ncclUint64, 0, nul, NULL), INV);

  // Memory.
  EXPECT(ncclMemAlloc(NULL, 8), INV);
  EXPECT(ncclMemAlloc(&p, 0), INV);
  EXPECT(ncclMemFree(NULL), ncclSuccess);
  EXPECT(ncclMemFree(buf), INV);

  // Device API.
  EXPECT(ncclDevCommCreate(nul, NULL, NULL), INV);
  EXPECT(ncclDevCommDestroy(bogus, NULL), INV);

  // Groups: nesting per thread; an unmatched end is invalid usage.
  EXPECT(ncclGroupEnd(), ncclInvalidUsage);
  nestedGroup();
  EXPECT(ncclGroupSimulateEnd(NULL), INV);

  // The profiling names reach the same code.
  EXPECT(pncclGetVersion(NULL), INV);
  EXPECT(pncclAllReduce(buf, buf, 1, ncclFloat32, ncclSum, nul, NULL), INV);
}

// threadGroups is one of several threads that open, nest and end groups
// at once: each thread's groups are its own, and bad calls inside them
// fail on their own thread only.
static void* threadGroups(void* arg) {
  (void)arg;
  for (int i = 0; i < 200; i++) {
    nestedGroup();
    CHECK(ncclGetLastError(NULL) != NULL);
  }
  return NULL;
}

enum { NTHREADS = 8 };

static void threads(void) {
  pthread_t t[NTHREADS];
  for (int i = 0; i < NTHREADS; i++) CHECK(pthread_create(&t[i], NULL, threadGroups, NULL) == 0);
  for (int i = 0; i < NTHREADS; i++) CHECK(pthread_join(t[i], NULL) == 0);
}

// noDriver: with no usable driver, inits fail cleanly with a message.
static void noDriver(void) {
  ncclUniqueId id;
  ncclComm_t comm = (ncclComm_t)(uintptr_t)1, comms[1];
  void* p = NULL;
  EXPECT(ncclGetUniqueId(&id), ncclSuccess);
  EXPECT(ncclCommInitRank(&comm, 1, id, 0), ncclUnhandledCudaError);
  CHECK(comm == NULL);
  lastErrorSays("CUDA driver", __LINE__);
  EXPECT(ncclCommInitAll(comms, 1, NULL), ncclUnhandledCudaError);
  lastErrorSays("CUDA driver", __LINE__);
  EXPECT(ncclMemAlloc(&p, 64), ncclUnhandledCudaError);
  CHECK(p == NULL);
  // Inside a group the init fails at the group's end... or at the call,
  // since the device is read at the call.
  EXPECT(ncclGroupStart(), ncclSuccess);
  ncclResult_t r = ncclCommInitRank(&comm, 1, id, 0);
  CHECK(r == ncclUnhandledCudaError);
  EXPECT(ncclGroupEnd(), ncclSuccess);
}

// The few driver calls the GPU checks need, through dlopen (no CUDA
// headers or cudart at build time).
typedef int CUresult;
typedef void* CUcontext;
typedef void* CUstream;
static struct {
  CUresult (*init)(unsigned);
  CUresult (*deviceGetCount)(int*);
  CUresult (*primaryCtxRetain)(CUcontext*, int);
  CUresult (*ctxSetCurrent)(CUcontext);
  CUresult (*ctxGetCurrent)(CUcontext*);
  CUresult (*streamCreate)(CUstream*, unsigned);
  CUresult (*streamSynchronize)(CUstream);
  CUresult (*memcpyHtoD)(unsigned long long, const void*, size_t);
  CUresult (*memcpyDtoH)(void*, unsigned long long, size_t);
  CUresult (*pointerGetAttribute)(void*, int, unsigned long long);
} cu;

static int loadDriver(void) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) return 0;
#define SYM(f, name) *(void**)(&cu.f) = dlsym(lib, name); if (cu.f == NULL) return 0;
  SYM(init, "cuInit") SYM(deviceGetCount, "cuDeviceGetCount")
  SYM(primaryCtxRetain, "cuDevicePrimaryCtxRetain") SYM(ctxSetCurrent, "cuCtxSetCurrent")
  SYM(ctxGetCurrent, "cuCtxGetCurrent") SYM(streamCreate, "cuStreamCreate")
  SYM(streamSynchronize, "cuStreamSynchronize") SYM(memcpyHtoD, "cuMemcpyHtoD_v2")
  SYM(memcpyDtoH, "cuMemcpyDtoH_v2") SYM(pointerGetAttribute, "cuPointerGetAttribute")
#undef SYM
  return cu.init(0) == 0;
}

#define CU(call)                                                          \
  do {                                                                    \
    CUresult r_ = (call);                                                 \
    if (r_ != 0) {                                                        \
      fprintf(stderr, "FAIL %s:%d: %s = %d\n", __FILE__, __LINE__, #call, r_); \
      __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);                                                         \
      return;                                                             \
    }                                                                     \
  } while (0)

enum { N = 1 << 16 };
static float host[N];

// fill sets n floats at device address p to v.
static void fill(void* p, float v) {
  for (int i = 0; i < N; i++) host[i] = v;
  CU(cu.memcpyHtoD((unsigned long long)(uintptr_t)p, host, sizeof(host)));
}

// expectAll checks that the n floats at p are all v.
static void expectAll(void* p, float v, int line) {
  CU(cu.memcpyDtoH(host, (unsigned long long)(uintptr_t)p, sizeof(host)));
  for (int i = 0; i < N; i++) {
    if (host[i] != v) {
      fprintf(stderr, "FAIL line %d: element %d = %g, want %g\n", line, i, host[i], v);
      __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
      return;
    }
  }
}

// memoryChecks: p, from ncclMemAlloc, is exportable VMM memory (as
// NCCL's, so that it can be shared with other processes); registration
// and windows check their buffer and refuse a second deregister;
// ncclMemFree takes only what ncclMemAlloc returned.
static void memoryChecks(ncclComm_t comm, void* p) {
  unsigned long long types = 0;
  void *h1 = NULL, *h2 = (void*)1;
  ncclWindow_t w = NULL;
  ncclResult_t r;
  CU(cu.pointerGetAttribute(&types, 14 /* CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES */,
                            (unsigned long long)(uintptr_t)p));
  CHECK(types & 1); // CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
  EXPECT(ncclCommRegister(comm, p, sizeof(host), &h1), ncclSuccess);
  CHECK(h1 != NULL);
  EXPECT(ncclCommRegister(comm, (char*)p + 64, 64, &h2), ncclSuccess);
  EXPECT(ncclCommDeregister(comm, h2), ncclSuccess);
  EXPECT(ncclCommRegister(comm, p, (size_t)1 << 40, &h2), INV); // runs past the memory
  lastErrorSays("buff=", __LINE__);
  CHECK(h2 == NULL);
  // Plain host memory: unknown to CUDA, or (with HMM) host memory, which
  // NCCL leaves unregistered.
  h2 = (void*)1;
  r = ncclCommRegister(comm, host, 64, &h2);
  CHECK(r == INV || (r == ncclSuccess && h2 == NULL));
  EXPECT(ncclCommWindowRegister(comm, p, sizeof(host), &w, NCCL_WIN_COLL_SYMMETRIC), ncclSuccess);
  CHECK(w != NULL);
  EXPECT(ncclCommDeregister(comm, h1), ncclSuccess);
  EXPECT(ncclCommDeregister(comm, h1), ncclInvalidUsage);
  lastErrorSays("deregistered already", __LINE__);
  EXPECT(ncclCommWindowDeregister(comm, w), ncclSuccess);
  EXPECT(ncclMemFree((char*)p + 8), INV);
  lastErrorSays("inside the allocation", __LINE__);
}

// gpuOneRank: one rank on the legacy default stream, a nonblocking init,
// and teardown.
static void gpuOneRank(void) {
  ncclUniqueId id;
  ncclComm_t comm = NULL;
  void* p = NULL;
  int v = -1;
  ncclResult_t r;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  CUcontext ctx0;
  // As cudaSetDevice(0) would: device 0's primary context is current, so
  // this test's own copies below run in it.
  CU(cu.primaryCtxRetain(&ctx0, 0));
  CU(cu.ctxSetCurrent(ctx0));
  EXPECT(ncclGetUniqueId(&id), ncclSuccess);
  EXPECT(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
  if (comm == NULL) return;
  EXPECT(ncclCommCount(comm, &v), ncclSuccess);
  CHECK(v == 1);
  EXPECT(ncclCommUserRank(comm, &v), ncclSuccess);
  CHECK(v == 0);
  EXPECT(ncclMemAlloc(&p, sizeof(host)), ncclSuccess);
  memoryChecks(comm, p);
  fill(p, 3);
  EXPECT(ncclAllReduce(p, p, N, ncclFloat32, ncclSum, comm, NULL), ncclSuccess);
  EXPECT(ncclAllReduce(p, p, 1, (ncclDataType_t)12, ncclSum, comm, NULL), INV);
  EXPECT(ncclAllReduce(p, p, 1, ncclFloat32, (ncclRedOp_t)77, comm, NULL), INV);
  EXPECT(ncclReduce(p, p, 1, ncclFloat32, ncclSum, 1, comm, NULL), INV);
  EXPECT(ncclAllReduce(NULL, p, 1, ncclFloat32, ncclSum, comm, NULL), INV);
  EXPECT(ncclCommFinalize(comm), ncclSuccess);
  expectAll(p, 3, __LINE__);
  EXPECT(ncclAllReduce(p, p, N, ncclFloat32, ncclSum, comm, NULL), ncclInvalidUsage); // finalized
  EXPECT(ncclCommFinalize(comm), INV);                                               // twice
  EXPECT(ncclCommGetAsyncError(comm, &r), ncclSuccess);
  CHECK(r == ncclSuccess);
  EXPECT(ncclMemFree(p), ncclSuccess);
  EXPECT(ncclCommDestroy(comm), ncclSuccess);
  EXPECT(ncclCommDestroy(comm), INV); // destroyed: no longer a communicator

  cfg.blocking = 0;
  EXPECT(ncclGetUniqueId(&id), ncclSuccess);
  r = ncclCommInitRankConfig(&comm, 1, id, 0, &cfg);
  CHECK(r == ncclInProgress || r == ncclSuccess);
  do {
    EXPECT(ncclCommGetAsyncError(comm, &r), ncclSuccess);
  } while (r == ncclInProgress);
  CHECK(r == ncclSuccess);
  EXPECT(ncclCommFinalize(comm), ncclInProgress); // nonblocking: in the background
  do {
    EXPECT(ncclCommGetAsyncError(comm, &r), ncclSuccess);
  } while (r == ncclInProgress);
  CHECK(r == ncclSuccess);
  EXPECT(ncclCommDestroy(comm), ncclSuccess);
}

// gpuSplitShrink: ncclCommSplit in a group (keys reversing the ranks, then
// NCCL_SPLIT_NOCOLOR on rank 1) and ncclCommShrink of rank 1 by rank 0
// alone, each child running an all-reduce of the send buffers (rank r holds
// r + 1).
static void gpuSplitShrink(ncclComm_t comms[2], CUstream st[2], void* send[2], void* recv[2]) {
  ncclComm_t kids[2] = {NULL, NULL}, one = NULL;
  int v = -1;
  EXPECT(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < 2; r++) EXPECT(ncclCommSplit(comms[r], 7, 1 - r, &kids[r], NULL), ncclSuccess);
  EXPECT(ncclGroupEnd(), ncclSuccess);
  if (kids[0] == NULL || kids[1] == NULL) return;
  for (int r = 0; r < 2; r++) {
    EXPECT(ncclCommUserRank(kids[r], &v), ncclSuccess);
    CHECK(v == 1 - r);
    EXPECT(ncclCommCount(kids[r], &v), ncclSuccess);
    CHECK(v == 2);
  }
  EXPECT(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < 2; r++)
    EXPECT(ncclAllReduce(send[r], recv[r], N, ncclFloat32, ncclSum, kids[r], st[r]), ncclSuccess);
  EXPECT(ncclGroupEnd(), ncclSuccess);
  for (int r = 0; r < 2; r++) {
    CU(cu.streamSynchronize(st[r]));
    expectAll(recv[r], 3, __LINE__);
    EXPECT(ncclCommDestroy(kids[r]), ncclSuccess);
  }
  EXPECT(ncclGroupStart(), ncclSuccess);
  EXPECT(ncclCommSplit(comms[0], 0, 0, &kids[0], NULL), ncclSuccess);
  EXPECT(ncclCommSplit(comms[1], NCCL_SPLIT_NOCOLOR, 0, &kids[1], NULL), ncclSuccess);
  EXPECT(ncclGroupEnd(), ncclSuccess);
  CHECK(kids[1] == NULL);
  if (kids[0] == NULL) return;
  EXPECT(ncclCommCount(kids[0], &v), ncclSuccess);
  CHECK(v == 1);
  EXPECT(ncclCommDestroy(kids[0]), ncclSuccess);
  int excl[1] = {1};
  EXPECT(ncclCommShrink(comms[0], excl, 1, &one, NULL, 2), INV);
  lastErrorSays("shrinkFlags", __LINE__);
  // A count beyond the parent's size is refused before the list is read.
  EXPECT(ncclCommShrink(comms[0], excl, INT_MAX, &one, NULL, NCCL_SHRINK_DEFAULT), INV);
  lastErrorSays("excludeRanksCount", __LINE__);
  CHECK(one == NULL);
  EXPECT(ncclCommShrink(comms[0], excl, 1, &one, NULL, NCCL_SHRINK_DEFAULT), ncclSuccess);
  if (one == NULL) return;
  EXPECT(ncclCommCount(one, &v), ncclSuccess);
  CHECK(v == 1);
  EXPECT(ncclAllReduce(send[0], recv[0], N, ncclFloat32, ncclSum, one, st[0]), ncclSuccess);
  CU(cu.streamSynchronize(st[0]));
  expectAll(recv[0], 1, __LINE__);
  EXPECT(ncclCommDestroy(one), ncclSuccess);
}

// gpuTwoRanks: nccl-tests' way: one thread creates two ranks in a group,
// switching the current device between the calls, then runs grouped
// collectives on a stream per rank (devices 0 and 1, or both on device 0).
static void gpuTwoRanks(int nDev) {
  ncclUniqueId id;
  ncclComm_t comms[2] = {NULL, NULL};
  CUcontext ctx[2], cur = NULL;
  CUstream st[2];
  void *send[2], *recv[2];
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  ncclRedOp_t op[2];
  float half = 0.5f;
  int dev[2] = {0, nDev > 1 ? 1 : 0}, v = -1;

  for (int r = 0; r < 2; r++) CU(cu.primaryCtxRetain(&ctx[r], dev[r]));
  EXPECT(ncclGetUniqueId(&id), ncclSuccess);
  EXPECT(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < 2; r++) {
    CU(cu.ctxSetCurrent(ctx[r]));
    EXPECT(ncclCommInitRankConfig(&comms[r], 2, id, r, &cfg), ncclSuccess);
  }
  EXPECT(ncclGroupEnd(), ncclSuccess);
  CU(cu.ctxGetCurrent(&cur));
  CHECK(cur == ctx[1]); // ncclgo leaves the thread's current context alone
  if (comms[0] == NULL || comms[1] == NULL) return;
  for (int r = 0; r < 2; r++) {
    EXPECT(ncclCommCuDevice(comms[r], &v), ncclSuccess);
    CHECK(v == dev[r]);
    CU(cu.ctxSetCurrent(ctx[r]));
    CU(cu.streamCreate(&st[r], 1));
    EXPECT(ncclMemAlloc(&send[r], sizeof(host)), ncclSuccess);
    EXPECT(ncclMemAlloc(&recv[r], sizeof(host)), ncclSuccess);
    fill(send[r], (float)(r + 1));
  }
  // All-reduce: 1 + 2.
  EXPECT(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < 2; r++)
    EXPECT(ncclAllReduce(send[r], recv[r], N, ncclFloat32, ncclSum, comms[r], st[r]), ncclSuccess);
  EXPECT(ncclGroupEnd(), ncclSuccess);
  for (int r = 0; r < 2; r++) {
    CU(cu.streamSynchronize(st[r]));
    expectAll(recv[r], 3, __LINE__);
  }
  // PreMulSum with a host scalar, made and destroyed inside the group as
  // nccl-tests does: (1 + 2) * 0.5.
  EXPECT(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < 2; r++) {
    EXPECT(ncclRedOpCreatePreMulSum(&op[r], &half, ncclFloat32, ncclScalarHostImmediate, comms[r]), ncclSuccess);
    EXPECT(ncclAllReduce(send[r], recv[r], N, ncclFloat32, op[r], comms[r], st[r]), ncclSuccess);
    EXPECT(ncclRedOpDestroy(op[r], comms[r]), ncclSuccess);
  }
  EXPECT(ncclGroupEnd(), ncclSuccess);
  for (int r = 0; r < 2; r++) {
    CU(cu.streamSynchronize(st[r]));
    expectAll(recv[r], 1.5f, __LINE__);
  }
  // Send/receive: each rank gets the other's data.
  EXPECT(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < 2; r++) {
    EXPECT(ncclSend(send[r], N, ncclFloat32, 1 - r, comms[r], st[r]), ncclSuccess);
    EXPECT(ncclRecv(recv[r], N, ncclFloat32, 1 - r, comms[r], st[r]), ncclSuccess);
  }
  EXPECT(ncclGroupEnd(), ncclSuccess);
  for (int r = 0; r < 2; r++) {
    CU(cu.streamSynchronize(st[r]));
    expectAll(recv[r], (float)(2 - r), __LINE__);
  }
  gpuSplitShrink(comms, st, send, recv);
  for (int r = 0; r < 2; r++) {
    EXPECT(ncclMemFree(send[r]), ncclSuccess);
    EXPECT(ncclMemFree(recv[r]), ncclSuccess);
    EXPECT(ncclCommDestroy(comms[r]), ncclSuccess);
  }
}

static void gpu(void) {
  int n = 0;
  if (!loadDriver() || cu.deviceGetCount(&n) != 0 || n < 1) {
    fprintf(stderr, "FAIL: gpu mode without a usable driver\n");
    __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
    return;
  }
  gpuOneRank();
  gpuTwoRanks(n);
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "nodriver";
  badArguments();
  threads();
  if (strcmp(mode, "gpu") == 0) {
    gpu();
  } else {
    noDriver();
  }
  if (failures) {
    fprintf(stderr, "%d failures\n", failures);
    return 1;
  }
  printf("capi_test %s: all checks passed\n", mode);
  return 0;
}
