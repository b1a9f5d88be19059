// reduce.h — Reduce, RING: the reduction of every rank's sendbuff lands in
// the root's recvbuff. Data flows along the ring starting at the rank after
// the root and ending at the root, which applies op.post. Work: count =
// elements, the channel handles [chanOffset, chanOffset+chanCount); root = work.root.
#ifndef NG_REDUCE_H_
#define NG_REDUCE_H_
#include "ng_coll_common.h"

template <typename T, typename Op, int Proto>
__device__ __forceinline__ void ngReduceRing(struct ngShmem* sh) {
  const ngGroup g = ngWorkGroup(sh);
  if (g.tid >= g.nThreads) return;
  const struct ngDevWork w = sh->work;
  const int N = sh->comm.nRanks;
  const T* src = reinterpret_cast<const T*>(w.sendbuff) + w.chanOffset;
  T* dst = reinterpret_cast<T*>(w.recvbuff) + w.chanOffset;
  const int64_t total = (int64_t)w.chanCount;
  if (N == 1) {
    ngLocalReduceCopy<T, Op, Proto>(sh, g, src, dst, total, true);
    return;
  }
  const bool isRoot = sh->comm.rank == w.root;
  const bool isFirst = sh->channel.ring.prev == w.root;
  int prev = sh->channel.ring.prev, next = sh->channel.ring.next;
  ngPrims<T, Op, Proto, 1, 1> prims(sh, g, &prev, 1, &next, 1);
  const int64_t cap = ngStepElems<T, Proto>(sh);
  for (int64_t off = 0; off < total; off += cap) {
    const int n = (int)ngMin64(cap, total - off);
    // The root receives, finishes and writes recvbuff; the others send,
    // and all but the first receive. One call site keeps the step inlined once.
    if (!prims.step(src + off, isRoot ? dst + off : nullptr, n, isRoot || !isFirst, !isRoot, isRoot)) return;
  }
  prims.finish();
}

template <typename T, typename Op, int Algo, int Proto>
struct ngCollFunc<NG_COLL_Reduce, T, Op, Algo, Proto> {
  static __device__ __forceinline__ void run(struct ngShmem* sh) {
    if constexpr (Algo == NG_ALGO_RING) ngReduceRing<T, Op, Proto>(sh);
    else ngReportUnsupported(sh);
  }
};

#endif // NG_REDUCE_H_
