// Minimal CUDA driver API declarations for the dlopen shim. Written by hand
// so that the package builds without CUDA headers; only the typedefs, enum
// values and struct layouts this package uses are declared.
#ifndef NCCLGO_CUDA_SHIM_H
#define NCCLGO_CUDA_SHIM_H

#include <stddef.h>
#include <stdint.h>

typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st* CUcontext;
typedef struct CUstream_st* CUstream;
typedef struct CUevent_st* CUevent;
typedef struct CUmod_st* CUmodule;
typedef struct CUfunc_st* CUfunction;
typedef struct CUgraph_st* CUgraph;
typedef struct CUgraphExec_st* CUgraphExec;
typedef struct CUgraphNode_st* CUgraphNode;
typedef struct CUuserObject_st* CUuserObject;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUmemGenericAllocationHandle;

typedef struct { char reserved[64]; } CUipcMemHandle;
typedef struct { char bytes[16]; } CUuuid;

typedef struct {
  int type; // CUmemLocationType
  int id;
} CUmemLocation;

typedef struct {
  int type;                 // CUmemAllocationType
  int requestedHandleTypes; // CUmemAllocationHandleType
  CUmemLocation location;
  void* win32HandleMetaData;
  struct {
    unsigned char compressionType;
    unsigned char gpuDirectRDMACapable;
    unsigned short usage;
    unsigned char reserved[4];
  } allocFlags;
} CUmemAllocationProp;

typedef struct {
  CUmemLocation location;
  int flags; // CUmemAccess_flags
} CUmemAccessDesc;

// CUexecAffinityParam_v1: the type, then a union whose only member is the
// SM count (CUexecAffinitySmCount, one unsigned int).
typedef struct {
  int type; // CUexecAffinityType
  unsigned int smCount;
} CUexecAffinityParam;

enum {
  NCU_EXEC_AFFINITY_TYPE_SM_COUNT = 0,
};

enum {
  NCU_SUCCESS = 0,
  NCU_ERROR_OUT_OF_MEMORY = 2,
  NCU_ERROR_NOT_INITIALIZED = 3,
  NCU_ERROR_ILLEGAL_STATE = 401,
  NCU_ERROR_NOT_FOUND = 500,
  NCU_ERROR_NOT_SUPPORTED = 801,
};

// Loading.
int ncu_load(const char* path, char* err, size_t errlen);
enum { NCU_COPY_DTOD = 0, NCU_COPY_GENERIC = 1, NCU_COPY_KERNEL = 2, NCU_COPY_AUTO = 3 };
#define NCU_COPY_KERNEL_MAX (8u << 20) // NCU_COPY_AUTO: the copy kernel up to this many bytes
#define NCU_COPY_FNS 64 // contexts with a copy kernel at once
void ncu_set_copy_mode(int m);
int ncu_get_copy_mode(void);
// ncu_copy_fn_set registers c's copy kernel (f NULL: forgets c's); 0 when
// the table is full (c's copies then go through cuMemcpyAsync).
int ncu_copy_fn_set(CUcontext c, CUfunction f);
int ncu_loaded(void);
CUresult ncu_init(void);

// Errors (work without cuInit once the library is loaded).
CUresult ncu_error_name(CUresult r, const char** s);
CUresult ncu_error_string(CUresult r, const char** s);

// Driver and devices.
CUresult ncu_driver_version(int* v);
CUresult ncu_device_count(int* n);
CUresult ncu_device_get(CUdevice* d, int ordinal);
CUresult ncu_device_name(char* buf, int len, CUdevice d);
CUresult ncu_device_attribute(int* v, int attr, CUdevice d);
CUresult ncu_device_total_mem(size_t* v, CUdevice d);
CUresult ncu_device_pci_bus_id(char* buf, int len, CUdevice d);
CUresult ncu_device_uuid(CUuuid* u, CUdevice d);
CUresult ncu_device_can_access_peer(int* v, CUdevice d, CUdevice peer);

// Contexts.
CUresult ncu_primary_ctx_retain(CUcontext* c, CUdevice d);
CUresult ncu_primary_ctx_release(CUdevice d);
CUresult ncu_primary_ctx_active(CUdevice d, int* active);    // optional: NCU_ERROR_NOT_SUPPORTED
CUresult ncu_ctx_get_id(CUcontext c, unsigned long long* id); // optional (CUDA 12.0): NCU_ERROR_NOT_SUPPORTED
CUresult ncu_ctx_enable_peer_access(CUcontext c, CUcontext peer);
CUresult ncu_ctx_synchronize(CUcontext c);
CUresult ncu_ctx_get_current(CUcontext* c);
CUresult ncu_ctx_get_device(CUcontext c, CUdevice* d);
CUresult ncu_ctx_create(CUcontext* c, CUdevice d);
CUresult ncu_ctx_destroy(CUcontext c);
CUresult ncu_ctx_set_current(CUcontext c);

// A scope is one call of the host into the library through its C API
// (capi), on the host's thread: ncu_scope_enter asks for the thread's
// current context once, into prev, and the shim then tracks every switch
// it makes instead of asking again; ncu_scope_leave(prev) makes prev
// current again if the scope left another. ncu_scope_enter returns 0 (no
// scope) when the driver is not loaded or the question fails.
// ncu_scope_switched records a switch to c that returned r (every
// cuCtxSetCurrent made outside the shim's own entries); ncu_scope_forget
// says the current context is no longer known (asked again when needed).
int ncu_scope_enter(CUcontext* prev);
void ncu_scope_leave(CUcontext prev);
void ncu_scope_switched(CUcontext c, CUresult r);
void ncu_scope_forget(void);
// The SMs context c may use (cuCtxGetExecAffinity, SM count): its MPS
// share, or what cuCtxCreate_v3 limited it to. NOT_SUPPORTED when the
// driver lacks the entry point.
CUresult ncu_ctx_sm_limit(CUcontext c, int* n);

// Memory (all set the context current first).
CUresult ncu_mem_alloc(CUcontext c, CUdeviceptr* p, size_t n);
CUresult ncu_mem_free(CUcontext c, CUdeviceptr p);
CUresult ncu_mem_host_alloc(CUcontext c, void** p, size_t n, unsigned flags);
CUresult ncu_mem_free_host(CUcontext c, void* p);
CUresult ncu_mem_host_register(CUcontext c, void* p, size_t n, unsigned flags);
CUresult ncu_mem_host_unregister(CUcontext c, void* p);
CUresult ncu_mem_host_device_pointer(CUcontext c, CUdeviceptr* d, void* p);
CUresult ncu_memcpy_htod(CUcontext c, CUdeviceptr dst, const void* src, size_t n);
CUresult ncu_memcpy_dtoh(CUcontext c, void* dst, CUdeviceptr src, size_t n);
CUresult ncu_memcpy_dtod(CUcontext c, CUdeviceptr dst, CUdeviceptr src, size_t n);
CUresult ncu_memset_d8(CUcontext c, CUdeviceptr p, unsigned char v, size_t n);
CUresult ncu_mem_get_info(CUcontext c, size_t* freeb, size_t* total);

// CUDA_KERNEL_NODE_PARAMS (v1): a kernel node's launch, as
// cuGraphAddKernelNode and cuGraphExecKernelNodeSetParams take it.
typedef struct {
  CUfunction func;
  unsigned gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
  void** kernelParams;
  void** extra;
} ncu_kernel_node_params;

// ncu_launch_graph is a graph of one kernel node that a plain launch may go
// through (ncu_launch, NCU_OP_LAUNCH): the node is updated to the launch
// (cuGraphExecKernelNodeSetParams), then the graph launched. Its user
// keeps one launch through it at a time.
// A launch whose kernel, grid, block, shared memory and parameters are
// those the node holds already (the previous launch's, or the graph's
// first) launches the graph without updating the node.
#define NCU_LAUNCH_GRAPH_ARGS 4096
typedef struct {
  CUgraph graph;
  CUgraphExec exec;
  CUgraphNode node;
  unsigned long long launches; // out: launches that went through the graph
  unsigned long long refused;  // out: updates the driver refused (those launched the ordinary way)
  unsigned long long same;     // out: launches through the graph that needed no update
  // What the node holds (unknown: known == 0).
  int known;
  CUfunction f;
  unsigned dims[7]; // grid x, y, z, block x, y, z, shared memory bytes
  size_t size;
  unsigned char args[NCU_LAUNCH_GRAPH_ARGS];
} ncu_launch_graph;
// ncu_launch_graph_new makes g a graph of nWaits event wait nodes (at most
// NCU_LAUNCH_GRAPH_MAX_WAITS), then the kernel node, f's launch with args,
// after them, then, unless record is NULL, a record of it after the
// kernel; and instantiates it.
#define NCU_LAUNCH_GRAPH_MAX_WAITS 64
CUresult ncu_launch_graph_new(CUcontext c, ncu_launch_graph* g, CUfunction f, unsigned grid,
                              unsigned block, void* args, size_t size, CUevent* waits, int nWaits,
                              CUevent record);
CUresult ncu_launch_graph_destroy(CUcontext c, ncu_launch_graph* g);

// Streams.
CUresult ncu_stream_create(CUcontext c, CUstream* s, unsigned flags);
CUresult ncu_stream_destroy(CUcontext c, CUstream s);
CUresult ncu_stream_synchronize(CUcontext c, CUstream s);
CUresult ncu_stream_query(CUcontext c, CUstream s);
CUresult ncu_stream_wait_event(CUcontext c, CUstream s, CUevent e);
CUresult ncu_memcpy_htod_async(CUcontext c, CUdeviceptr dst, const void* src, size_t n, CUstream s);
CUresult ncu_memcpy_dtoh_async(CUcontext c, void* dst, CUdeviceptr src, size_t n, CUstream s);
CUresult ncu_memcpy_dtod_async(CUcontext c, CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s);
CUresult ncu_memset_d8_async(CUcontext c, CUdeviceptr p, unsigned char v, size_t n, CUstream s);
CUresult ncu_memset_d32_async(CUcontext c, CUdeviceptr p, unsigned int v, size_t n, CUstream s);
// CUlaunchAttribute and CUlaunchConfig (cuda.h, CUDA 12.0), for
// cuLaunchKernelEx.
typedef struct {
  int id;
  char pad[4];
  char value[64];
} ncu_launch_attr;
typedef struct {
  unsigned gx, gy, gz, bx, by, bz, smem;
  CUstream s;
  ncu_launch_attr* attrs;
  unsigned n;
} ncu_launch_config;
// ncu_launch launches f on s with the packed parameters args (size bytes).
// programmatic non-zero asks for programmatic dependent launch
// (cuLaunchKernelEx with CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION):
// the kernel may start while the kernel before it on s winds down; a
// driver without cuLaunchKernelEx launches it plainly.
CUresult ncu_launch(CUcontext c, CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                    unsigned bx, unsigned by, unsigned bz, unsigned smem, CUstream s,
                    void* args, size_t size, int programmatic, ncu_launch_graph* g);

// A sequence of stream operations run in one call (ncu_run_ops), so that
// a launch and what orders it cost one cgo call and one check of the
// thread's current context. result is NCU_OP_NOT_RUN until the op runs.
enum {
  NCU_OP_CAPTURE = 1, // cuStreamIsCapturing(s) into status; stops (after the checks in a row) unless none
  NCU_OP_QUERY,       // cuStreamQuery(s): SUCCESS (idle) or NOT_READY (busy)
  NCU_OP_WAIT,        // cuStreamWaitEvent(s, e)
  NCU_OP_WAIT_EXTERNAL,
  NCU_OP_RECORD,      // cuEventRecord(e, s)
  NCU_OP_RECORD_EXTERNAL,
  NCU_OP_DTOD,        // cuMemcpyDtoDAsync(dst, src, n, s), cuMemcpyAsync or the copy kernel (ncu_set_copy_mode)
  NCU_OP_LAUNCH,      // cuLaunchKernel(f, grid, block, smem, s) with the sequence's arguments
  NCU_OP_RECORD_BESIDE, // ncu_record_beside(e, s, node, capture)
};
enum {
  NCU_OP_STOP = 1,       // on failure, run nothing more
  NCU_OP_SKIP = 2,       // on failure, run only the NCU_OP_ALWAYS ops after it
  NCU_OP_ALWAYS = 4,     // runs after a NCU_OP_SKIP failure
  NCU_OP_IF_BUSY = 8,    // runs only if the op before it reported NOT_READY
  NCU_OP_IF_PREV_OK = 16 // runs only if the op before it succeeded
};
#define NCU_OP_NOT_RUN (-1)
#define NCU_ERROR_NOT_READY 600
typedef struct {
  int kind, flags;
  CUresult result; // out
  int status;      // out: NCU_OP_CAPTURE's CUstreamCaptureStatus
  CUstream s;
  CUevent e;
  CUdeviceptr dst, src;
  size_t n;
  CUfunction f;
  unsigned grid, block, smem;
  int programmatic;           // NCU_OP_LAUNCH: programmatic dependent launch (ncu_launch)
  ncu_launch_graph* graph;    // NCU_OP_LAUNCH: the graph a plain launch goes through, or NULL
  CUgraphNode node;           // NCU_OP_RECORD_BESIDE: in, the record to follow; out, the new one (NULL: in the stream)
  unsigned long long capture; // NCU_OP_RECORD_BESIDE: in, node's capture id; out, the stream's
  int move;                   // NCU_OP_RECORD_BESIDE: move node instead of following it (ncu_event_record_beside)
} ncu_op;
// ncu_run_ops makes c current and runs ops in order; args (size bytes) are
// the parameters of every NCU_OP_LAUNCH. It returns the failure to make c
// current (nothing ran), else NCU_SUCCESS: each op's own result is in it.
CUresult ncu_run_ops(CUcontext c, ncu_op* ops, int n, void* args, size_t size);

// Events.
CUresult ncu_event_create(CUcontext c, CUevent* e, unsigned flags);
CUresult ncu_event_record(CUcontext c, CUevent e, CUstream s);
CUresult ncu_event_synchronize(CUcontext c, CUevent e);
CUresult ncu_event_query(CUcontext c, CUevent e);
CUresult ncu_event_destroy(CUcontext c, CUevent e);
CUresult ncu_event_elapsed(CUcontext c, float* ms, CUevent start, CUevent end);

// Modules and functions.
CUresult ncu_module_load(CUcontext c, CUmodule* m, const void* image, char* log, size_t loglen);
CUresult ncu_module_unload(CUcontext c, CUmodule m);
CUresult ncu_module_function(CUcontext c, CUfunction* f, CUmodule m, const char* name);
CUresult ncu_module_global(CUcontext c, CUdeviceptr* p, size_t* n, CUmodule m, const char* name);
CUresult ncu_func_load(CUcontext c, CUfunction f);
CUresult ncu_func_attribute(CUcontext c, int* v, int attr, CUfunction f);
CUresult ncu_func_set_attribute(CUcontext c, CUfunction f, int attr, int v);
CUresult ncu_occupancy(CUcontext c, int* n, CUfunction f, int block, size_t smem);

// IPC.
CUresult ncu_ipc_get(CUcontext c, CUipcMemHandle* h, CUdeviceptr p);
CUresult ncu_ipc_open(CUcontext c, CUdeviceptr* p, CUipcMemHandle* h);
CUresult ncu_ipc_close(CUcontext c, CUdeviceptr p);
CUresult ncu_mem_range(CUcontext c, CUdeviceptr p, CUdeviceptr* base, size_t* n);

// Virtual memory management.
CUresult ncu_mem_granularity(CUcontext c, size_t* g, CUdevice d, int handle_types, int gdr, int recommended);
CUresult ncu_mem_create(CUcontext c, CUmemGenericAllocationHandle* h, size_t n, CUdevice d, int handle_types,
                        int gdr);
CUresult ncu_pointer_attribute(CUcontext c, void* v, int attr, CUdeviceptr p);
CUresult ncu_mem_address_reserve(CUcontext c, CUdeviceptr* p, size_t n, size_t align);
CUresult ncu_mem_map(CUcontext c, CUdeviceptr p, size_t n, CUmemGenericAllocationHandle h);
CUresult ncu_mem_set_access(CUcontext c, CUdeviceptr p, size_t n, const int* devs, size_t ndev);
CUresult ncu_mem_unmap(CUcontext c, CUdeviceptr p, size_t n);
CUresult ncu_mem_address_free(CUcontext c, CUdeviceptr p, size_t n);
CUresult ncu_mem_release(CUcontext c, CUmemGenericAllocationHandle h);
CUresult ncu_mem_export_fd(CUcontext c, int* fd, CUmemGenericAllocationHandle h);
CUresult ncu_mem_import_fd(CUcontext c, CUmemGenericAllocationHandle* h, int fd);

// Stream capture and graphs. ncu_stream_wait_event_external and
// ncu_event_record_external make event wait and record nodes of a graph
// being captured (CU_EVENT_WAIT_EXTERNAL, CU_EVENT_RECORD_EXTERNAL).
// ncu_memcpy_htod_wait copies on s and waits for it, in relaxed capture
// mode (s must not be capturing).
CUresult ncu_stream_is_capturing(CUcontext c, CUstream s, int* status);
CUresult ncu_stream_begin_capture(CUcontext c, CUstream s, int mode);
CUresult ncu_stream_end_capture(CUcontext c, CUstream s, CUgraph* g);
CUresult ncu_event_record_external(CUcontext c, CUevent e, CUstream s);
// ncu_event_record_beside adds an event record node for e to the graph that
// s is capturing into, after s's capture dependencies and after *node when
// *capture is the capture's id, without making it a dependency of what s
// captures next: the record is a branch beside the stream's chain. With
// move set, *node of the same capture is itself moved after s's capture
// dependencies instead (where the driver can re-point its edges). It
// returns the node and the capture id in *node and *capture. Without the
// driver calls it needs (cuStreamGetCaptureInfo, cuGraphAddEventRecordNode)
// or with more dependencies than it handles, it records e in the stream
// (CU_EVENT_RECORD_EXTERNAL) and returns *node NULL.
CUresult ncu_event_record_beside(CUcontext c, CUevent e, CUstream s, CUgraphNode* node, unsigned long long* capture, int move);
CUresult ncu_stream_follow_capture(CUcontext c, CUstream s, CUstream from);
CUresult ncu_stream_wait_event_external(CUcontext c, CUstream s, CUevent e);
CUresult ncu_memcpy_htod_wait(CUcontext c, CUdeviceptr dst, const void* src, size_t n, CUstream s);
// ncu_capture_id returns the id of the capture s is in (0 when s is not
// capturing; cuStreamGetCaptureInfo_v2, NOT_SUPPORTED without it).
CUresult ncu_capture_id(CUcontext c, CUstream s, unsigned long long* id);
// A hold tells its owner when a captured graph is gone: ncu_capture_hold
// creates a user object (cuUserObjectCreate) and moves its reference to the
// graph s is capturing into (cuGraphRetainUserObject, MOVE), returning the
// capture's id. Once that graph, every graph cloned or instantiated from
// it and their pending launches are gone, CUDA destroys the object, and
// ncu_hold_released reports 1. The owner ends its interest with
// ncu_hold_drop (after which h must not be used); the hold is freed then
// or, if the graph is still alive, by the destructor. NOT_SUPPORTED
// without the driver calls (before CUDA 11.3); *out is NULL on failure.
typedef struct ncu_hold ncu_hold;
CUresult ncu_capture_hold(CUcontext c, CUstream s, unsigned long long* id, ncu_hold** out);
int ncu_hold_released(ncu_hold* h);
void ncu_hold_drop(ncu_hold* h);
long ncu_holds_alive(void); // holds not yet freed
CUresult ncu_graph_instantiate(CUcontext c, CUgraphExec* e, CUgraph g);
CUresult ncu_graph_launch(CUcontext c, CUgraphExec e, CUstream s);
CUresult ncu_graph_exec_destroy(CUcontext c, CUgraphExec e);
CUresult ncu_graph_destroy(CUcontext c, CUgraph g);
CUresult ncu_graph_node_count(CUcontext c, CUgraph g, size_t* n);

// Conversions between opaque handles and integers, done in C so that Go
// never converts a uintptr to a pointer.
static inline CUstream ncu_stream_from(uintptr_t h) { return (CUstream)h; }
static inline uintptr_t ncu_stream_to(CUstream s) { return (uintptr_t)s; }
static inline uintptr_t ncu_ctx_to(CUcontext c) { return (uintptr_t)c; }
static inline CUcontext ncu_ctx_from(uintptr_t h) { return (CUcontext)h; }
// ncu_ctx_set_current_handle is ncu_ctx_set_current of a raw handle, in
// one cgo call.
static inline CUresult ncu_ctx_set_current_handle(uintptr_t h) { return ncu_ctx_set_current((CUcontext)h); }

#endif
