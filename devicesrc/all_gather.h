// all_gather.h — AllGather, RING, PAT (pat.h) and DIRECT (direct.h) (bytes): rank r's sendbuff lands at
// recvbuff + r*count on every rank. Each rank copies its own block to
// recvbuff while sending it, then forwards the others' blocks nRanks-2 times.
// Work: count = bytes per rank, the channel handles [chanOffset,
// chanOffset+chanCount) of each block. In-place: sendbuff == recvbuff + rank*count.
#ifndef NG_ALL_GATHER_H_
#define NG_ALL_GATHER_H_
#include "ng_coll_common.h"
#include "pat.h"
#include "direct.h"

template <typename T, typename Op, int Proto>
__device__ __forceinline__ void ngAllGatherRing(struct ngShmem* sh) {
  const ngGroup g = ngWorkGroup(sh);
  if (g.tid >= g.nThreads) return;
  const struct ngDevWork w = sh->work;
  const int N = sh->comm.nRanks;
  const int64_t count = (int64_t)w.count;
  const T* src = reinterpret_cast<const T*>(w.sendbuff) + w.chanOffset;
  T* dst = reinterpret_cast<T*>(w.recvbuff) + w.chanOffset;
  const int64_t total = (int64_t)w.chanCount;
  const int me = sh->comm.rank;
  if (N == 1) {
    ngLocalReduceCopy<T, Op, Proto>(sh, g, src, dst + (int64_t)me * count, total, false);
    return;
  }
  int prev = sh->channel.ring.prev, next = sh->channel.ring.next;
  ngPrims<T, Op, Proto, 1, 1> prims(sh, g, &prev, 1, &next, 1);
  const int64_t cap = ngStepElems<T, Proto>(sh);
  for (int64_t off = 0; off < total; off += cap) {
    const int n = (int)ngMin64(cap, total - off);
    for (int j = 0; j < N; j++) {
      bool ok;
      if (j == 0) {
        ok = prims.step(src + off, dst + (int64_t)me * count + off, n, false, true, false);
      } else {
        T* d = dst + (int64_t)ngRingRank(sh, N - j) * count + off;
        ok = prims.step(nullptr, d, n, true, j < N - 1, false);
      }
      if (!ok) return;
    }
  }
  prims.finish();
}

template <typename T, typename Op, int Algo, int Proto>
struct ngCollFunc<NG_COLL_AllGather, T, Op, Algo, Proto> {
  static __device__ __forceinline__ void run(struct ngShmem* sh) {
    if constexpr (Algo == NG_ALGO_RING) ngAllGatherRing<T, Op, Proto>(sh);
    else if constexpr (Algo == NG_ALGO_PAT && Proto == NG_PROTO_SIMPLE) ngAllGatherPat<T, Op>(sh);
    else if constexpr (Algo == NG_ALGO_DIRECT && Proto == NG_PROTO_SIMPLE) ngAllGatherDirect<T>(sh);
    else ngReportUnsupported(sh);
  }
};

#endif // NG_ALL_GATHER_H_
