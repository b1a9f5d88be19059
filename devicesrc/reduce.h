// reduce.h — Reduce, RING: the reduction of every rank's sendbuff lands in
// the root's recvbuff. Data flows along the ring starting at the rank after
// the root and ending at the root, which applies op.post. Work: count =
// elements, the channel handles [chanOffset, chanOffset+chanCount); root = work.root.
#ifndef NG_REDUCE_H_
#define NG_REDUCE_H_
#include "ng_coll_common.h"

template <typename T, typename Op, int Proto>
__device__ __forceinline__ void ngReduceRing(struct ngShmem* sh) {
  ngRingRun<T, Op, Proto>(sh, /*post=*/true, /*ownBlock=*/false,
                          [&](ngGroup g, const struct ngDevWork& w, int, int, const ngChanSpan<T>& s) {
    const bool isRoot = sh->comm.rank == w.root;
    const bool isFirst = sh->channel.ring.prev == w.root;
    auto prims = ngRingPrims<T, Op, Proto>(sh, g);
    const int64_t cap = ngStepElems<T, Proto>(sh);
    for (int64_t off = 0; off < s.total; off += cap) {
      const int n = (int)ngMin64(cap, s.total - off);
      // The root receives, finishes and writes recvbuff; the others send,
      // and all but the first receive. One call site keeps the step inlined once.
      T* out = isRoot ? s.dst + off : nullptr;
      if (!prims.step(s.src + off, out, n, isRoot || !isFirst, !isRoot, isRoot)) return;
    }
    prims.finish();
  });
}

template <typename T, typename Op, int Algo, int Proto>
struct ngCollFunc<NG_COLL_Reduce, T, Op, Algo, Proto> {
  static __device__ __forceinline__ void run(struct ngShmem* sh) {
    if constexpr (Algo == NG_ALGO_RING) ngReduceRing<T, Op, Proto>(sh);
    else ngReportUnsupported(sh);
  }
};

#endif // NG_REDUCE_H_
