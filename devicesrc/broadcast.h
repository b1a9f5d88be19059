// broadcast.h — Broadcast, RING and DIRECT (direct.h) (bytes): the root's
// sendbuff is copied to every rank's recvbuff; RING passes it chunk by chunk
// along the ring starting at the root (the rank before the root only
// receives). Work: count = bytes, the channel
// handles [chanOffset, chanOffset+chanCount); root = work.root.
#ifndef NG_BROADCAST_H_
#define NG_BROADCAST_H_
#include "ng_coll_common.h"
#include "direct.h"

template <typename T, typename Op, int Proto>
__device__ __forceinline__ void ngBroadcastRing(struct ngShmem* sh) {
  ngRingRun<T, Op, Proto>(sh, /*post=*/false, /*ownBlock=*/false,
                          [&](ngGroup g, const struct ngDevWork& w, int, int, const ngChanSpan<T>& s) {
    const bool isRoot = sh->comm.rank == w.root;
    const bool isLast = sh->channel.ring.next == w.root;
    auto prims = ngRingPrims<T, Op, Proto>(sh, g);
    const int64_t cap = ngStepElems<T, Proto>(sh);
    for (int64_t off = 0; off < s.total; off += cap) {
      const int n = (int)ngMin64(cap, s.total - off);
      bool ok;
      if (isRoot) ok = prims.step(s.src + off, s.dst + off, n, false, true, false);
      else ok = prims.step(nullptr, s.dst + off, n, true, !isLast, false);
      if (!ok) return;
    }
    prims.finish();
  });
}

template <typename T, typename Op, int Algo, int Proto>
struct ngCollFunc<NG_COLL_Broadcast, T, Op, Algo, Proto> {
  static __device__ __forceinline__ void run(struct ngShmem* sh) {
    if constexpr (Algo == NG_ALGO_RING) ngBroadcastRing<T, Op, Proto>(sh);
    else if constexpr (Algo == NG_ALGO_DIRECT && Proto == NG_PROTO_SIMPLE) ngBroadcastDirect<T>(sh);
    else ngReportUnsupported(sh);
  }
};

#endif // NG_BROADCAST_H_
