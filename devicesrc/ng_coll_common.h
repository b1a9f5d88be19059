// ng_coll_common.h — pieces the collective headers share: the per-collective
// dispatch on algorithm/protocol (ngCollFunc specialisations live in each
// collective's header) and small helpers for chunking a channel's share.
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

#endif // NG_COLL_COMMON_H_
