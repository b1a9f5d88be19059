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
  ngRingRun<T, Op, Proto>(sh, /*post=*/false, /*ownBlock=*/true,
                          [&](ngGroup g, const struct ngDevWork& w, int N, int me, const ngChanSpan<T>& s) {
    const int64_t count = (int64_t)w.count;
    auto prims = ngRingPrims<T, Op, Proto>(sh, g);
    const int64_t cap = ngStepElems<T, Proto>(sh);
    for (int64_t off = 0; off < s.total; off += cap) {
      const int n = (int)ngMin64(cap, s.total - off);
      for (int j = 0; j < N; j++) {
        bool ok;
        if (j == 0) {
          ok = prims.step(s.src + off, s.dst + (int64_t)me * count + off, n, false, true, false);
        } else {
          T* d = s.dst + (int64_t)ngRingRank(sh, N - j) * count + off;
          ok = prims.step(nullptr, d, n, true, j < N - 1, false);
        }
        if (!ok) return;
      }
    }
    prims.finish();
  });
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
