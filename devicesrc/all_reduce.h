// all_reduce.h — AllReduce: RING (reduce-scatter then all-gather around the
// ring, 2*(nRanks-1) steps per loop; on exactly 2 ranks with LL and a
// channel share of at most NG_ALLREDUCE_ONEHOP_BYTES, or with SIMPLE,
// NG_WORK_ONEHOP and a share that fits one slot, one hop: each rank
// sends its whole input and reduces the peer's with its own) and TREE (reduce up the tree, then
// broadcast down, interleaved chunk by chunk; the root turns its reduced chunk
// around in the same step).
// Work: count = elements of the whole buffer, the channel handles
// [chanOffset, chanOffset+chanCount). In-place when sendbuff == recvbuff.
#ifndef NG_ALL_REDUCE_H_
#define NG_ALL_REDUCE_H_
#include "ng_coll_common.h"
#include "direct.h"

template <typename T, typename Op, int Proto>
__device__ __forceinline__ void ngAllReduceRing(struct ngShmem* sh) {
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
  int prev = sh->channel.ring.prev, next = sh->channel.ring.next;
  const int idx = sh->channel.ring.index;
  ngPrims<T, Op, Proto, 1, 1> prims(sh, g, &prev, 1, &next, 1);
  const int64_t cap = ngStepElems<T, Proto>(sh);
  if constexpr (Proto == NG_PROTO_LL) {
    // One hop on 2 ranks (prev == next): both ranks decide it from values
    // they share (nRanks, this channel's share, the protocol) and take the
    // operands in ring order (position 0's first), so both write the same
    // bits. It sends as many bytes as the ring's two steps do.
    if (N == 2 && total * (int64_t)sizeof(T) <= (int64_t)NG_ALLREDUCE_ONEHOP_BYTES) {
      for (int64_t off = 0; off < total; off += cap) {
        const int n = (int)ngMin64(cap, total - off);
        if (!prims.step(src + off, dst + off, n, true, true, true, idx == 0 ? 1 : 2)) return;
      }
      prims.finish();
      return;
    }
  }
  // SIMPLE's one hop on 2 ranks where the host allows it (NG_WORK_ONEHOP)
  // and the share fits one slot: step 0 sends the input, step 1 reduces
  // the peer's with it. Both ranks decide from the work and the slot size
  // they share; the send waits for nothing the peer's receive waits for,
  // so neither can block the other; two operands reduce to the same bits
  // in either order. It runs through the ring's one call site below,
  // which keeps the step inlined once.
  const bool hop = Proto == NG_PROTO_SIMPLE && N == 2 && (w.flags & NG_WORK_ONEHOP) && total <= cap;
  const int64_t gran = ngGranule<T>();
  for (int64_t off = 0; off < total;) {
    const int64_t rem = total - off;
    const int64_t chunk = hop ? rem : ngMin64(cap, ngAlignUp((rem + N - 1) / N, gran));
    const int last = hop ? 1 : 2 * N - 2;
    for (int j = 0; j <= last; j++) {
      const int c = hop ? 0 : ngMod(idx - 1 - j, N);
      const int64_t s = off + (int64_t)c * chunk;
      const int n = s >= total ? 0 : (int)ngMin64(chunk, total - s);
      // Reduce-scatter steps read the input, the last of them and the
      // all-gather steps write the output; the first step only sends, the
      // last only receives.
      const T* in = hop || j < N ? src + s : nullptr;
      T* out = (hop ? j == 1 : j >= N - 1) ? dst + s : nullptr;
      const bool doRecv = hop ? j == 1 : j > 0;
      const bool doSend = hop ? j == 0 : j < 2 * N - 2;
      if (!prims.step(in, out, n, doRecv, doSend, hop ? j == 1 : j == N - 1)) return;
    }
    off += hop ? chunk : chunk * N;
  }
  prims.finish();
}

template <typename T, typename Op, int Proto>
__device__ __forceinline__ void ngAllReduceTree(struct ngShmem* sh) {
  const ngGroup g = ngWorkGroup(sh);
  if (g.tid >= g.nThreads) return;
  const struct ngDevWork w = sh->work;
  const ngChanSpan<T> s(w);
  int up = sh->channel.tree.up;
  int down[NG_MAX_TREE_ARITY];
  int nDown = 0;
#pragma unroll
  for (int i = 0; i < NG_MAX_TREE_ARITY; i++) {
    int d = sh->channel.tree.down[i];
    down[i] = -1;
    if (d >= 0) down[nDown++] = d;
  }
  if (sh->comm.nRanks == 1 || (up < 0 && nDown == 0)) {
    ngLocalReduceCopy<T, Op, Proto>(sh, g, s.src, s.dst, s.total, true);
    return;
  }
  const int64_t cap = ngStepElems<T, Proto>(sh);
  if (up < 0) {
    // Root: receive from the children, reduce with our input, finish, send back down.
    ngPrims<T, Op, Proto, NG_MAX_TREE_ARITY, NG_MAX_TREE_ARITY> prims(sh, g, down, nDown, down, nDown);
    for (int64_t off = 0; off < s.total; off += cap) {
      const int n = (int)ngMin64(cap, s.total - off);
      if (!prims.step(s.src + off, s.dst + off, n, true, true, true)) return;
    }
    prims.finish();
    return;
  }
  // Up and down interleaved: chunk k goes up, then chunk k-lag comes down. A
  // node that sent every chunk up before receiving any would deadlock once a
  // work has more than NG_STEPS chunks (the root couples its receive from a
  // child with its send to that child); lag <= NG_STEPS-2 keeps every link's
  // window open while still pipelining across the tree's depth.
  ngPrims<T, Op, Proto, NG_MAX_TREE_ARITY, 1> upP(sh, g, down, nDown, &up, 1);
  ngPrims<T, Op, Proto, 1, NG_MAX_TREE_ARITY> dnP(sh, g, &up, 1, down, nDown);
  const int64_t nChunks = (s.total + cap - 1) / cap;
  constexpr int64_t lag = NG_STEPS / 2;
  for (int64_t k = 0; k < nChunks + lag; k++) {
    if (k < nChunks) {
      const int64_t off = k * cap;
      if (!upP.step(s.src + off, nullptr, (int)ngMin64(cap, s.total - off), true, true, false)) return;
    }
    if (k >= lag) {
      const int64_t off = (k - lag) * cap;
      if (!dnP.step(nullptr, s.dst + off, (int)ngMin64(cap, s.total - off), true, true, false)) return;
    }
  }
  upP.finish();
  dnP.finish();
}

// ngAllReduceOnePassSlice runs slice `slice` of nSlices of a one-pass
// AllReduce (NG_ARGS_ONE_PASS): a multi-rank launch that holds every rank
// of its communicator, n ranks, rank p's buffers given by bufs.send(p) and
// bufs.recv(p). The buffers' 8-byte lines are cut into nSlices slices,
// one per block; the block's threads tid of nThreads reduce their lines
// of every rank's sendbuff, in rank order, and store the result into
// every rank's recvbuff. Slices are disjoint, so no block waits for
// another, in place or not. The line arithmetic is 32-bit: a one-pass
// call has at most OnePassMaxBytes (1 MiB) per rank and at most
// NG_MAX_CHANNELS slices, so lines * nSlices stays below 2^24.
template <typename T, typename Op, typename Bufs>
__device__ __forceinline__ void ngAllReduceOnePassSlice(const Op& op, const Bufs& bufs, int nbytes, int n, int nSlices,
                                                        int slice, int tid, int nThreads) {
  const unsigned nLines = ((unsigned)nbytes + 7) / 8;
  const unsigned lo = nLines * (unsigned)slice / (unsigned)nSlices;
  const unsigned hi = nLines * (unsigned)(slice + 1) / (unsigned)nSlices;
  for (unsigned line = lo + tid; line < hi; line += nThreads) {
    // Every rank's line is loaded before any is reduced, so that the loads
    // are in flight together (one memory latency, not nParts).
    uint64_t v[NG_LAUNCH_MAX_PARTS];
#pragma unroll
    for (int p = 0; p < NG_LAUNCH_MAX_PARTS; p++) {
      if (p < n) v[p] = ngLoadPack8<T, true>(reinterpret_cast<const T*>(bufs.send(p)), (int)line, nbytes);
    }
    uint64_t acc = ngPackPre<T>(op, v[0]);
#pragma unroll
    for (int p = 1; p < NG_LAUNCH_MAX_PARTS; p++) {
      if (p < n) acc = ngPackReduce<T>(op, acc, ngPackPre<T>(op, v[p]));
    }
    const uint64_t out = ngPackPost<T>(op, acc);
    for (int p = 0; p < n; p++) ngStorePack8(reinterpret_cast<T*>(bufs.recv(p)), (int)line, nbytes, out);
  }
}

// ngOnePassShBufs: the ranks' buffers as ngKernelMain copied them into
// shared memory.
struct ngOnePassShBufs {
  const struct ngShmem* sh;
  __device__ __forceinline__ uint64_t send(int p) const { return sh->directSend[p]; }
  __device__ __forceinline__ uint64_t recv(int p) const { return sh->directRecv[p]; }
};

// ngOnePassArgBufs: the ranks' buffers in the kernel arguments (works[p]
// is rank p's work).
struct ngOnePassArgBufs {
  const struct ngDevWork* works;
  __device__ __forceinline__ uint64_t send(int p) const { return works[p].sendbuff; }
  __device__ __forceinline__ uint64_t recv(int p) const { return works[p].recvbuff; }
};

// ngAllReduceOnePass runs this block's slice of a one-pass AllReduce
// reached through the work loop: on a generic kernel, or a signed type's
// call (no one-pass entry: NG_ARGS_ONE_PASS_ENTRY).
template <typename T, typename Op>
__device__ __forceinline__ void ngAllReduceOnePass(struct ngShmem* sh) {
  const ngGroup g = ngWorkGroup(sh);
  if (g.tid >= g.nThreads) return;
  const Op op(sh->work);
  ngAllReduceOnePassSlice<T>(op, ngOnePassShBufs{sh}, (int)(sh->work.count * sizeof(T)), sh->onePassRanks,
                             sh->onePassRanks, sh->onePassSlice, g.tid, g.nThreads);
}

// ngAllReduceOnePassArgs runs slice v of a one-pass AllReduce with op Op
// straight from the kernel arguments, with every thread of the block: one
// slice per slot of the launch (channelMask), which the host sizes to the
// call (enqueue's onePassWide), not to the ranks.
template <typename T, typename Op>
__device__ __forceinline__ void ngAllReduceOnePassArgs(const struct ngKernelArgs& args, int v) {
  // What the launch's earlier grids write (user buffers, a PreMulSum
  // scalar behind a pointer) is read only after they finish.
  ngWaitPriorGrids();
  if (args.flags & NG_ARGS_TRIGGER_EARLY) ngTriggerDependents();
  const struct ngDevWork& w = args.works[0];
  const Op op(w);
  ngAllReduceOnePassSlice<T>(op, ngOnePassArgBufs{args.works}, (int)(w.count * sizeof(T)), (int)args.nParts,
                             __popcll(args.channelMask), v, (int)threadIdx.x, (int)blockDim.x);
}

// ngAllReduceOnePassEntry is the one-pass entry of the kernels of type T's
// AllReduce functions (ngOnePassOf; every op of T runs on them): it runs
// a launch with NG_ARGS_ONE_PASS_ENTRY in a few dozen instructions a
// thread for 8 bytes, where the work loop's shared state, barriers and
// table call cost twice that and more. SumPostDiv exists for the integer
// types only.
template <typename T>
struct ngAllReduceOnePassEntry {
  static constexpr bool kHas = true;
  static __device__ __forceinline__ bool run(const struct ngKernelArgs& args, int v) {
    switch ((args.flags >> NG_ARGS_REDOP_SHIFT) & 15) {
    case NG_REDOP_Sum: ngAllReduceOnePassArgs<T, ngOpSum<T>>(args, v); return true;
    case NG_REDOP_Prod: ngAllReduceOnePassArgs<T, ngOpProd<T>>(args, v); return true;
    case NG_REDOP_MinMax: ngAllReduceOnePassArgs<T, ngOpMinMax<T>>(args, v); return true;
    case NG_REDOP_PreMulSum: ngAllReduceOnePassArgs<T, ngOpPreMulSum<T>>(args, v); return true;
    case NG_REDOP_SumPostDiv:
      if constexpr (!std::is_same<typename ngSigned<T>::type, T>::value) {
        ngAllReduceOnePassArgs<T, ngOpSumPostDiv<T>>(args, v);
        return true;
      }
      return false;
    }
    return false;
  }
};

template <typename T, typename Op>
struct ngOnePassOf<NG_COLL_AllReduce, T, Op> {
  typedef ngAllReduceOnePassEntry<T> type;
};

// ngAllReduceDirectLLEntry runs a DIRECT AllReduce work that needs
// neither DIRECT's barriers nor the table call, and reports whether it
// did: a one-pass launch's work (as every AllReduce function runs it) and
// a work whose channel share takes the LL one-shot (as ngAllReduceDirect
// would). A RING LL kernel runs it inline (ngDirectLLOf, ngInlineEntry).
// The checks are uniform over the block (work, communicator), so every
// thread answers alike.
template <typename T, typename Op>
struct ngAllReduceDirectLLEntry {
  static __device__ __forceinline__ bool run(struct ngShmem* sh) {
    if (sh->onePassRanks != 0) {
      ngAllReduceOnePass<T, Op>(sh);
      return true;
    }
    if (sh->comm.direct == 0 || sh->comm.nRanks > NG_DIRECT_MAX_RANKS || !ngDirectLLTakes<T>(sh->work)) return false;
    const ngGroup g = ngWorkGroup(sh);
    if (g.tid >= g.nThreads) return true;
    const struct ngDevWork w = sh->work;
    ngAllReduceDirectLLWork<T, Op>(sh, g, w);
    return true;
  }
};

template <typename T, typename Op>
struct ngDirectLLOf<NG_COLL_AllReduce, T, Op> {
  typedef ngAllReduceDirectLLEntry<T, Op> type;
};

template <typename T, typename Op, int Algo, int Proto>
struct ngCollFunc<NG_COLL_AllReduce, T, Op, Algo, Proto> {
  static __device__ __forceinline__ void run(struct ngShmem* sh) {
    if (sh->onePassRanks != 0) ngAllReduceOnePass<T, Op>(sh);
    else if constexpr (Algo == NG_ALGO_RING) ngAllReduceRing<T, Op, Proto>(sh);
    else if constexpr (Algo == NG_ALGO_TREE) ngAllReduceTree<T, Op, Proto>(sh);
    else if constexpr (Algo == NG_ALGO_DIRECT && Proto == NG_PROTO_SIMPLE) ngAllReduceDirect<T, Op>(sh);
    else ngReportUnsupported(sh);
  }
};

#endif // NG_ALL_REDUCE_H_
