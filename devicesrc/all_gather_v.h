// all_gather_v.h — AllGatherV, RING (bytes): rank r contributes counts[r]
// bytes that land at recvbuff + displs[r] on every rank; counts and displs
// (uint64, nRanks each, counts first) are at the device pointer redOpArg.
// Each block is split into work.count parts; this channel moves part
// work.chanOffset of every block: bytes [ngPartBound(c, p, P),
// ngPartBound(c, p+1, P)) of the block — interior bounds rounded down to 16
// bytes. Blocks of different sizes take different numbers of steps; every
// rank runs max-over-blocks steps per hop, some of them empty.
#ifndef NG_ALL_GATHER_V_H_
#define NG_ALL_GATHER_V_H_
#include "ng_coll_common.h"

template <typename T, typename Op, int Proto>
__device__ __forceinline__ void ngAllGatherVRing(struct ngShmem* sh) {
  const ngGroup g = ngWorkGroup(sh);
  if (g.tid >= g.nThreads) return;
  const struct ngDevWork w = sh->work;
  const int N = sh->comm.nRanks;
  const uint64_t* counts = reinterpret_cast<const uint64_t*>(w.redOpArg);
  const uint64_t* displs = counts + N;
  const uint64_t P = w.count, part = w.chanOffset;
  const T* src = reinterpret_cast<const T*>(w.sendbuff);
  T* dst = reinterpret_cast<T*>(w.recvbuff);
  const int me = sh->comm.rank;
  auto lo = [&](int r) -> int64_t { return (int64_t)ngPartBound(counts[r], part, P); };
  auto len = [&](int r) -> int64_t { return (int64_t)ngPartBound(counts[r], part + 1, P) - lo(r); };
  if (N == 1) {
    ngLocalReduceCopy<T, Op, Proto>(sh, g, src + lo(me), dst + displs[me] + lo(me), len(me), false);
    return;
  }
  int prev = sh->channel.ring.prev, next = sh->channel.ring.next;
  ngPrims<T, Op, Proto, 1, 1> prims(sh, g, &prev, 1, &next, 1);
  const int64_t cap = ngStepElems<T, Proto>(sh);
  int64_t maxLen = 0;
  for (int r = 0; r < N; r++) maxLen = len(r) > maxLen ? len(r) : maxLen;
  for (int64_t off = 0; off < maxLen; off += cap) {
    for (int j = 0; j < N; j++) {
      const int b = j == 0 ? me : ngRingRank(sh, N - j);
      const int64_t l = len(b);
      const int n = off >= l ? 0 : (int)ngMin64(cap, l - off);
      T* d = dst + displs[b] + lo(b) + off;
      bool ok;
      if (j == 0) ok = prims.step(src + lo(me) + off, d, n, false, true, false);
      else ok = prims.step(nullptr, d, n, true, j < N - 1, false);
      if (!ok) return;
    }
  }
  prims.finish();
}

template <typename T, typename Op, int Algo, int Proto>
struct ngCollFunc<NG_COLL_AllGatherV, T, Op, Algo, Proto> {
  static __device__ __forceinline__ void run(struct ngShmem* sh) {
    if constexpr (Algo == NG_ALGO_RING) ngAllGatherVRing<T, Op, Proto>(sh);
    else ngReportUnsupported(sh);
  }
};

#endif // NG_ALL_GATHER_V_H_
