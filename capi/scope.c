// NCCL's collective and point-to-point calls as C functions around their
// Go side (capi<Name> in group.go): each runs in a scope of the CUDA shim
// (runtime/cuda/shim.h), which asks the driver for the calling thread's
// current context once, tracks the switches the library makes instead of
// asking again before each driver call, and makes the host's context
// current again on the way out if the call left another. The host sees its
// context unchanged, as keepContext guarantees elsewhere, at the cost of
// one cuCtxGetCurrent per call: a one-rank copy is two driver calls in one
// cgo call. Without a scope (no driver loaded yet) the Go side keeps the
// context itself.
#undef NCCLGO_TYPES_ONLY
#include "nccl.h"

// The shim's scope (runtime/cuda/shim.h), declared here instead of
// included: shim.h declares the driver's types itself, and they clash
// with the CUDA headers' (CUuuid) where nccl.h found and included them.
struct CUctx_st;
int ncu_scope_enter(struct CUctx_st** prev);
void ncu_scope_leave(struct CUctx_st* prev);

// The Go side, as cgo exports it (_cgo_export.h cannot be included beside
// the full nccl.h: its prototypes of the other exports drop const).
ncclResult_t capiAllReduce(void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, void*, int);
ncclResult_t capiReduce(void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t, void*, int);
ncclResult_t capiReduceScatter(void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, void*, int);
ncclResult_t capiAllGather(void*, void*, size_t, ncclDataType_t, ncclComm_t, void*, int);
ncclResult_t capiBroadcast(void*, void*, size_t, ncclDataType_t, int, ncclComm_t, void*, int);
ncclResult_t capiBcast(void*, size_t, ncclDataType_t, int, ncclComm_t, void*, int);
ncclResult_t capiAlltoAll(void*, void*, size_t, ncclDataType_t, ncclComm_t, void*, int);
ncclResult_t capiGather(void*, void*, size_t, ncclDataType_t, int, ncclComm_t, void*, int);
ncclResult_t capiScatter(void*, void*, size_t, ncclDataType_t, int, ncclComm_t, void*, int);
ncclResult_t capiSend(void*, size_t, ncclDataType_t, int, ncclComm_t, void*, int);
ncclResult_t capiRecv(void*, size_t, ncclDataType_t, int, ncclComm_t, void*, int);

// SCOPED runs the Go side call (whose last argument is the scope's flag)
// inside a scope.
#define SCOPED(call)                   \
  struct CUctx_st* prev = NULL;        \
  int sc = ncu_scope_enter(&prev);     \
  ncclResult_t r = call;               \
  if (sc) ncu_scope_leave(prev);       \
  return r

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  SCOPED(capiAllReduce((void*)sendbuff, recvbuff, count, datatype, op, comm, stream, sc));
}
ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  SCOPED(capiReduce((void*)sendbuff, recvbuff, count, datatype, op, root, comm, stream, sc));
}
ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  SCOPED(capiReduceScatter((void*)sendbuff, recvbuff, recvcount, datatype, op, comm, stream, sc));
}
ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  SCOPED(capiAllGather((void*)sendbuff, recvbuff, sendcount, datatype, comm, stream, sc));
}
ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  SCOPED(capiBroadcast((void*)sendbuff, recvbuff, count, datatype, root, comm, stream, sc));
}
ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream) {
  SCOPED(capiBcast(buff, count, datatype, root, comm, stream, sc));
}
ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                          ncclComm_t comm, cudaStream_t stream) {
  SCOPED(capiAlltoAll((void*)sendbuff, recvbuff, count, datatype, comm, stream, sc));
}
ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                        ncclComm_t comm, cudaStream_t stream) {
  SCOPED(capiGather((void*)sendbuff, recvbuff, count, datatype, root, comm, stream, sc));
}
ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                         ncclComm_t comm, cudaStream_t stream) {
  SCOPED(capiScatter((void*)sendbuff, recvbuff, count, datatype, root, comm, stream, sc));
}
ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  SCOPED(capiSend((void*)sendbuff, count, datatype, peer, comm, stream, sc));
}
ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  SCOPED(capiRecv(recvbuff, count, datatype, peer, comm, stream, sc));
}
