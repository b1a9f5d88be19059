// dlopen shim for the CUDA driver API. Every context-bound wrapper makes the
// given context current on the calling OS thread and performs the real call
// within the same C call, so goroutine migration between threads cannot
// separate the two.
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "shim.h"

#define CUAPI

// X(pointer name, symbol, required, return, params)
#define NCU_SYMBOLS(X)                                                                          \
  X(cuInit, "cuInit", 1, (unsigned flags))                                                      \
  X(cuGetErrorName, "cuGetErrorName", 1, (CUresult r, const char** s))                          \
  X(cuGetErrorString, "cuGetErrorString", 1, (CUresult r, const char** s))                      \
  X(cuDriverGetVersion, "cuDriverGetVersion", 1, (int* v))                                      \
  X(cuDeviceGetCount, "cuDeviceGetCount", 1, (int* n))                                          \
  X(cuDeviceGet, "cuDeviceGet", 1, (CUdevice* d, int ordinal))                                  \
  X(cuDeviceGetName, "cuDeviceGetName", 1, (char* buf, int len, CUdevice d))                    \
  X(cuDeviceGetAttribute, "cuDeviceGetAttribute", 1, (int* v, int attr, CUdevice d))            \
  X(cuDeviceTotalMem, "cuDeviceTotalMem_v2", 1, (size_t* v, CUdevice d))                        \
  X(cuDeviceGetPCIBusId, "cuDeviceGetPCIBusId", 1, (char* buf, int len, CUdevice d))            \
  X(cuDeviceGetUuid_v2, "cuDeviceGetUuid_v2", 0, (CUuuid* u, CUdevice d))                       \
  X(cuDeviceGetUuid, "cuDeviceGetUuid", 0, (CUuuid* u, CUdevice d))                             \
  X(cuDeviceCanAccessPeer, "cuDeviceCanAccessPeer", 1, (int* v, CUdevice d, CUdevice p))        \
  X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 1, (CUcontext* c, CUdevice d))        \
  X(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", 1, (CUdevice d))                 \
  X(cuDevicePrimaryCtxGetState, "cuDevicePrimaryCtxGetState", 0,                                \
    (CUdevice d, unsigned* flags, int* active))                                                 \
  X(cuCtxSetCurrent, "cuCtxSetCurrent", 1, (CUcontext c))                                       \
  X(cuCtxGetCurrent, "cuCtxGetCurrent", 1, (CUcontext* c))                                      \
  X(cuCtxGetDevice, "cuCtxGetDevice", 1, (CUdevice* d))                                         \
  X(cuCtxSynchronize, "cuCtxSynchronize", 1, (void))                                            \
  X(cuCtxCreate, "cuCtxCreate_v2", 0, (CUcontext* c, unsigned flags, CUdevice d))              \
  X(cuCtxDestroy, "cuCtxDestroy_v2", 0, (CUcontext c))                                          \
  X(cuCtxEnablePeerAccess, "cuCtxEnablePeerAccess", 1, (CUcontext peer, unsigned flags))        \
  X(cuCtxGetExecAffinity, "cuCtxGetExecAffinity", 0, (CUexecAffinityParam* p, int type))       \
  X(cuCtxGetId, "cuCtxGetId", 0, (CUcontext c, unsigned long long* id))                        \
  X(cuMemAlloc, "cuMemAlloc_v2", 1, (CUdeviceptr* p, size_t n))                                 \
  X(cuMemFree, "cuMemFree_v2", 1, (CUdeviceptr p))                                              \
  X(cuMemHostAlloc, "cuMemHostAlloc", 1, (void** p, size_t n, unsigned flags))                  \
  X(cuMemFreeHost, "cuMemFreeHost", 1, (void* p))                                               \
  X(cuMemHostRegister, "cuMemHostRegister_v2", 0, (void* p, size_t n, unsigned flags))          \
  X(cuMemHostUnregister, "cuMemHostUnregister", 0, (void* p))                                   \
  X(cuMemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2", 1,                               \
    (CUdeviceptr* d, void* p, unsigned flags))                                                  \
  X(cuMemcpyHtoD, "cuMemcpyHtoD_v2", 1, (CUdeviceptr dst, const void* src, size_t n))           \
  X(cuMemcpyDtoH, "cuMemcpyDtoH_v2", 1, (void* dst, CUdeviceptr src, size_t n))                 \
  X(cuMemcpyDtoD, "cuMemcpyDtoD_v2", 1, (CUdeviceptr dst, CUdeviceptr src, size_t n))           \
  X(cuMemsetD8, "cuMemsetD8_v2", 1, (CUdeviceptr p, unsigned char v, size_t n))                 \
  X(cuMemGetInfo, "cuMemGetInfo_v2", 1, (size_t* f, size_t* t))                                 \
  X(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", 1,                                               \
    (CUdeviceptr dst, const void* src, size_t n, CUstream s))                                   \
  X(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", 1,                                               \
    (void* dst, CUdeviceptr src, size_t n, CUstream s))                                         \
  X(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", 1,                                               \
    (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s))                                   \
  X(cuMemcpyAsync, "cuMemcpyAsync", 0, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s))  \
  X(cuMemsetD8Async, "cuMemsetD8Async", 1,                                                      \
    (CUdeviceptr p, unsigned char v, size_t n, CUstream s))                                     \
  X(cuMemsetD32Async, "cuMemsetD32Async", 1,                                                    \
    (CUdeviceptr p, unsigned int v, size_t n, CUstream s))                                      \
  X(cuStreamCreate, "cuStreamCreate", 1, (CUstream* s, unsigned flags))                         \
  X(cuStreamDestroy, "cuStreamDestroy_v2", 1, (CUstream s))                                     \
  X(cuStreamSynchronize, "cuStreamSynchronize", 1, (CUstream s))                                \
  X(cuStreamQuery, "cuStreamQuery", 1, (CUstream s))                                            \
  X(cuStreamWaitEvent, "cuStreamWaitEvent", 1, (CUstream s, CUevent e, unsigned flags))         \
  X(cuLaunchKernelEx, "cuLaunchKernelEx", 0,                                                    \
    (const ncu_launch_config* cfg, CUfunction f, void** params, void** extra))                 \
  X(cuLaunchKernel, "cuLaunchKernel", 1,                                                        \
    (CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,             \
     unsigned bz, unsigned smem, CUstream s, void** params, void** extra))                      \
  X(cuEventCreate, "cuEventCreate", 1, (CUevent* e, unsigned flags))                            \
  X(cuEventRecord, "cuEventRecord", 1, (CUevent e, CUstream s))                                 \
  X(cuEventSynchronize, "cuEventSynchronize", 1, (CUevent e))                                   \
  X(cuEventQuery, "cuEventQuery", 1, (CUevent e))                                               \
  X(cuEventDestroy, "cuEventDestroy_v2", 1, (CUevent e))                                        \
  X(cuEventElapsedTime, "cuEventElapsedTime", 1, (float* ms, CUevent a, CUevent b))             \
  X(cuModuleLoadDataEx, "cuModuleLoadDataEx", 1,                                                \
    (CUmodule* m, const void* image, unsigned n, int* opts, void** vals))                       \
  X(cuModuleUnload, "cuModuleUnload", 1, (CUmodule m))                                          \
  X(cuModuleGetFunction, "cuModuleGetFunction", 1, (CUfunction* f, CUmodule m, const char* n))  \
  X(cuModuleGetGlobal, "cuModuleGetGlobal_v2", 1,                                               \
    (CUdeviceptr* p, size_t* n, CUmodule m, const char* name))                                  \
  X(cuFuncGetAttribute, "cuFuncGetAttribute", 1, (int* v, int attr, CUfunction f))              \
  X(cuFuncLoad, "cuFuncLoad", 0, (CUfunction f))                                                \
  X(cuFuncSetAttribute, "cuFuncSetAttribute", 0, (CUfunction f, int attr, int v))               \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor, "cuOccupancyMaxActiveBlocksPerMultiprocessor", \
    1, (int* n, CUfunction f, int block, size_t smem))                                          \
  X(cuIpcGetMemHandle, "cuIpcGetMemHandle", 1, (CUipcMemHandle* h, CUdeviceptr p))              \
  X(cuIpcOpenMemHandle, "cuIpcOpenMemHandle_v2", 1,                                             \
    (CUdeviceptr* p, CUipcMemHandle h, unsigned flags))                                         \
  X(cuIpcCloseMemHandle, "cuIpcCloseMemHandle", 1, (CUdeviceptr p))                             \
  X(cuMemGetAddressRange, "cuMemGetAddressRange_v2", 1,                                        \
    (CUdeviceptr* base, size_t* n, CUdeviceptr p))                                              \
  X(cuStreamIsCapturing, "cuStreamIsCapturing", 0, (CUstream s, int* status))                 \
  X(cuStreamBeginCapture, "cuStreamBeginCapture_v2", 0, (CUstream s, int mode))                 \
  X(cuStreamEndCapture, "cuStreamEndCapture", 0, (CUstream s, CUgraph* g))                      \
  X(cuThreadExchangeStreamCaptureMode, "cuThreadExchangeStreamCaptureMode", 0, (int* mode))     \
  X(cuEventRecordWithFlags, "cuEventRecordWithFlags", 0, (CUevent e, CUstream s, unsigned f))   \
  X(cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags", 0,                              \
    (CUgraphExec* e, CUgraph g, unsigned long long flags))                                      \
  X(cuGraphLaunch, "cuGraphLaunch", 0, (CUgraphExec e, CUstream s))                             \
  X(cuGraphCreate, "cuGraphCreate", 0, (CUgraph * g, unsigned flags))                            \
  X(cuGraphAddKernelNode, "cuGraphAddKernelNode", 0,                                            \
    (CUgraphNode * node, CUgraph g, const CUgraphNode* deps, size_t n,                          \
     const ncu_kernel_node_params* p))                                                          \
  X(cuGraphAddEventWaitNode, "cuGraphAddEventWaitNode", 0,                                      \
    (CUgraphNode * node, CUgraph g, const CUgraphNode* deps, size_t n, CUevent e))              \
  X(cuGraphExecKernelNodeSetParams, "cuGraphExecKernelNodeSetParams", 0,                        \
    (CUgraphExec e, CUgraphNode node, const ncu_kernel_node_params* p))                         \
  X(cuGraphExecDestroy, "cuGraphExecDestroy", 0, (CUgraphExec e))                               \
  X(cuGraphDestroy, "cuGraphDestroy", 0, (CUgraph g))                                           \
  X(cuGraphGetNodes, "cuGraphGetNodes", 0, (CUgraph g, void** nodes, size_t* n))                \
  X(cuStreamGetCaptureInfo_v2, "cuStreamGetCaptureInfo_v2", 0,                                  \
    (CUstream s, int* status, unsigned long long* id, CUgraph* g, const CUgraphNode** deps,     \
     size_t* n))                                                                                \
  X(cuGraphAddEventRecordNode, "cuGraphAddEventRecordNode", 0,                                  \
    (CUgraphNode* node, CUgraph g, const CUgraphNode* deps, size_t n, CUevent e))               \
  X(cuStreamUpdateCaptureDependencies, "cuStreamUpdateCaptureDependencies", 0,                  \
    (CUstream s, CUgraphNode* deps, size_t n, unsigned flags))                                  \
  X(cuGraphNodeGetDependencies, "cuGraphNodeGetDependencies", 0,                                \
    (CUgraphNode node, CUgraphNode* deps, size_t* n))                                           \
  X(cuGraphRemoveDependencies, "cuGraphRemoveDependencies", 0,                                  \
    (CUgraph g, const CUgraphNode* from, const CUgraphNode* to, size_t n))                      \
  X(cuGraphAddDependencies, "cuGraphAddDependencies", 0,                                        \
    (CUgraph g, const CUgraphNode* from, const CUgraphNode* to, size_t n))                      \
  X(cuUserObjectCreate, "cuUserObjectCreate", 0,                                                \
    (CUuserObject* o, void* p, void (*destroy)(void*), unsigned refs, unsigned flags))          \
  X(cuUserObjectRelease, "cuUserObjectRelease", 0, (CUuserObject o, unsigned refs))            \
  X(cuGraphRetainUserObject, "cuGraphRetainUserObject", 0,                                      \
    (CUgraph g, CUuserObject o, unsigned refs, unsigned flags))                                 \
  X(cuMemGetAllocationGranularity, "cuMemGetAllocationGranularity", 0,                          \
    (size_t* g, const CUmemAllocationProp* prop, int option))                                   \
  X(cuMemCreate, "cuMemCreate", 0,                                                              \
    (CUmemGenericAllocationHandle* h, size_t n, const CUmemAllocationProp* prop,                \
     unsigned long long flags))                                                                 \
  X(cuMemAddressReserve, "cuMemAddressReserve", 0,                                              \
    (CUdeviceptr* p, size_t n, size_t align, CUdeviceptr addr, unsigned long long flags))       \
  X(cuMemMap, "cuMemMap", 0,                                                                    \
    (CUdeviceptr p, size_t n, size_t off, CUmemGenericAllocationHandle h,                       \
     unsigned long long flags))                                                                 \
  X(cuMemSetAccess, "cuMemSetAccess", 0,                                                        \
    (CUdeviceptr p, size_t n, const CUmemAccessDesc* desc, size_t count))                       \
  X(cuMemUnmap, "cuMemUnmap", 0, (CUdeviceptr p, size_t n))                                     \
  X(cuMemAddressFree, "cuMemAddressFree", 0, (CUdeviceptr p, size_t n))                         \
  X(cuMemRelease, "cuMemRelease", 0, (CUmemGenericAllocationHandle h))                          \
  X(cuMemExportToShareableHandle, "cuMemExportToShareableHandle", 0,                            \
    (void* out, CUmemGenericAllocationHandle h, int type, unsigned long long flags))            \
  X(cuMemImportFromShareableHandle, "cuMemImportFromShareableHandle", 0,                        \
    (CUmemGenericAllocationHandle* h, void* os, int type))                                      \
  X(cuPointerGetAttribute, "cuPointerGetAttribute", 0, (void* v, int attr, CUdeviceptr p))

#define NCU_DECLARE(name, sym, req, params) static CUresult(CUAPI* p_##name) params;
NCU_SYMBOLS(NCU_DECLARE)
#undef NCU_DECLARE

static void* ncu_lib;

int ncu_loaded(void) { return ncu_lib != NULL; }

// ncu_load opens the driver library (libcuda.so.1 normally) and resolves
// every symbol. It returns 0 on success; otherwise 1 (dlopen failed) or 2 (a
// required symbol is missing) with a message in err. It is called once.
int ncu_load(const char* path, char* err, size_t errlen) {
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    const char* e = dlerror();
    snprintf(err, errlen, "%s", e ? e : "dlopen failed");
    return 1;
  }
#define NCU_RESOLVE(name, sym, req, params)                                                  \
  p_##name = (CUresult(CUAPI*) params)dlsym(lib, sym);                                      \
  if (p_##name == NULL && req) {                                                             \
    snprintf(err, errlen, "%s lacks symbol %s (driver too old?)", path, sym);           \
    dlclose(lib);                                                                            \
    return 2;                                                                                \
  }
  NCU_SYMBOLS(NCU_RESOLVE)
#undef NCU_RESOLVE
  ncu_lib = lib;
  return 0;
}

CUresult ncu_init(void) { return p_cuInit(0); }

CUresult ncu_error_name(CUresult r, const char** s) { return p_cuGetErrorName(r, s); }
CUresult ncu_error_string(CUresult r, const char** s) { return p_cuGetErrorString(r, s); }

/* scope is the calling thread's entry into the library through its C API
   (ncu_scope_enter .. ncu_scope_leave): the context current when the host
   called, and, while known, the one current now. Only the shim changes the
   thread's context inside a scope (the callback's goroutine is locked to
   the host's thread, and the host runs nothing until the call returns), so
   each switch it makes updates cur, and SETCTX trusts cur instead of
   asking the driver; anything that changes the context otherwise
   (cuCtxDestroy pops it) clears known, and SETCTX asks again. */
static __thread struct {
  int scoped, known;
  CUcontext cur;
} scope;

/* SETCTX makes c current on the calling thread unless it already is
   (cuCtxGetCurrent is a thread-local read; cuCtxSetCurrent does more), so
   that a thread issuing call after call in one context pays for the switch
   once, while one whose context something else changed meanwhile (another
   library, cudaSetDevice) still gets c. Inside a scope whose context is
   known it asks nothing. */
#define SETCTX(c)                                                             \
  do {                                                                        \
    CUcontext _cur = NULL;                                                    \
    int _same = scope.known ? scope.cur == (c)                                \
                            : p_cuCtxGetCurrent(&_cur) == NCU_SUCCESS && _cur == (c); \
    if (!_same) {                                                             \
      CUresult _r = p_cuCtxSetCurrent(c);                                     \
      ncu_scope_switched(c, _r);                                              \
      if (_r != NCU_SUCCESS) return _r;                                       \
    }                                                                         \
  } while (0)

int ncu_scope_enter(CUcontext* prev) {
  scope.scoped = scope.known = 0;
  if (p_cuCtxGetCurrent == NULL || p_cuCtxGetCurrent(prev) != NCU_SUCCESS) return 0;
  scope.scoped = scope.known = 1;
  scope.cur = *prev;
  return 1;
}

void ncu_scope_leave(CUcontext prev) {
  if (!scope.scoped) return;
  CUcontext cur = scope.cur;
  int known = scope.known || p_cuCtxGetCurrent(&cur) == NCU_SUCCESS;
  scope.scoped = scope.known = 0;
  if (known && cur != prev) p_cuCtxSetCurrent(prev);
}

void ncu_scope_switched(CUcontext c, CUresult r) {
  if (!scope.scoped) return;
  scope.known = r == NCU_SUCCESS;
  scope.cur = c;
}

void ncu_scope_forget(void) { scope.known = 0; }

#define NEED(p)                                      \
  do {                                               \
    if (p == NULL) return NCU_ERROR_NOT_SUPPORTED;   \
  } while (0)

/* RELAXED runs one driver call with the calling thread in relaxed stream
   capture mode (CU_STREAM_CAPTURE_MODE_RELAXED), restoring the thread's
   mode after it. While any thread captures a stream in global mode (what
   torch.cuda.graph and nccl-tests -G use), calls CUDA deems potentially
   unsafe (allocations, event and stream queries, module loads) fail and
   invalidate that capture, unless the calling thread is relaxed. The calls
   wrapped here touch no capturing stream, so they are safe; the launch
   path makes them during a capture (a work FIFO for a captured launch, an
   event for a new stream) and other goroutines make them meanwhile (the
   residency ledger's completion queries, Comm.Wait). Drivers without the
   entry point (before CUDA 10.1) run the call as it is. */
#define RELAXED(call)                                                         \
  do {                                                                        \
    int _mode = 2; /* CU_STREAM_CAPTURE_MODE_RELAXED */                       \
    int _ex = p_cuThreadExchangeStreamCaptureMode != NULL &&                  \
              p_cuThreadExchangeStreamCaptureMode(&_mode) == NCU_SUCCESS;     \
    CUresult _r = (call);                                                     \
    if (_ex) p_cuThreadExchangeStreamCaptureMode(&_mode);                     \
    return _r;                                                                \
  } while (0)

CUresult ncu_driver_version(int* v) { return p_cuDriverGetVersion(v); }
CUresult ncu_device_count(int* n) { return p_cuDeviceGetCount(n); }
CUresult ncu_device_get(CUdevice* d, int ordinal) { return p_cuDeviceGet(d, ordinal); }
CUresult ncu_device_name(char* buf, int len, CUdevice d) { return p_cuDeviceGetName(buf, len, d); }
CUresult ncu_device_attribute(int* v, int attr, CUdevice d) {
  return p_cuDeviceGetAttribute(v, attr, d);
}
CUresult ncu_device_total_mem(size_t* v, CUdevice d) { return p_cuDeviceTotalMem(v, d); }
CUresult ncu_device_pci_bus_id(char* buf, int len, CUdevice d) {
  return p_cuDeviceGetPCIBusId(buf, len, d);
}
CUresult ncu_device_uuid(CUuuid* u, CUdevice d) {
  if (p_cuDeviceGetUuid_v2 != NULL) return p_cuDeviceGetUuid_v2(u, d);
  NEED(p_cuDeviceGetUuid);
  return p_cuDeviceGetUuid(u, d);
}
CUresult ncu_device_can_access_peer(int* v, CUdevice d, CUdevice peer) {
  return p_cuDeviceCanAccessPeer(v, d, peer);
}

CUresult ncu_primary_ctx_retain(CUcontext* c, CUdevice d) { return p_cuDevicePrimaryCtxRetain(c, d); }
CUresult ncu_primary_ctx_release(CUdevice d) {
  ncu_scope_forget(); /* a context it destroys is current nowhere after */
  return p_cuDevicePrimaryCtxRelease(d);
}
/* The copy kernel's bookkeeping (copykernel.go): whether the device's
   primary context is active (a release of its last retain resets it), and
   a context's id, unique for the process's life (CUDA 12.0 on), which
   tells a live context from a later one at the same handle. Neither makes
   c current: they work on a context that is gone. */
CUresult ncu_primary_ctx_active(CUdevice d, int* active) {
  NEED(p_cuDevicePrimaryCtxGetState);
  unsigned flags = 0;
  return p_cuDevicePrimaryCtxGetState(d, &flags, active);
}
CUresult ncu_ctx_get_id(CUcontext c, unsigned long long* id) {
  NEED(p_cuCtxGetId);
  return p_cuCtxGetId(c, id);
}
CUresult ncu_ctx_enable_peer_access(CUcontext c, CUcontext peer) {
  SETCTX(c);
  return p_cuCtxEnablePeerAccess(peer, 0);
}
CUresult ncu_ctx_get_current(CUcontext* c) {
  if (scope.known) {
    *c = scope.cur;
    return NCU_SUCCESS;
  }
  return p_cuCtxGetCurrent(c);
}
CUresult ncu_ctx_get_device(CUcontext c, CUdevice* d) {
  SETCTX(c);
  return p_cuCtxGetDevice(d);
}
CUresult ncu_ctx_create(CUcontext* c, CUdevice d) {
  NEED(p_cuCtxCreate);
  CUcontext prev = NULL;
  p_cuCtxGetCurrent(&prev);
  CUresult r = p_cuCtxCreate(c, 0, d);
  p_cuCtxSetCurrent(prev); /* cuCtxCreate pushes the new context; leave the thread as it was */
  return r;
}
CUresult ncu_ctx_destroy(CUcontext c) {
  NEED(p_cuCtxDestroy);
  ncu_scope_forget(); /* destroying the current context pops it */
  return p_cuCtxDestroy(c);
}
CUresult ncu_ctx_set_current(CUcontext c) {
  CUresult r = p_cuCtxSetCurrent(c);
  ncu_scope_switched(c, r);
  return r;
}
CUresult ncu_ctx_sm_limit(CUcontext c, int* n) {
  NEED(p_cuCtxGetExecAffinity);
  SETCTX(c);
  CUexecAffinityParam p;
  memset(&p, 0, sizeof p);
  CUresult r = p_cuCtxGetExecAffinity(&p, NCU_EXEC_AFFINITY_TYPE_SM_COUNT);
  if (r == NCU_SUCCESS) *n = (int)p.smCount;
  return r;
}
CUresult ncu_ctx_synchronize(CUcontext c) {
  SETCTX(c);
  return p_cuCtxSynchronize();
}

CUresult ncu_mem_alloc(CUcontext c, CUdeviceptr* p, size_t n) {
  SETCTX(c);
  RELAXED(p_cuMemAlloc(p, n));
}
CUresult ncu_mem_free(CUcontext c, CUdeviceptr p) {
  SETCTX(c);
  return p_cuMemFree(p);
}
CUresult ncu_mem_host_alloc(CUcontext c, void** p, size_t n, unsigned flags) {
  SETCTX(c);
  RELAXED(p_cuMemHostAlloc(p, n, flags));
}
CUresult ncu_mem_free_host(CUcontext c, void* p) {
  SETCTX(c);
  return p_cuMemFreeHost(p);
}
CUresult ncu_mem_host_register(CUcontext c, void* p, size_t n, unsigned flags) {
  NEED(p_cuMemHostRegister);
  SETCTX(c);
  return p_cuMemHostRegister(p, n, flags);
}
CUresult ncu_mem_host_unregister(CUcontext c, void* p) {
  NEED(p_cuMemHostUnregister);
  SETCTX(c);
  return p_cuMemHostUnregister(p);
}
CUresult ncu_mem_host_device_pointer(CUcontext c, CUdeviceptr* d, void* p) {
  SETCTX(c);
  return p_cuMemHostGetDevicePointer(d, p, 0);
}
CUresult ncu_memcpy_htod(CUcontext c, CUdeviceptr dst, const void* src, size_t n) {
  SETCTX(c);
  return p_cuMemcpyHtoD(dst, src, n);
}
CUresult ncu_memcpy_dtoh(CUcontext c, void* dst, CUdeviceptr src, size_t n) {
  SETCTX(c);
  return p_cuMemcpyDtoH(dst, src, n);
}
CUresult ncu_memcpy_dtod(CUcontext c, CUdeviceptr dst, CUdeviceptr src, size_t n) {
  SETCTX(c);
  return p_cuMemcpyDtoD(dst, src, n);
}
CUresult ncu_memset_d8(CUcontext c, CUdeviceptr p, unsigned char v, size_t n) {
  SETCTX(c);
  return p_cuMemsetD8(p, v, n);
}
CUresult ncu_mem_get_info(CUcontext c, size_t* freeb, size_t* total) {
  SETCTX(c);
  return p_cuMemGetInfo(freeb, total);
}

CUresult ncu_stream_create(CUcontext c, CUstream* s, unsigned flags) {
  SETCTX(c);
  RELAXED(p_cuStreamCreate(s, flags));
}
CUresult ncu_stream_destroy(CUcontext c, CUstream s) {
  SETCTX(c);
  return p_cuStreamDestroy(s);
}
CUresult ncu_stream_synchronize(CUcontext c, CUstream s) {
  SETCTX(c);
  RELAXED(p_cuStreamSynchronize(s));
}
CUresult ncu_stream_query(CUcontext c, CUstream s) {
  SETCTX(c);
  RELAXED(p_cuStreamQuery(s));
}
CUresult ncu_stream_wait_event(CUcontext c, CUstream s, CUevent e) {
  SETCTX(c);
  return p_cuStreamWaitEvent(s, e, 0);
}
CUresult ncu_memcpy_htod_async(CUcontext c, CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  SETCTX(c);
  return p_cuMemcpyHtoDAsync(dst, src, n, s);
}
CUresult ncu_memcpy_dtoh_async(CUcontext c, void* dst, CUdeviceptr src, size_t n, CUstream s) {
  SETCTX(c);
  return p_cuMemcpyDtoHAsync(dst, src, n, s);
}
/* ncu_copy_mode: how device-to-device copies are queued (NCCLGO_COPY_API,
   set once at Init, read after): NCU_COPY_DTOD (cuMemcpyDtoDAsync),
   NCU_COPY_GENERIC (cuMemcpyAsync, the unified-addressing copy
   cudaMemcpyAsync uses), NCU_COPY_KERNEL (a launch of the context's copy
   kernel, registered by ncu_copy_fn_set; cuMemcpyAsync in a context that
   has none) or NCU_COPY_AUTO (the kernel for copies of up to
   NCU_COPY_KERNEL_MAX bytes, cuMemcpyAsync for larger ones). */
static int ncu_copy_mode = NCU_COPY_AUTO;
void ncu_set_copy_mode(int m) {
  if (m != NCU_COPY_DTOD && p_cuMemcpyAsync == NULL) m = NCU_COPY_DTOD;
  ncu_copy_mode = m;
}
int ncu_get_copy_mode(void) { return ncu_copy_mode; }

/* The copy kernels by context: a few contexts at most, written rarely
   (a context's first copy, its release), read on every kernel-mode copy. */
static struct {
  CUcontext c;
  CUfunction f;
} ncu_copy_fns[NCU_COPY_FNS];
static pthread_mutex_t ncu_copy_mu = PTHREAD_MUTEX_INITIALIZER;
int ncu_copy_fn_set(CUcontext c, CUfunction f) {
  int ok = f == NULL;
  pthread_mutex_lock(&ncu_copy_mu);
  for (int i = 0; i < NCU_COPY_FNS; i++) {
    if (ncu_copy_fns[i].c == c) {
      ncu_copy_fns[i].f = f;
      if (f == NULL) ncu_copy_fns[i].c = NULL;
      ok = 1;
      break;
    }
  }
  for (int i = 0; !ok && i < NCU_COPY_FNS; i++) {
    if (ncu_copy_fns[i].c == NULL) {
      ncu_copy_fns[i].c = c;
      ncu_copy_fns[i].f = f;
      ok = 1;
    }
  }
  pthread_mutex_unlock(&ncu_copy_mu);
  return ok;
}
static CUfunction ncu_copy_fn(CUcontext c) {
  CUfunction f = NULL;
  pthread_mutex_lock(&ncu_copy_mu);
  for (int i = 0; i < NCU_COPY_FNS; i++) {
    if (ncu_copy_fns[i].c == c) {
      f = ncu_copy_fns[i].f;
      break;
    }
  }
  pthread_mutex_unlock(&ncu_copy_mu);
  return f;
}

/* ncu_dtod queues the copy in context c (current) as ncu_copy_mode says. The
   copy kernel (ngcopy: src, dst, n) moves 16 bytes a thread-step where both
   pointers are 16-byte aligned: a block of 32 threads for a small copy, up
   to 1024 blocks of 256 for a large one. */
static CUresult ncu_dtod(CUcontext c, CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  /* The same rule as driver.go's kernelCopy, which loads the kernel first. */
  if (ncu_copy_mode == NCU_COPY_KERNEL || (ncu_copy_mode == NCU_COPY_AUTO && n <= NCU_COPY_KERNEL_MAX)) {
    CUfunction f = ncu_copy_fn(c);
    if (f != NULL) {
      unsigned long long nn = n;
      unsigned threads = n < 4096 ? 32 : 256;
      size_t blocks = (n + 4095) / 4096;
      if (blocks < 1) blocks = 1;
      if (blocks > 1024) blocks = 1024;
      void* params[] = {&src, &dst, &nn};
      return p_cuLaunchKernel(f, (unsigned)blocks, 1, 1, threads, 1, 1, 0, s, params, NULL);
    }
  }
  if (ncu_copy_mode != NCU_COPY_DTOD) return p_cuMemcpyAsync(dst, src, n, s);
  return p_cuMemcpyDtoDAsync(dst, src, n, s);
}
CUresult ncu_memcpy_dtod_async(CUcontext c, CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  SETCTX(c);
  return ncu_dtod(c, dst, src, n, s);
}
CUresult ncu_memset_d8_async(CUcontext c, CUdeviceptr p, unsigned char v, size_t n, CUstream s) {
  SETCTX(c);
  return p_cuMemsetD8Async(p, v, n, s);
}
CUresult ncu_memset_d32_async(CUcontext c, CUdeviceptr p, unsigned int v, size_t n, CUstream s) {
  SETCTX(c);
  return p_cuMemsetD32Async(p, v, n, s);
}

/* A diagnostic build (cgo's CFLAGS with -DNCU_OPSTATS=N, N > 0) times
   every operation of ncu_run_ops by kind, the launch graph's two calls
   and each whole sequence, and prints their counts and mean times to
   stderr after every N sequences (then starts again): the host's cost of
   each driver call where the library makes it. docs/DEVELOPING.md says
   how to build and read it. The counters are not synchronised: the
   figures are for a loop on one thread (one per process is fine).
   Without the flag it compiles to nothing. */
#ifdef NCU_OPSTATS
_Static_assert(NCU_OP_RECORD_BESIDE == 9, "st_names follows the NCU_OP_ kinds");
enum { ST_SETPARAMS = 10, ST_GRAPHLAUNCH, ST_SEQUENCE, ST_KINDS };
static const char* st_names[ST_KINDS] = {"", "capture", "query", "wait", "wait-external", "record", "record-external",
                                          "dtod", "launch", "record-beside", "graph-setparams", "graph-launch", "sequence"};
static unsigned long long st_ns[ST_KINDS], st_n[ST_KINDS];
static unsigned long long st_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (unsigned long long)t.tv_sec * 1000000000ull + (unsigned long long)t.tv_nsec;
}
static void st_add(int k, unsigned long long t0) {
  st_ns[k] += st_now() - t0;
  st_n[k]++;
}
static void st_sequence_done(unsigned long long t0) {
  st_add(ST_SEQUENCE, t0);
  if (st_n[ST_SEQUENCE] % (NCU_OPSTATS) != 0) return;
  for (int k = 1; k < ST_KINDS; k++)
    if (st_n[k]) fprintf(stderr, "ncu-opstats %-16s n=%llu mean=%llu ns\n", st_names[k], st_n[k], st_ns[k] / st_n[k]);
  memset(st_ns, 0, sizeof st_ns);
  memset(st_n, 0, sizeof st_n);
}
#define ST_BEGIN(v) unsigned long long v = st_now()
#define ST_ADD(k, v) st_add(k, v)
#else
#define ST_BEGIN(v)
#define ST_ADD(k, v)
#endif

/* graph_node_holds reports whether g's kernel node holds the launch of f
   with dims (grid x, y, z, block x, y, z, shared memory) and the size
   bytes of parameters at args; graph_node_set records that it does. */
static int graph_node_holds(const ncu_launch_graph* g, CUfunction f, const unsigned dims[7], const void* args,
                            size_t size) {
  return g->known && g->f == f && memcmp(g->dims, dims, sizeof g->dims) == 0 && g->size == size &&
         (size == 0 || memcmp(g->args, args, size) == 0);
}
static void graph_node_set(ncu_launch_graph* g, CUfunction f, const unsigned dims[7], const void* args, size_t size) {
  g->known = size <= NCU_LAUNCH_GRAPH_ARGS;
  if (!g->known) return;
  g->f = f;
  memcpy(g->dims, dims, sizeof g->dims);
  g->size = size;
  if (size > 0) memcpy(g->args, args, size);
}

// launch launches f through cuLaunchKernel or, for a programmatic
// dependent launch where the driver has it, cuLaunchKernelEx; extra
// carries the packed parameters (NULL: none).
static CUresult launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                       unsigned bz, unsigned smem, CUstream s, void** extra, int programmatic,
                       ncu_launch_graph* g) {
  if (g != NULL && !programmatic && g->exec != NULL && p_cuGraphExecKernelNodeSetParams != NULL) {
    /* Re-aim the graph's one kernel node at this launch, then launch the
       graph: the driver's graph launch path costs the host less than
       cuLaunchKernel. A launch the node holds already (a loop of one call
       on the same buffers) skips the update, a fifth of the cost. A
       launch the node cannot take (the driver refuses the update) goes
       the ordinary way. */
    const unsigned dims[7] = {gx, gy, gz, bx, by, bz, smem};
    const void* a = extra != NULL ? extra[1] : NULL;
    size_t n = extra != NULL ? *(const size_t*)extra[3] : 0;
    if (graph_node_holds(g, f, dims, a, n)) {
      g->launches++;
      g->same++;
      ST_BEGIN(t1);
      CUresult r = p_cuGraphLaunch(g->exec, s);
      ST_ADD(ST_GRAPHLAUNCH, t1);
      return r;
    }
    ncu_kernel_node_params p = {f, gx, gy, gz, bx, by, bz, smem, NULL, extra};
    ST_BEGIN(t0);
    if (p_cuGraphExecKernelNodeSetParams(g->exec, g->node, &p) == NCU_SUCCESS) {
      ST_ADD(ST_SETPARAMS, t0);
      graph_node_set(g, f, dims, a, n);
      g->launches++;
      ST_BEGIN(t1);
      CUresult r = p_cuGraphLaunch(g->exec, s);
      ST_ADD(ST_GRAPHLAUNCH, t1);
      return r;
    }
    g->known = 0; /* the driver kept the node as it was; assume nothing */
    g->refused++;
  }
  if (programmatic && p_cuLaunchKernelEx != NULL) {
    ncu_launch_attr a;
    memset(&a, 0, sizeof a);
    a.id = 6; /* CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION */
    int allowed = 1; /* programmaticStreamSerializationAllowed */
    memcpy(a.value, &allowed, sizeof allowed);
    ncu_launch_config cfg = {gx, gy, gz, bx, by, bz, smem, s, &a, 1};
    return p_cuLaunchKernelEx(&cfg, f, NULL, extra);
  }
  return p_cuLaunchKernel(f, gx, gy, gz, bx, by, bz, smem, s, NULL, extra);
}

// ncu_launch passes the packed argument buffer through the launch's extra
// array. The driver copies the buffer at launch time, so it need not
// outlive the call.
CUresult ncu_launch(CUcontext c, CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                    unsigned bx, unsigned by, unsigned bz, unsigned smem, CUstream s,
                    void* args, size_t size, int programmatic, ncu_launch_graph* g) {
  SETCTX(c);
  if (size == 0) return launch(f, gx, gy, gz, bx, by, bz, smem, s, NULL, programmatic, g);
  void* extra[] = {
      (void*)(uintptr_t)0x01, args,   // CU_LAUNCH_PARAM_BUFFER_POINTER
      (void*)(uintptr_t)0x02, &size,  // CU_LAUNCH_PARAM_BUFFER_SIZE
      (void*)(uintptr_t)0x00,         // CU_LAUNCH_PARAM_END
  };
  return launch(f, gx, gy, gz, bx, by, bz, smem, s, extra, programmatic, g);
}

/* launch_graph_new is ncu_launch_graph_new in the calling thread's capture
   mode. */
static CUresult launch_graph_new(CUcontext c, ncu_launch_graph* g, CUfunction f, unsigned grid,
                                 unsigned block, void* args, size_t size, CUevent* waits, int nWaits,
                                 CUevent record) {
  if (nWaits > NCU_LAUNCH_GRAPH_MAX_WAITS) return 1; /* CUDA_ERROR_INVALID_VALUE */
  if (nWaits > 0) NEED(p_cuGraphAddEventWaitNode);
  if (record != NULL) NEED(p_cuGraphAddEventRecordNode);
  NEED(p_cuGraphCreate);
  NEED(p_cuGraphAddKernelNode);
  NEED(p_cuGraphExecKernelNodeSetParams);
  NEED(p_cuGraphInstantiateWithFlags);
  NEED(p_cuGraphLaunch);
  NEED(p_cuGraphDestroy);
  SETCTX(c);
  memset(g, 0, sizeof *g);
  void* extra[] = {
      (void*)(uintptr_t)0x01, args,   // CU_LAUNCH_PARAM_BUFFER_POINTER
      (void*)(uintptr_t)0x02, &size,  // CU_LAUNCH_PARAM_BUFFER_SIZE
      (void*)(uintptr_t)0x00,         // CU_LAUNCH_PARAM_END
  };
  ncu_kernel_node_params p = {f, grid, 1, 1, block, 1, 1, 0, NULL, size > 0 ? extra : NULL};
  CUresult r = p_cuGraphCreate(&g->graph, 0);
  if (r != NCU_SUCCESS) return r;
  /* The waits first, the kernel after them all, the record after it. */
  CUgraphNode deps[NCU_LAUNCH_GRAPH_MAX_WAITS];
  for (int i = 0; i < nWaits && r == NCU_SUCCESS; i++) r = p_cuGraphAddEventWaitNode(&deps[i], g->graph, NULL, 0, waits[i]);
  if (r == NCU_SUCCESS) r = p_cuGraphAddKernelNode(&g->node, g->graph, deps, (size_t)nWaits, &p);
  CUgraphNode rec = NULL;
  if (r == NCU_SUCCESS && record != NULL) r = p_cuGraphAddEventRecordNode(&rec, g->graph, &g->node, 1, record);
  if (r == NCU_SUCCESS) r = p_cuGraphInstantiateWithFlags(&g->exec, g->graph, 0);
  if (r != NCU_SUCCESS) {
    p_cuGraphDestroy(g->graph);
    memset(g, 0, sizeof *g);
    return r;
  }
  const unsigned dims[7] = {grid, 1, 1, block, 1, 1, 0};
  graph_node_set(g, f, dims, args, size);
  return r;
}

/* ncu_launch_graph_new makes g a graph of one kernel node, f's launch with
   args (after nWaits event waits, before a record), and instantiates it. It
   runs relaxed (see RELAXED): a launcher makes its graph at its first
   launch, which may come while the stream, or another stream of the
   process, is being captured (the launch then finds the capture and does
   not use the graph); in global capture mode building a graph there would
   fail, loading the kernel, and invalidate that capture. */
CUresult ncu_launch_graph_new(CUcontext c, ncu_launch_graph* g, CUfunction f, unsigned grid,
                              unsigned block, void* args, size_t size, CUevent* waits, int nWaits,
                              CUevent record) {
  RELAXED(launch_graph_new(c, g, f, grid, block, args, size, waits, nWaits, record));
}

/* launch_graph_destroy is ncu_launch_graph_destroy in the calling thread's
   capture mode. */
static CUresult launch_graph_destroy(CUcontext c, ncu_launch_graph* g) {
  NEED(p_cuGraphExecDestroy);
  NEED(p_cuGraphDestroy);
  SETCTX(c);
  CUresult r = NCU_SUCCESS;
  if (g->exec != NULL) r = p_cuGraphExecDestroy(g->exec);
  CUresult r2 = g->graph != NULL ? p_cuGraphDestroy(g->graph) : NCU_SUCCESS;
  g->exec = NULL;
  g->graph = NULL;
  g->node = NULL;
  return r != NCU_SUCCESS ? r : r2;
}

/* ncu_launch_graph_destroy destroys g, relaxed as ncu_launch_graph_new: a
   join graph may be evicted during a capture. */
CUresult ncu_launch_graph_destroy(CUcontext c, ncu_launch_graph* g) { RELAXED(launch_graph_destroy(c, g)); }

/* The most capture dependencies a record beside the chain follows; a
   stream with more (a join of many forks) gets its record in the chain. */
#define NCU_BESIDE_MAX_DEPS 32

/* capture_deps copies the capture dependencies of s, which is capturing,
   into out (room for max), with its capture's id and graph
   (cuStreamGetCaptureInfo_v2). It returns NCU_ERROR_NOT_SUPPORTED, with
   nothing copied, when the driver lacks the call, s is not capturing or
   it has more than max; else the driver's answer. */
static CUresult capture_deps(CUstream s, CUgraphNode* out, size_t max, size_t* n, unsigned long long* id, CUgraph* g) {
  if (p_cuStreamGetCaptureInfo_v2 == NULL) return NCU_ERROR_NOT_SUPPORTED;
  int status = 0;
  const CUgraphNode* deps = NULL;
  CUresult r = p_cuStreamGetCaptureInfo_v2(s, &status, id, g, &deps, n);
  if (r != NCU_SUCCESS) return r;
  if (status != 1 /* CU_STREAM_CAPTURE_STATUS_ACTIVE */ || *g == NULL || *n > max) return NCU_ERROR_NOT_SUPPORTED;
  for (size_t i = 0; i < *n; i++) out[i] = deps[i];
  return NCU_SUCCESS;
}

/* move_record re-points record node node of graph g, which is being
   captured, from what it followed to the n nodes in deps: its edges in
   are removed (cuGraphNodeGetDependencies, cuGraphRemoveDependencies) and
   new ones added (cuGraphAddDependencies). A capture permits every change
   of its graph but node removal and destruction. It returns
   NCU_ERROR_NOT_SUPPORTED, with nothing changed, when the driver lacks a
   call or the node follows more than NCU_BESIDE_MAX_DEPS nodes, else the
   driver's answer; when the new edges fail, it puts the old ones back. */
static CUresult move_record(CUgraph g, CUgraphNode node, const CUgraphNode* deps, size_t n) {
  if (p_cuGraphNodeGetDependencies == NULL || p_cuGraphRemoveDependencies == NULL || p_cuGraphAddDependencies == NULL)
    return NCU_ERROR_NOT_SUPPORTED;
  CUgraphNode old[NCU_BESIDE_MAX_DEPS], to[NCU_BESIDE_MAX_DEPS];
  size_t m = 0;
  CUresult r = p_cuGraphNodeGetDependencies(node, NULL, &m);
  if (r != NCU_SUCCESS) return r;
  if (m > NCU_BESIDE_MAX_DEPS || n > NCU_BESIDE_MAX_DEPS) return NCU_ERROR_NOT_SUPPORTED;
  if (m > 0 && (r = p_cuGraphNodeGetDependencies(node, old, &m)) != NCU_SUCCESS) return r;
  for (size_t i = 0; i < NCU_BESIDE_MAX_DEPS; i++) to[i] = node;
  if (m > 0 && (r = p_cuGraphRemoveDependencies(g, old, to, m)) != NCU_SUCCESS) return r;
  if (n > 0 && (r = p_cuGraphAddDependencies(g, deps, to, n)) != NCU_SUCCESS) {
    if (m > 0) p_cuGraphAddDependencies(g, old, to, m);
    return r;
  }
  return NCU_SUCCESS;
}

/* ncu_record_beside records e beside s's chain: a record node that
   follows what s captured so far (its capture dependencies) and that s's
   next node does not wait for. *node and *capture are the record this
   one follows (NULL: none) and its capture's id. With move set and a
   record of the same capture, that node itself is moved after what s
   captured so far (move_record): a capture then holds one record of e
   per stream, after its latest launch, instead of one per launch (each
   such node beside a chain of kernels costs its replay about 1.8 us a
   kernel on the H200: tests/gxlat). Else a new node follows the capture
   dependencies and *node when it is of the same capture, which keeps the
   event's records in order. Without the graph calls, the record goes in
   the chain (CU_EVENT_RECORD_EXTERNAL) and *node becomes NULL. */
static CUresult ncu_record_beside(CUevent e, CUstream s, CUgraphNode* node, unsigned long long* capture, int move) {
  if (p_cuGraphAddEventRecordNode == NULL) goto chain;
  unsigned long long id = 0;
  CUgraph g = NULL;
  size_t n = 0;
  CUgraphNode all[NCU_BESIDE_MAX_DEPS];
  CUresult r = capture_deps(s, all, NCU_BESIDE_MAX_DEPS - 1, &n, &id, &g); /* room for *node */
  if (r == NCU_ERROR_NOT_SUPPORTED) goto chain;
  if (r != NCU_SUCCESS) return r;
  if (*node != NULL && *capture == id) {
    if (move && move_record(g, *node, all, n) == NCU_SUCCESS) return NCU_SUCCESS;
    all[n++] = *node; /* a driver that cannot move it: a record after it */
  }
  CUgraphNode added = NULL;
  r = p_cuGraphAddEventRecordNode(&added, g, all, n, e);
  if (r != NCU_SUCCESS) return r;
  *node = added;
  *capture = id;
  return NCU_SUCCESS;
chain:
  *node = NULL;
  *capture = 0;
  if (p_cuEventRecordWithFlags == NULL) return NCU_ERROR_NOT_SUPPORTED;
  return p_cuEventRecordWithFlags(e, s, 0x1 /* CU_EVENT_RECORD_EXTERNAL */);
}

static CUresult ncu_run_op(CUcontext c, ncu_op* o, void* args, size_t* size) {
  switch (o->kind) {
  case NCU_OP_CAPTURE:
    if (p_cuStreamIsCapturing == NULL) return NCU_ERROR_NOT_SUPPORTED;
    return p_cuStreamIsCapturing(o->s, &o->status);
  case NCU_OP_QUERY:
    return p_cuStreamQuery(o->s);
  case NCU_OP_WAIT:
    return p_cuStreamWaitEvent(o->s, o->e, 0);
  case NCU_OP_WAIT_EXTERNAL:
    return p_cuStreamWaitEvent(o->s, o->e, 0x1 /* CU_EVENT_WAIT_EXTERNAL */);
  case NCU_OP_RECORD:
    return p_cuEventRecord(o->e, o->s);
  case NCU_OP_RECORD_EXTERNAL:
    if (p_cuEventRecordWithFlags == NULL) return NCU_ERROR_NOT_SUPPORTED;
    return p_cuEventRecordWithFlags(o->e, o->s, 0x1 /* CU_EVENT_RECORD_EXTERNAL */);
  case NCU_OP_RECORD_BESIDE:
    return ncu_record_beside(o->e, o->s, &o->node, &o->capture, o->move);
  case NCU_OP_DTOD:
    return ncu_dtod(c, o->dst, o->src, o->n, o->s);
  case NCU_OP_LAUNCH: {
    if (*size == 0) return launch(o->f, o->grid, 1, 1, o->block, 1, 1, o->smem, o->s, NULL, o->programmatic, o->graph);
    void* extra[] = {
        (void*)(uintptr_t)0x01, args, // CU_LAUNCH_PARAM_BUFFER_POINTER
        (void*)(uintptr_t)0x02, size, // CU_LAUNCH_PARAM_BUFFER_SIZE
        (void*)(uintptr_t)0x00,       // CU_LAUNCH_PARAM_END
    };
    return launch(o->f, o->grid, 1, 1, o->block, 1, 1, o->smem, o->s, extra, o->programmatic, o->graph);
  }
  }
  return 1; /* CUDA_ERROR_INVALID_VALUE */
}

/* A stream query runs in relaxed capture mode (see RELAXED): the sequence
   switches the thread's mode once, before the first query that runs, and
   back at the end. Capture checks in a row all run, so that the caller
   learns every stream's state; when one found a capture (or failed), the
   sequence stops after the last of them. */
CUresult ncu_run_ops(CUcontext c, ncu_op* ops, int n, void* args, size_t size) {
  ST_BEGIN(seq);
  SETCTX(c);
  for (int i = 0; i < n; i++) ops[i].result = NCU_OP_NOT_RUN;
  int mode = 2; /* CU_STREAM_CAPTURE_MODE_RELAXED */
  int ex = 0, relaxed = 0;
  int skipping = 0, captured = 0;
  for (int i = 0; i < n; i++) {
    ncu_op* o = &ops[i];
    if (captured && o->kind != NCU_OP_CAPTURE) break;
    if (skipping && !(o->flags & NCU_OP_ALWAYS)) continue;
    if ((o->flags & NCU_OP_IF_BUSY) && (i == 0 || ops[i - 1].result != NCU_ERROR_NOT_READY)) continue;
    if ((o->flags & NCU_OP_IF_PREV_OK) && (i == 0 || ops[i - 1].result != NCU_SUCCESS)) continue;
    if (o->kind == NCU_OP_QUERY && !relaxed) {
      relaxed = 1;
      ex = p_cuThreadExchangeStreamCaptureMode != NULL && p_cuThreadExchangeStreamCaptureMode(&mode) == NCU_SUCCESS;
    }
    ST_BEGIN(t0);
    CUresult r = ncu_run_op(c, o, args, &size);
    ST_ADD(o->kind, t0);
    o->result = r;
    int failed = r != NCU_SUCCESS && !(o->kind == NCU_OP_QUERY && r == NCU_ERROR_NOT_READY);
    if (o->kind == NCU_OP_CAPTURE && (failed || o->status != 0)) {
      captured = 1;
      continue;
    }
    if (failed && (o->flags & NCU_OP_STOP)) break;
    if (failed && (o->flags & NCU_OP_SKIP)) skipping = 1;
  }
  if (ex) p_cuThreadExchangeStreamCaptureMode(&mode);
#ifdef NCU_OPSTATS
  st_sequence_done(seq);
#endif
  return NCU_SUCCESS;
}

CUresult ncu_event_create(CUcontext c, CUevent* e, unsigned flags) {
  SETCTX(c);
  RELAXED(p_cuEventCreate(e, flags));
}
CUresult ncu_event_record(CUcontext c, CUevent e, CUstream s) {
  SETCTX(c);
  return p_cuEventRecord(e, s);
}
CUresult ncu_event_synchronize(CUcontext c, CUevent e) {
  SETCTX(c);
  RELAXED(p_cuEventSynchronize(e));
}
CUresult ncu_event_query(CUcontext c, CUevent e) {
  SETCTX(c);
  RELAXED(p_cuEventQuery(e));
}
CUresult ncu_event_destroy(CUcontext c, CUevent e) {
  SETCTX(c);
  return p_cuEventDestroy(e);
}
CUresult ncu_event_elapsed(CUcontext c, float* ms, CUevent start, CUevent end) {
  SETCTX(c);
  return p_cuEventElapsedTime(ms, start, end);
}

CUresult ncu_module_load(CUcontext c, CUmodule* m, const void* image, char* log, size_t loglen) {
  SETCTX(c);
  int opts[2] = {5 /* CU_JIT_ERROR_LOG_BUFFER */, 6 /* CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES */};
  void* vals[2] = {log, (void*)(uintptr_t)loglen};
  if (log == NULL || loglen == 0) RELAXED(p_cuModuleLoadDataEx(m, image, 0, NULL, NULL));
  log[0] = 0;
  RELAXED(p_cuModuleLoadDataEx(m, image, 2, opts, vals));
}
CUresult ncu_module_unload(CUcontext c, CUmodule m) {
  SETCTX(c);
  return p_cuModuleUnload(m);
}
CUresult ncu_module_function(CUcontext c, CUfunction* f, CUmodule m, const char* name) {
  SETCTX(c);
  return p_cuModuleGetFunction(f, m, name);
}
CUresult ncu_module_global(CUcontext c, CUdeviceptr* p, size_t* n, CUmodule m, const char* name) {
  SETCTX(c);
  return p_cuModuleGetGlobal(p, n, m, name);
}
CUresult ncu_func_load(CUcontext c, CUfunction f) {
  SETCTX(c);
  if (p_cuFuncLoad != NULL) RELAXED(p_cuFuncLoad(f));
  /* Before CUDA 12.4: querying an attribute loads a lazily loaded kernel. */
  int v;
  return p_cuFuncGetAttribute(&v, 4 /* CU_FUNC_ATTRIBUTE_NUM_REGS */, f);
}
CUresult ncu_func_attribute(CUcontext c, int* v, int attr, CUfunction f) {
  SETCTX(c);
  return p_cuFuncGetAttribute(v, attr, f);
}
CUresult ncu_func_set_attribute(CUcontext c, CUfunction f, int attr, int v) {
  NEED(p_cuFuncSetAttribute);
  SETCTX(c);
  return p_cuFuncSetAttribute(f, attr, v);
}
CUresult ncu_occupancy(CUcontext c, int* n, CUfunction f, int block, size_t smem) {
  SETCTX(c);
  return p_cuOccupancyMaxActiveBlocksPerMultiprocessor(n, f, block, smem);
}

CUresult ncu_ipc_get(CUcontext c, CUipcMemHandle* h, CUdeviceptr p) {
  SETCTX(c);
  return p_cuIpcGetMemHandle(h, p);
}
CUresult ncu_ipc_open(CUcontext c, CUdeviceptr* p, CUipcMemHandle* h) {
  SETCTX(c);
  return p_cuIpcOpenMemHandle(p, *h, 0x1 /* CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS */);
}
CUresult ncu_ipc_close(CUcontext c, CUdeviceptr p) {
  SETCTX(c);
  return p_cuIpcCloseMemHandle(p);
}
CUresult ncu_mem_range(CUcontext c, CUdeviceptr p, CUdeviceptr* base, size_t* n) {
  SETCTX(c);
  return p_cuMemGetAddressRange(base, n, p);
}

static void ncu_fill_prop(CUmemAllocationProp* prop, CUdevice d, int handle_types, int gdr) {
  memset(prop, 0, sizeof(*prop));
  prop->type = 1;                            // CU_MEM_ALLOCATION_TYPE_PINNED
  prop->requestedHandleTypes = handle_types; // CUmemAllocationHandleType bits
  prop->location.type = 1;                   // CU_MEM_LOCATION_TYPE_DEVICE
  prop->location.id = d;
  prop->allocFlags.gpuDirectRDMACapable = gdr ? 1 : 0;
}

CUresult ncu_mem_granularity(CUcontext c, size_t* g, CUdevice d, int handle_types, int gdr, int recommended) {
  NEED(p_cuMemGetAllocationGranularity);
  SETCTX(c);
  CUmemAllocationProp prop;
  ncu_fill_prop(&prop, d, handle_types, gdr);
  return p_cuMemGetAllocationGranularity(g, &prop, recommended ? 1 : 0);
}
CUresult ncu_mem_create(CUcontext c, CUmemGenericAllocationHandle* h, size_t n, CUdevice d, int handle_types,
                        int gdr) {
  NEED(p_cuMemCreate);
  SETCTX(c);
  CUmemAllocationProp prop;
  ncu_fill_prop(&prop, d, handle_types, gdr);
  return p_cuMemCreate(h, n, &prop, 0);
}
CUresult ncu_pointer_attribute(CUcontext c, void* v, int attr, CUdeviceptr p) {
  NEED(p_cuPointerGetAttribute);
  SETCTX(c);
  return p_cuPointerGetAttribute(v, attr, p);
}
CUresult ncu_mem_address_reserve(CUcontext c, CUdeviceptr* p, size_t n, size_t align) {
  NEED(p_cuMemAddressReserve);
  SETCTX(c);
  return p_cuMemAddressReserve(p, n, align, 0, 0);
}
CUresult ncu_mem_map(CUcontext c, CUdeviceptr p, size_t n, CUmemGenericAllocationHandle h) {
  NEED(p_cuMemMap);
  SETCTX(c);
  return p_cuMemMap(p, n, 0, h, 0);
}
CUresult ncu_mem_set_access(CUcontext c, CUdeviceptr p, size_t n, const int* devs, size_t ndev) {
  NEED(p_cuMemSetAccess);
  SETCTX(c);
  CUmemAccessDesc desc[64];
  if (ndev == 0 || ndev > 64) return 1; // CUDA_ERROR_INVALID_VALUE
  for (size_t i = 0; i < ndev; i++) {
    desc[i].location.type = 1; // CU_MEM_LOCATION_TYPE_DEVICE
    desc[i].location.id = devs[i];
    desc[i].flags = 3;         // CU_MEM_ACCESS_FLAGS_PROT_READWRITE
  }
  return p_cuMemSetAccess(p, n, desc, ndev);
}
CUresult ncu_mem_unmap(CUcontext c, CUdeviceptr p, size_t n) {
  NEED(p_cuMemUnmap);
  SETCTX(c);
  return p_cuMemUnmap(p, n);
}
CUresult ncu_mem_address_free(CUcontext c, CUdeviceptr p, size_t n) {
  NEED(p_cuMemAddressFree);
  SETCTX(c);
  return p_cuMemAddressFree(p, n);
}
CUresult ncu_mem_release(CUcontext c, CUmemGenericAllocationHandle h) {
  NEED(p_cuMemRelease);
  SETCTX(c);
  return p_cuMemRelease(h);
}
CUresult ncu_mem_export_fd(CUcontext c, int* fd, CUmemGenericAllocationHandle h) {
  NEED(p_cuMemExportToShareableHandle);
  SETCTX(c);
  return p_cuMemExportToShareableHandle(fd, h, 1 /* POSIX fd */, 0);
}
CUresult ncu_mem_import_fd(CUcontext c, CUmemGenericAllocationHandle* h, int fd) {
  NEED(p_cuMemImportFromShareableHandle);
  SETCTX(c);
  return p_cuMemImportFromShareableHandle(h, (void*)(uintptr_t)fd, 1 /* POSIX fd */);
}

// Stream capture and graphs.
CUresult ncu_stream_is_capturing(CUcontext c, CUstream s, int* status) {
  NEED(p_cuStreamIsCapturing);
  SETCTX(c);
  return p_cuStreamIsCapturing(s, status);
}
CUresult ncu_stream_begin_capture(CUcontext c, CUstream s, int mode) {
  NEED(p_cuStreamBeginCapture);
  SETCTX(c);
  return p_cuStreamBeginCapture(s, mode);
}
CUresult ncu_stream_end_capture(CUcontext c, CUstream s, CUgraph* g) {
  NEED(p_cuStreamEndCapture);
  SETCTX(c);
  return p_cuStreamEndCapture(s, g);
}
CUresult ncu_event_record_external(CUcontext c, CUevent e, CUstream s) {
  NEED(p_cuEventRecordWithFlags);
  SETCTX(c);
  return p_cuEventRecordWithFlags(e, s, 0x1 /* CU_EVENT_RECORD_EXTERNAL */);
}
CUresult ncu_event_record_beside(CUcontext c, CUevent e, CUstream s, CUgraphNode* node, unsigned long long* capture, int move) {
  SETCTX(c);
  return ncu_record_beside(e, s, node, capture, move);
}
/* The most capture dependencies ncu_stream_follow_capture copies. */
#define NCU_FOLLOW_MAX_DEPS 64

/* ncu_stream_follow_capture sets s's capture dependencies to from's
   (cuStreamGetCaptureInfo_v2, then cuStreamUpdateCaptureDependencies with
   CU_STREAM_SET_CAPTURE_DEPENDENCIES): what s captures next follows
   exactly what from captured so far. A captured event wait would add
   from's dependencies to s's own instead, and a stream joined that way
   after every launch keeps every earlier node among its dependencies. */
CUresult ncu_stream_follow_capture(CUcontext c, CUstream s, CUstream from) {
  NEED(p_cuStreamUpdateCaptureDependencies);
  SETCTX(c);
  unsigned long long id = 0;
  CUgraph g = NULL;
  size_t n = 0;
  CUgraphNode all[NCU_FOLLOW_MAX_DEPS];
  CUresult r = capture_deps(from, all, NCU_FOLLOW_MAX_DEPS, &n, &id, &g);
  if (r != NCU_SUCCESS) return r;
  return p_cuStreamUpdateCaptureDependencies(s, all, n, 0x1 /* CU_STREAM_SET_CAPTURE_DEPENDENCIES */);
}
CUresult ncu_stream_wait_event_external(CUcontext c, CUstream s, CUevent e) {
  SETCTX(c);
  return p_cuStreamWaitEvent(s, e, 0x1 /* CU_EVENT_WAIT_EXTERNAL */);
}
CUresult ncu_memcpy_htod_wait(CUcontext c, CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  SETCTX(c);
  int mode = 2; /* CU_STREAM_CAPTURE_MODE_RELAXED, as RELAXED */
  int ex = p_cuThreadExchangeStreamCaptureMode != NULL &&
           p_cuThreadExchangeStreamCaptureMode(&mode) == NCU_SUCCESS;
  CUresult r = p_cuMemcpyHtoDAsync(dst, src, n, s);
  if (r == NCU_SUCCESS) r = p_cuStreamSynchronize(s);
  if (ex) p_cuThreadExchangeStreamCaptureMode(&mode);
  return r;
}
/* A hold's state: live until the graph's user object is destroyed
   (ncu_hold_destroyed, on a driver thread) or its owner drops it
   (ncu_hold_drop); whichever of the two comes second frees it. */
enum { NCU_HOLD_LIVE = 0, NCU_HOLD_RELEASED = 1, NCU_HOLD_DROPPED = 2 };
struct ncu_hold {
  int state;
};
static long ncu_holds; /* allocated, not yet freed */
static void ncu_hold_free(ncu_hold* h) {
  free(h);
  __atomic_sub_fetch(&ncu_holds, 1, __ATOMIC_RELAXED);
}
long ncu_holds_alive(void) { return __atomic_load_n(&ncu_holds, __ATOMIC_RELAXED); }

/* ncu_hold_destroyed is the user object's destructor. It runs on a driver
   thread, where no CUDA call is allowed: it only marks the hold. */
static void ncu_hold_destroyed(void* p) {
  ncu_hold* h = p;
  if (__atomic_exchange_n(&h->state, NCU_HOLD_RELEASED, __ATOMIC_ACQ_REL) == NCU_HOLD_DROPPED) ncu_hold_free(h);
}

CUresult ncu_capture_id(CUcontext c, CUstream s, unsigned long long* id) {
  NEED(p_cuStreamGetCaptureInfo_v2);
  SETCTX(c);
  int status = 0;
  CUgraph g = NULL;
  *id = 0;
  CUresult r = p_cuStreamGetCaptureInfo_v2(s, &status, id, &g, NULL, NULL);
  if (r == NCU_SUCCESS && status != 1 /* CU_STREAM_CAPTURE_STATUS_ACTIVE */) *id = 0;
  return r;
}

static CUresult ncu_capture_hold_relaxed(CUstream s, unsigned long long* id, ncu_hold** out);

/* ncu_capture_hold runs in relaxed capture mode (see RELAXED): CUDA does
   not list user objects among the calls a global-mode capture forbids,
   but being relaxed costs nothing and keeps other threads' captures safe
   if a driver ever does. */
CUresult ncu_capture_hold(CUcontext c, CUstream s, unsigned long long* id, ncu_hold** out) {
  *out = NULL;
  NEED(p_cuStreamGetCaptureInfo_v2);
  NEED(p_cuUserObjectCreate);
  NEED(p_cuUserObjectRelease);
  NEED(p_cuGraphRetainUserObject);
  SETCTX(c);
  RELAXED(ncu_capture_hold_relaxed(s, id, out));
}

static CUresult ncu_capture_hold_relaxed(CUstream s, unsigned long long* id, ncu_hold** out) {
  int status = 0;
  CUgraph g = NULL;
  *id = 0;
  CUresult r = p_cuStreamGetCaptureInfo_v2(s, &status, id, &g, NULL, NULL);
  if (r != NCU_SUCCESS) return r;
  if (status != 1 /* CU_STREAM_CAPTURE_STATUS_ACTIVE */ || g == NULL) return NCU_ERROR_ILLEGAL_STATE;
  ncu_hold* h = calloc(1, sizeof *h);
  if (h == NULL) return NCU_ERROR_OUT_OF_MEMORY;
  __atomic_add_fetch(&ncu_holds, 1, __ATOMIC_RELAXED);
  CUuserObject o = NULL;
  r = p_cuUserObjectCreate(&o, h, ncu_hold_destroyed, 1, 0x1 /* CU_USER_OBJECT_NO_DESTRUCTOR_SYNC */);
  if (r != NCU_SUCCESS) {
    ncu_hold_free(h);
    return r;
  }
  r = p_cuGraphRetainUserObject(g, o, 1, 0x1 /* CU_GRAPH_USER_OBJECT_MOVE */);
  if (r != NCU_SUCCESS) {
    /* The reference stays ours: releasing it runs the destructor, maybe
       later on a driver thread, which then frees h. */
    ncu_hold_drop(h);
    p_cuUserObjectRelease(o, 1);
    return r;
  }
  *out = h;
  return NCU_SUCCESS;
}

int ncu_hold_released(ncu_hold* h) { return __atomic_load_n(&h->state, __ATOMIC_ACQUIRE) == NCU_HOLD_RELEASED; }

void ncu_hold_drop(ncu_hold* h) {
  if (__atomic_exchange_n(&h->state, NCU_HOLD_DROPPED, __ATOMIC_ACQ_REL) == NCU_HOLD_RELEASED) ncu_hold_free(h);
}

CUresult ncu_graph_instantiate(CUcontext c, CUgraphExec* e, CUgraph g) {
  NEED(p_cuGraphInstantiateWithFlags);
  SETCTX(c);
  return p_cuGraphInstantiateWithFlags(e, g, 0);
}
CUresult ncu_graph_launch(CUcontext c, CUgraphExec e, CUstream s) {
  NEED(p_cuGraphLaunch);
  SETCTX(c);
  return p_cuGraphLaunch(e, s);
}
CUresult ncu_graph_exec_destroy(CUcontext c, CUgraphExec e) {
  NEED(p_cuGraphExecDestroy);
  SETCTX(c);
  return p_cuGraphExecDestroy(e);
}
CUresult ncu_graph_destroy(CUcontext c, CUgraph g) {
  NEED(p_cuGraphDestroy);
  SETCTX(c);
  return p_cuGraphDestroy(g);
}
CUresult ncu_graph_node_count(CUcontext c, CUgraph g, size_t* n) {
  NEED(p_cuGraphGetNodes);
  SETCTX(c);
  *n = 0;
  return p_cuGraphGetNodes(g, NULL, n);
}
