// ng_coll_common.h — pieces the collective headers share: the per-collective
// dispatch on algorithm/protocol (ngCollFunc specialisations live in each
// collective's header), a channel's share of the buffers, the frame of a
// RING collective and small helpers for chunking a channel's share.
//
// Chunking rule (identical on every rank, so step sizes always match):
//   cap  = ngStepElems<T, Proto>  (one FIFO slot of comm.buffSizes[Proto])
//   ring AllReduce: per loop, chunk = min(cap, alignUp(ceil(rem/nRanks), 16B));
//   everything else: chunk = min(cap, rem).
// Every step runs on every rank even when it moves 0 elements.
#ifndef NG_COLL_COMMON_H_
#define NG_COLL_COMMON_H_

__device__ __forceinline__ int ngMod(int a, int n) { return ((a % n) + n) % n; }

// Bounds of part p of a block of b bytes split into nParts parts (AllGatherV):
// [ngPartBound(b,p,n), ngPartBound(b,p+1,n)), interior bounds rounded down to 16 bytes.
__device__ __forceinline__ uint64_t ngPartBound(uint64_t b, uint64_t p, uint64_t nParts) {
  if (p >= nParts) return b;
  return (b * p / nParts) & ~(uint64_t)15;
}

// ngChanSpan is a channel's share of the user buffers: elements
// [chanOffset, chanOffset+chanCount) of sendbuff (src) and recvbuff (dst),
// as T. For AllGather and ReduceScatter the share lies in every block of
// work.count elements: block b's is src or dst + b*count.
template <typename T>
struct ngChanSpan {
  const T* src;
  T* dst;
  int64_t total;
  __device__ __forceinline__ explicit ngChanSpan(const struct ngDevWork& w)
      : src(reinterpret_cast<const T*>(w.sendbuff) + w.chanOffset),
        dst(reinterpret_cast<T*>(w.recvbuff) + w.chanOffset),
        total((int64_t)w.chanCount) {}
};

// ngRingRun runs a RING collective on this channel. The threads outside the
// work's group leave. A single rank copies its share itself: src to dst,
// applying op.post when post, into its own block of recvbuff (rank *
// work.count elements on) when ownBlock (AllGather). Otherwise body(g, w,
// nRanks, rank, span) runs the steps, on prims from ngRingPrims.
template <typename T, typename Op, int Proto, typename Body>
__device__ __forceinline__ void ngRingRun(struct ngShmem* sh, bool post, bool ownBlock, Body body) {
  const ngGroup g = ngWorkGroup(sh);
  if (g.tid >= g.nThreads) return;
  const struct ngDevWork w = sh->work;
  const int N = sh->comm.nRanks, me = sh->comm.rank;
  const ngChanSpan<T> s(w);
  if (N == 1) {
    T* out = ownBlock ? s.dst + (int64_t)me * (int64_t)w.count : s.dst;
    ngLocalReduceCopy<T, Op, Proto>(sh, g, s.src, out, s.total, post);
    return;
  }
  body(g, w, N, me, s);
}

// ngRingPrims returns prims on this channel's ring: receive from prev, send
// to next.
template <typename T, typename Op, int Proto>
__device__ __forceinline__ ngPrims<T, Op, Proto, 1, 1> ngRingPrims(struct ngShmem* sh, ngGroup g) {
  int prev = sh->channel.ring.prev, next = sh->channel.ring.next;
  return ngPrims<T, Op, Proto, 1, 1>(sh, g, &prev, 1, &next, 1);
}

#endif // NG_COLL_COMMON_H_
