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
// the connection's ptrExchange slots ([0] pointer, [2] bytes, [3] the whole
// message's bytes, then [1] = r+1 as the generation); the sender, at the
// same step (both count the connection's steps), waits for generation s+1,
// copies, writes its own message's bytes into [3], fences and posts
// tail = s+1; the receiver waits for it, reads [3] and returns the credit
// (head = r+1). Both step counters advance by one, so FIFO works before and
// after stay in sequence.
//
// Size mismatch (direct mode): every part carries the sizes of the whole
// messages (work.chanOffset: the Send's, work.redOpArg: the Recv's). A Send
// and a Recv of different sizes may split into different numbers of parts,
// so some parts of one side have no partner and would wait forever; but
// part 0 of both always meet. A sender whose part or message differs from
// the receiver's copies nothing, still posts (writing [3] so that the
// receiver sees the mismatch too) and calls ngP2PMismatch; a receiver whose
// [3] differs from its message calls it as well. ngP2PMismatch records
// NG_DEV_ERR_BAD_WORK and sets the rank's abort flag, so that the rank's
// parts on other channels stop waiting: both ranks end with the error, and
// nothing lands in the receive buffer from a mismatched part.
//
// When both directions of a work are direct the block does not split: it
// publishes its receive buffer first (a store, no wait), then the whole
// block copies the send (ngDirectCopy: 16-byte packs, unrolled), then it
// waits for its own receive. Every rank publishes before it waits, so the
// pairs of a round never wait on one another in a cycle.
//
// By window (ranks in other processes, NG_CONN_XPROC connections, a
// communicator with NG_DIRECT_WINDOWS; SIMPLE). A peer's raw pointers mean
// nothing here, but a buffer in a registered window does: the receiver
// copies from the sender's sendbuff through its own mapping of the window.
// Only the sendbuff needs a window (the host flags the work
// NG_WORK_P2P_SEND_WIN with the window in root). At its step s the sender
// publishes in ptrExchange (the receiver's memory): [0] the window reference
// (window << NG_DIRECT_WIN_SHIFT | offset, bit 63), [2] the part's bytes,
// [3] the Send's bytes, fence, [1] = s+1; a sender without a window
// publishes nothing and runs the FIFO at once. The receiver, at its step r
// (the same value: both count the connection's steps), waits for whichever
// comes first: [1] == r+1 (the sender published for this very step: copy
// from the window) or tail >= r+1 (the sender posted a FIFO step: run the
// FIFO). The two exclude each other: a publishing sender posts tail = s+1
// only after the receiver returned the credit, and a FIFO sender writes no
// generation at this step (an older one is at most r, a later one comes
// only after tail passed r+1). The receiver compares the sizes as direct
// mode does, copies (or not), writes [4] (its Recv's bytes, or ~the Send's
// when it copied nothing though the messages agree: a part mismatch or a
// reference that does not resolve here), fences and stores head = r+1; the
// sender waits for head >= s+1, compares [4] with its Send, posts tail =
// s+1 and steps on. A FIFO sender pays nothing; a receiver polls one more
// word before its first step. Neither waits for the other in a cycle:
// every rank publishes before it waits, and a rank whose send runs the FIFO
// splits its block so that its sending half needs no receive to start.
// (runtime/enqueue's TestP2PWindowHandshake simulates this protocol.)
#ifndef NG_SENDRECV_H_
#define NG_SENDRECV_H_
#include "ng_coll_common.h"
#include "direct.h"

__device__ __forceinline__ void ngFenceFor(const struct ngConnInfo* ci) {
  if (ci->flags & NG_CONN_SAME_GPU) __threadfence();
  else __threadfence_system();
}

// ngP2PMismatch (one thread) reports a Send and a Recv of different sizes:
// it records NG_DEV_ERR_BAD_WORK first (so that it, not NG_DEV_ERR_ABORTED,
// is the rank's error), then sets the rank's abort flag, so that its parts
// on other channels, which may wait for parts the peer does not have, stop.
__device__ __forceinline__ void ngP2PMismatch(struct ngShmem* sh) {
  ngRecordError(sh, NG_DEV_ERR_BAD_WORK);
  __threadfence_system();
  volatile uint32_t* af = reinterpret_cast<volatile uint32_t*>(sh->comm.abortFlag);
  if (af) *af = 1u;
  ngSetAborted(sh);
}

// ngDirectPublish (thread 0 of the receiving group) publishes dst (total
// elements) and msg (the whole Recv's bytes) for the sender of connection
// ci at the connection's step.
template <typename T>
__device__ __forceinline__ void ngDirectPublish(const struct ngConnInfo* ci, T* dst, int64_t total, uint64_t msg) {
  uint64_t* xch = reinterpret_cast<uint64_t*>(ci->ptrExchange);
  const uint64_t r = ngLdVolatile(reinterpret_cast<const uint64_t*>(ci->step));
  ngStVolatile(xch, (uint64_t)(uintptr_t)dst);
  ngStVolatile(xch + 2, (uint64_t)total * sizeof(T));
  ngStVolatile(xch + 3, msg);
  ngFenceFor(ci);
  ngStVolatile(xch + 1, r + 1);
}

// ngDirectSend copies total elements from src into the receiver's published
// buffer with every thread of g; msg is the whole Send's bytes. A receiver
// that disagrees on the part's or the message's size gets nothing (see the
// header). Returns false on abort.
template <typename T>
__device__ __forceinline__ bool ngDirectSend(struct ngShmem* sh, ngGroup g, const struct ngConnInfo* ci, const T* src,
                                             int64_t total, uint64_t msg) {
  uint64_t* stepPtr = reinterpret_cast<uint64_t*>(ci->step);
  uint64_t* xch = reinterpret_cast<uint64_t*>(ci->ptrExchange);
  // Thread 0 waits for the receiver and hands its buffer to the group
  // through shared memory (the DIRECT slots, which a SendRecv work does not
  // otherwise use; a split block's receiving half never touches them).
  if (g.tid == 0) {
    const uint64_t s = ngLdVolatile(stepPtr);
    uint64_t dst = 0, room = 0, theirs = 0;
    if (ngWaitGE(sh, xch + 1, s + 1)) {
      __threadfence(); // the pointer and sizes were written before the generation
      dst = ngLdVolatile(xch);
      room = ngLdVolatile(xch + 2);
      theirs = ngLdVolatile(xch + 3);
    }
    const bool ok = room == (uint64_t)total * sizeof(T) && theirs == msg;
    sh->directSend[0] = dst;
    sh->directRecv[0] = ok ? 1 : 0;
    // What the receiver reads in [3]: our message's bytes, or, when only
    // the parts disagree, a size that differs from its own.
    sh->directSend[1] = (ok || msg != theirs) ? msg : ~theirs;
  }
  ngBarrier(g);
  if (ngAborted(sh)) return false;
  T* dst = reinterpret_cast<T*>(sh->directSend[0]);
  const bool ok = sh->directRecv[0] != 0;
  ngDirectCopy<T>(g, src, dst, ok ? total : 0);
  ngBarrier(g);
  if (g.tid == 0) {
    const uint64_t s = ngLdVolatile(stepPtr);
    ngStVolatile(xch + 3, sh->directSend[1]);
    if (!ok) ngP2PMismatch(sh);
    ngFenceFor(ci);
    ngStVolatile(reinterpret_cast<uint64_t*>(ci->tail), s + 1);
    ngStVolatile(stepPtr, s + 1);
  }
  return true;
}

// ngDirectRecv waits (thread 0 of g) for the sender's copy into the
// buffer published at the connection's step, checks the sender's message
// size (msg is the whole Recv's bytes) and returns the credit. publish:
// publish the buffer first (else ngDirectPublish did). Returns false on
// abort or mismatch.
template <typename T>
__device__ __forceinline__ bool ngDirectRecv(struct ngShmem* sh, ngGroup g, const struct ngConnInfo* ci, T* dst,
                                             int64_t total, uint64_t msg, bool publish) {
  uint64_t* stepPtr = reinterpret_cast<uint64_t*>(ci->step);
  bool ok = true;
  if (g.tid == 0) {
    if (publish) ngDirectPublish<T>(ci, dst, total, msg);
    const uint64_t r = ngLdVolatile(stepPtr);
    ok = ngWaitGE(sh, reinterpret_cast<const uint64_t*>(ci->tail), r + 1);
    __threadfence();
    if (ok) {
      // The sender wrote [3] before it fenced and posted tail; we publish
      // the next [3] only at our next step, after this read.
      const uint64_t theirs = ngLdVolatile(reinterpret_cast<const uint64_t*>(ci->ptrExchange) + 3);
      ngStVolatile(reinterpret_cast<uint64_t*>(ci->head), r + 1);
      ngStVolatile(stepPtr, r + 1);
      if (theirs != msg) {
        ngP2PMismatch(sh);
        ok = false;
      }
    }
  }
  ngBarrier(g);
  return ok && !ngAborted(sh);
}

// ngXwinConn reports whether a SendRecv on connection ci may run by window
// (see the header). Both ends of a connection answer alike: its flags and
// the communicator's DIRECT state are agreed at setup.
__device__ __forceinline__ bool ngXwinConn(struct ngShmem* sh, const struct ngConnInfo* ci) {
  return (ci->flags & NG_CONN_XPROC) && (sh->comm.directFlags & NG_DIRECT_WINDOWS) && sh->comm.direct != 0;
}

// ngXwinSendRef is the window reference of the work's sendbuff, or 0 (no
// window: the send runs the FIFO).
__device__ __forceinline__ uint64_t ngXwinSendRef(struct ngShmem* sh) {
  const struct ngDevWork& w = sh->work;
  if (!(w.flags & NG_WORK_P2P_SEND_WIN) || w.root < 0) return 0;
  const uint64_t base = ngDirectWinBase(sh, (uint64_t)w.root, sh->comm.rank), a = w.sendbuff;
  if (base == 0 || a < base || a - base > NG_DIRECT_WIN_OFF_MASK) return 0;
  return NG_DIRECT_WIN_REF | ((uint64_t)w.root << NG_DIRECT_WIN_SHIFT) | (a - base);
}

// ngXwinPublish (one thread) publishes the send's window reference at the
// connection's step.
__device__ __forceinline__ void ngXwinPublish(const struct ngConnInfo* ci, uint64_t ref, uint64_t bytes, uint64_t msg) {
  uint64_t* xch = reinterpret_cast<uint64_t*>(ci->ptrExchange);
  const uint64_t s = ngLdVolatile(reinterpret_cast<const uint64_t*>(ci->step));
  ngStVolatile(xch, ref);
  ngStVolatile(xch + 2, bytes);
  ngStVolatile(xch + 3, msg);
  __threadfence_system();
  ngStVolatile(xch + 1, s + 1);
}

// ngXwinSendDone (one thread) waits until the receiver copied the
// published send (or refused it), checks its verdict and posts the step.
__device__ __forceinline__ void ngXwinSendDone(struct ngShmem* sh, const struct ngConnInfo* ci, uint64_t msg) {
  uint64_t* stepPtr = reinterpret_cast<uint64_t*>(ci->step);
  const uint64_t s = ngLdVolatile(stepPtr);
  if (!ngWaitGE(sh, reinterpret_cast<const uint64_t*>(ci->head), s + 1)) return;
  __threadfence_system();
  const uint64_t theirs = ngLdVolatile(reinterpret_cast<const uint64_t*>(ci->ptrExchange) + 4);
  ngStVolatile(reinterpret_cast<uint64_t*>(ci->tail), s + 1);
  ngStVolatile(stepPtr, s + 1);
  if (theirs != msg) ngP2PMismatch(sh);
}

// ngXwinRecv receives total elements into dst from peer on connection ci
// when the sender published a window (see the header), with every thread
// of g. Returns false when the sender runs the FIFO instead (nothing done:
// the caller runs it), true when the receive is over (copied, refused with
// the error recorded, or aborted).
template <typename T>
__device__ __forceinline__ bool ngXwinRecv(struct ngShmem* sh, ngGroup g, const struct ngConnInfo* ci, int peer, T* dst,
                                           int64_t total, uint64_t msg) {
  const uint64_t* xch = reinterpret_cast<const uint64_t*>(ci->ptrExchange);
  uint64_t* stepPtr = reinterpret_cast<uint64_t*>(ci->step);
  // sh->directRecv[1..4]: mode (0 FIFO, 1 window, 2 abort), source,
  // whether to copy, the verdict for [4]. [0] and directSend belong to a
  // direct-mode sending half that may run beside this one.
  if (g.tid == 0) {
    const uint64_t r = ngLdVolatile(stepPtr);
    const uint64_t* tail = reinterpret_cast<const uint64_t*>(ci->tail);
    uint64_t mode = 2, src = 0, ok = 0, verdict = 0;
    for (int spins = 0;;) {
      if (ngLdVolatile(xch + 1) == r + 1) {
        __threadfence_system(); // the reference and sizes were written before the generation
        const uint64_t ref = ngLdVolatile(xch), bytes = ngLdVolatile(xch + 2), theirs = ngLdVolatile(xch + 3);
        src = ngDirectWinResolve(sh, ref, peer);
        ok = src != 0 && bytes == (uint64_t)total * sizeof(T) && theirs == msg;
        verdict = (ok || theirs != msg) ? msg : ~theirs;
        mode = 1;
        break;
      }
      if (ngLdVolatile(tail) >= r + 1) {
        mode = 0;
        break;
      }
      if (++spins == NG_SPINS_BEFORE_ABORT_CHECK) {
        spins = 0;
        if (ngCheckAbort(sh)) break;
      }
    }
    sh->directRecv[1] = mode;
    sh->directRecv[2] = src;
    sh->directRecv[3] = ok;
    sh->directRecv[4] = verdict;
  }
  ngBarrier(g);
  // Every thread branches on what thread 0 decided, never on sh->aborted:
  // in a split block the sending half may set it at any time, and warps
  // that read it apart would wait at different barriers for good.
  const uint64_t mode = sh->directRecv[1];
  if (mode == 0) return false;
  if (mode == 2) return true;
  const bool ok = sh->directRecv[3] != 0;
  ngDirectCopy<T>(g, reinterpret_cast<const T*>(sh->directRecv[2]), dst, ok ? total : 0);
  ngBarrier(g);
  if (g.tid == 0) {
    const uint64_t r = ngLdVolatile(stepPtr);
    ngStVolatile(const_cast<uint64_t*>(xch) + 4, sh->directRecv[4]);
    if (!ok) ngP2PMismatch(sh);
    __threadfence_system(); // the verdict, and every load from the sender's buffer, before the credit
    ngStVolatile(reinterpret_cast<uint64_t*>(ci->head), r + 1);
    ngStVolatile(stepPtr, r + 1);
  }
  ngBarrier(g);
  return true;
}

// ngFifoRecv receives total elements into dst from recvPeer through the
// connection's FIFO with every thread of g.
template <typename T, typename Op, int Proto>
__device__ __forceinline__ void ngFifoRecv(struct ngShmem* sh, ngGroup g, int recvPeer, T* dst, int64_t total) {
  const int64_t cap = ngStepElems<T, Proto>(sh);
  ngPrims<T, Op, Proto, 1, 1> prims(sh, g, &recvPeer, 1, nullptr, 0);
  for (int64_t off = 0; off < total; off += cap) {
    if (!prims.step(nullptr, dst + off, (int)ngMin64(cap, total - off), true, false, false)) return;
  }
  prims.finish();
}

// ngRecvPart runs the receiving side of a work with every thread of g: by
// window when the sender published one, else direct mode or the FIFO.
template <typename T, typename Op, int Proto>
__device__ __forceinline__ void ngRecvPart(struct ngShmem* sh, ngGroup g, const struct ngDevWork& w) {
  T* dst = reinterpret_cast<T*>(w.recvbuff);
  const int64_t total = (int64_t)w.chanCount;
  int recvPeer = w.recvPeer;
  const struct ngConnInfo* ci = ngRecvConnInfo(sh, recvPeer);
  if (Proto == NG_PROTO_SIMPLE && (ci->flags & NG_CONN_DIRECT)) {
    ngDirectRecv<T>(sh, g, ci, dst, total, w.redOpArg, true);
    return;
  }
  if (Proto == NG_PROTO_SIMPLE && ngXwinConn(sh, ci) && ngXwinRecv<T>(sh, g, ci, recvPeer, dst, total, w.redOpArg))
    return;
  ngFifoRecv<T, Op, Proto>(sh, g, recvPeer, dst, total);
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
    if (tid == 0) ngDirectPublish<T>(rci, dst, rtotal, w.redOpArg);
    if (!ngDirectSend<T>(sh, all, ngSendConnInfo(sh, sendPeer), reinterpret_cast<const T*>(w.sendbuff), (int64_t)w.count,
                         w.chanOffset))
      return;
    ngDirectRecv<T>(sh, all, rci, dst, rtotal, w.redOpArg, false);
    return;
  }
  if (Proto == NG_PROTO_SIMPLE && doSend && ngXwinConn(sh, ngSendConnInfo(sh, sendPeer))) {
    const uint64_t ref = ngXwinSendRef(sh);
    if (ref != 0) {
      // Send by window: publish (a store, no wait), receive with the whole
      // block, then wait until the receiver has copied the send.
      if (tid >= nt) return;
      const ngGroup all = {tid, nt, 1};
      const struct ngConnInfo* sci = ngSendConnInfo(sh, sendPeer);
      if (tid == 0) ngXwinPublish(sci, ref, w.count * sizeof(T), w.chanOffset);
      if (doRecv) ngRecvPart<T, Op, Proto>(sh, all, w);
      if (tid == 0 && !ngAborted(sh)) ngXwinSendDone(sh, sci, w.chanOffset);
      ngBarrier(all);
      return;
    }
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
      ngDirectSend<T>(sh, g, ci, src, total, w.chanOffset);
      return;
    }
    ngPrims<T, Op, Proto, 1, 1> prims(sh, g, nullptr, 0, &sendPeer, 1);
    for (int64_t off = 0; off < total; off += cap) {
      if (!prims.step(src + off, nullptr, (int)ngMin64(cap, total - off), false, true, false)) return;
    }
    prims.finish();
  } else {
    ngRecvPart<T, Op, Proto>(sh, g, w);
  }
}

template <typename T, typename Op, int Algo, int Proto>
struct ngCollFunc<NG_COLL_SendRecv, T, Op, Algo, Proto> {
  static __device__ __forceinline__ void run(struct ngShmem* sh) { ngSendRecvRun<T, Op, Proto>(sh); }
};

#endif // NG_SENDRECV_H_
