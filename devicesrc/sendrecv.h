// sendrecv.h — SendRecv (bytes): one work sends work.count bytes of sendbuff
// to sendPeer and receives work.chanCount bytes into recvbuff from recvPeer
// (peer -1 or chanCount == ~0: that direction is idle; 0 bytes: no steps).
// When both directions are busy and go through FIFOs the block's warps split
// in two halves (named barriers 2 and 3) that run concurrently, so two ranks
// sending to each other never wait on one another.
//
// Direct mode (SIMPLE, connections flagged NG_CONN_DIRECT: the peer's user
// buffers are load/store accessible): instead of staging through the FIFO,
// the sender copies straight into the receiver's recvbuff, one logical step
// per work. The receiver, at its step r, publishes its buffer and size in
// the connection's ptrExchange slots ([0] pointer, [2] bytes, then [1] =
// r+1 as the generation); the sender, at the same step (both count the
// connection's steps), waits for generation s+1, copies, fences and posts
// tail = s+1; the receiver waits for it and returns the credit (head = r+1).
// Both step counters advance by one, so FIFO works before and after stay
// in sequence. A sender whose size differs from the receiver's copies no
// more than the receiver holds, records NG_DEV_ERR_BAD_WORK and still posts,
// so neither side hangs.
//
// When both directions of a work are direct the block does not split: it
// publishes its receive buffer first (a store, no wait), then the whole
// block copies the send (ngDirectCopy: 16-byte packs, unrolled), then it
// waits for its own receive. Every rank publishes before it waits, so the
// pairs of a round never wait on one another in a cycle.
#ifndef NG_SENDRECV_H_
#define NG_SENDRECV_H_
#include "ng_coll_common.h"
#include "direct.h"

__device__ __forceinline__ void ngFenceFor(const struct ngConnInfo* ci) {
  if (ci->flags & NG_CONN_SAME_GPU) __threadfence();
  else __threadfence_system();
}

// ngDirectPublish (thread 0 of the receiving group) publishes dst (total
// elements) for the sender of connection ci at the connection's step.
template <typename T>
__device__ __forceinline__ void ngDirectPublish(const struct ngConnInfo* ci, T* dst, int64_t total) {
  uint64_t* xch = reinterpret_cast<uint64_t*>(ci->ptrExchange);
  const uint64_t r = ngLdVolatile(reinterpret_cast<const uint64_t*>(ci->step));
  ngStVolatile(xch, (uint64_t)(uintptr_t)dst);
  ngStVolatile(xch + 2, (uint64_t)total * sizeof(T));
  ngFenceFor(ci);
  ngStVolatile(xch + 1, r + 1);
}

// ngDirectSend copies total elements from src into the receiver's published
// buffer with every thread of g. Returns false on abort.
template <typename T>
__device__ __forceinline__ bool ngDirectSend(struct ngShmem* sh, ngGroup g, const struct ngConnInfo* ci, const T* src,
                                             int64_t total) {
  uint64_t* stepPtr = reinterpret_cast<uint64_t*>(ci->step);
  uint64_t* xch = reinterpret_cast<uint64_t*>(ci->ptrExchange);
  // Thread 0 waits for the receiver and hands its buffer to the group
  // through shared memory (the DIRECT slots, which a SendRecv work does not
  // otherwise use; a split block's receiving half never touches them).
  if (g.tid == 0) {
    const uint64_t s = ngLdVolatile(stepPtr);
    uint64_t dst = 0, room = 0;
    if (ngWaitGE(sh, xch + 1, s + 1)) {
      __threadfence(); // the pointer and size were written before the generation
      dst = ngLdVolatile(xch);
      room = ngLdVolatile(xch + 2);
    }
    sh->directSend[0] = dst;
    sh->directRecv[0] = room;
  }
  ngBarrier(g);
  if (ngAborted(sh)) return false;
  T* dst = reinterpret_cast<T*>(sh->directSend[0]);
  const int64_t room = (int64_t)(sh->directRecv[0] / sizeof(T));
  const int64_t n = ngMin64(total, room);
  ngDirectCopy<T>(g, src, dst, n);
  ngBarrier(g);
  if (g.tid == 0) {
    const uint64_t s = ngLdVolatile(stepPtr);
    if (n != total || room != total) ngRecordError(sh, NG_DEV_ERR_BAD_WORK);
    ngFenceFor(ci);
    ngStVolatile(reinterpret_cast<uint64_t*>(ci->tail), s + 1);
    ngStVolatile(stepPtr, s + 1);
  }
  return true;
}

// ngDirectRecv waits (thread 0 of g) for the sender's copy into the
// buffer published at the connection's step and returns the credit.
// publish: publish the buffer first (else ngDirectPublish did). Returns
// false on abort.
template <typename T>
__device__ __forceinline__ bool ngDirectRecv(struct ngShmem* sh, ngGroup g, const struct ngConnInfo* ci, T* dst,
                                             int64_t total, bool publish) {
  uint64_t* stepPtr = reinterpret_cast<uint64_t*>(ci->step);
  bool ok = true;
  if (g.tid == 0) {
    if (publish) ngDirectPublish<T>(ci, dst, total);
    const uint64_t r = ngLdVolatile(stepPtr);
    ok = ngWaitGE(sh, reinterpret_cast<const uint64_t*>(ci->tail), r + 1);
    __threadfence();
    if (ok) {
      ngStVolatile(reinterpret_cast<uint64_t*>(ci->head), r + 1);
      ngStVolatile(stepPtr, r + 1);
    }
  }
  ngBarrier(g);
  return ok && !ngAborted(sh);
}

template <typename T, typename Op, int Proto>
__device__ __forceinline__ void ngSendRecvRun(struct ngShmem* sh) {
  const struct ngDevWork w = sh->work;
  int sendPeer = w.sendPeer, recvPeer = w.recvPeer;
  const bool doSend = sendPeer >= 0 && w.count > 0;
  const bool doRecv = recvPeer >= 0 && w.chanCount != ~0ull && w.chanCount > 0;
  int nt = ngWorkThreads(sh);
  const int tid = threadIdx.x;
  if (Proto == NG_PROTO_SIMPLE && doSend && doRecv && (ngSendConnInfo(sh, sendPeer)->flags & NG_CONN_DIRECT) &&
      (ngRecvConnInfo(sh, recvPeer)->flags & NG_CONN_DIRECT)) {
    // Both directions direct: publish, copy with the whole block, then wait
    // for our own receive (see the header).
    if (tid >= nt) return;
    const ngGroup all = {tid, nt, 1};
    const struct ngConnInfo* rci = ngRecvConnInfo(sh, recvPeer);
    T* dst = reinterpret_cast<T*>(w.recvbuff);
    const int64_t rtotal = (int64_t)w.chanCount;
    if (tid == 0) ngDirectPublish<T>(rci, dst, rtotal);
    if (!ngDirectSend<T>(sh, all, ngSendConnInfo(sh, sendPeer), reinterpret_cast<const T*>(w.sendbuff), (int64_t)w.count))
      return;
    ngDirectRecv<T>(sh, all, rci, dst, rtotal, false);
    return;
  }
  if (doSend && doRecv && nt < 64) nt = (blockDim.x & ~31) >= 64 ? 64 : nt;
  if (tid >= nt) return;
  ngGroup g;
  bool sender;
  if (doSend && doRecv && nt >= 64) {
    const int ns = ((nt / 32) / 2) * 32;
    sender = tid < ns;
    g.tid = sender ? tid : tid - ns;
    g.nThreads = sender ? ns : nt - ns;
    g.barId = sender ? 2 : 3;
  } else {
    if (!doSend && !doRecv) return;
    sender = doSend;
    g.tid = tid;
    g.nThreads = nt;
    g.barId = 1;
  }
  const int64_t cap = ngStepElems<T, Proto>(sh);
  if (sender) {
    const T* src = reinterpret_cast<const T*>(w.sendbuff);
    const int64_t total = (int64_t)w.count;
    const struct ngConnInfo* ci = ngSendConnInfo(sh, sendPeer);
    if (Proto == NG_PROTO_SIMPLE && (ci->flags & NG_CONN_DIRECT)) {
      ngDirectSend<T>(sh, g, ci, src, total);
      return;
    }
    ngPrims<T, Op, Proto, 1, 1> prims(sh, g, nullptr, 0, &sendPeer, 1);
    for (int64_t off = 0; off < total; off += cap) {
      if (!prims.step(src + off, nullptr, (int)ngMin64(cap, total - off), false, true, false)) return;
    }
    prims.finish();
  } else {
    T* dst = reinterpret_cast<T*>(w.recvbuff);
    const int64_t total = (int64_t)w.chanCount;
    const struct ngConnInfo* ci = ngRecvConnInfo(sh, recvPeer);
    if (Proto == NG_PROTO_SIMPLE && (ci->flags & NG_CONN_DIRECT)) {
      ngDirectRecv<T>(sh, g, ci, dst, total, true);
      return;
    }
    ngPrims<T, Op, Proto, 1, 1> prims(sh, g, &recvPeer, 1, nullptr, 0);
    for (int64_t off = 0; off < total; off += cap) {
      if (!prims.step(nullptr, dst + off, (int)ngMin64(cap, total - off), true, false, false)) return;
    }
    prims.finish();
  }
}

template <typename T, typename Op, int Algo, int Proto>
struct ngCollFunc<NG_COLL_SendRecv, T, Op, Algo, Proto> {
  static __device__ __forceinline__ void run(struct ngShmem* sh) { ngSendRecvRun<T, Op, Proto>(sh); }
};

#endif // NG_SENDRECV_H_
