// reduce_scatter.h — ReduceScatter, RING, PAT (pat.h) and DIRECT (direct.h): block b of the result (count
// elements, b = rank) is the reduction of every rank's sendbuff block b.
// Each chunk travels nRanks-1 hops; the final hop lands in recvbuff.
// Work: count = elements per rank, sendbuff holds nRanks*count, the channel
// handles [chanOffset, chanOffset+chanCount) of each block.
#ifndef NG_REDUCE_SCATTER_H_
#define NG_REDUCE_SCATTER_H_
#include "ng_coll_common.h"
#include "pat.h"
#include "direct.h"

template <typename T, typename Op, int Proto>
__device__ __forceinline__ void ngReduceScatterRing(struct ngShmem* sh) {
  ngRingRun<T, Op, Proto>(sh, /*post=*/true, /*ownBlock=*/false,
                          [&](ngGroup g, const struct ngDevWork& w, int N, int me, const ngChanSpan<T>& s) {
    const int64_t count = (int64_t)w.count;
    auto prims = ngRingPrims<T, Op, Proto>(sh, g);
    const int64_t cap = ngStepElems<T, Proto>(sh);
    for (int64_t off = 0; off < s.total; off += cap) {
      const int n = (int)ngMin64(cap, s.total - off);
      for (int j = 0; j < N; j++) {
        // Step j reduces block ngRingRank(N-1-j) (our own at the last step,
        // which lands in recvbuff); the first step only sends, the last only
        // receives. One call site keeps the step inlined once.
        const bool last = j == N - 1;
        const int b = last ? me : ngRingRank(sh, N - 1 - j);
        if (!prims.step(s.src + (int64_t)b * count + off, last ? s.dst + off : nullptr, n, j > 0, !last, last)) return;
      }
    }
    prims.finish();
  });
}

template <typename T, typename Op, int Algo, int Proto>
struct ngCollFunc<NG_COLL_ReduceScatter, T, Op, Algo, Proto> {
  static __device__ __forceinline__ void run(struct ngShmem* sh) {
    if constexpr (Algo == NG_ALGO_RING) ngReduceScatterRing<T, Op, Proto>(sh);
    else if constexpr (Algo == NG_ALGO_PAT && Proto == NG_PROTO_SIMPLE) ngReduceScatterPat<T, Op>(sh);
    else if constexpr (Algo == NG_ALGO_DIRECT && Proto == NG_PROTO_SIMPLE) ngReduceScatterDirect<T, Op>(sh);
    else ngReportUnsupported(sh);
  }
};

#endif // NG_REDUCE_SCATTER_H_
