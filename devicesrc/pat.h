// pat.h — PAT ("parallel aggregated trees"): AllGather and ReduceScatter in
// about ceil(log2 N) network hops, for communicators with one rank per host.
// The schedule and why it cannot deadlock are in runtime/enqueue/pat.go,
// whose Go copy of it the tests simulate; the two must agree.
//
// Connections: on the channel it runs on, rank r talks to r+2^k and r-2^k
// for every 2^k < N, both directions (runtime/comm sets them up on the
// first enqueue.PATChannels channels); SIMPLE only.
//
// The block at offset o of rank r is block (r+o) mod N; h(o) = floor(log2 o).
//   AllGather: copy the input to the output block; then for each distance
//     d = 2^k: m = min(d, N-d); send offsets 0..m-1 (read back from the
//     output) to r-d and receive offsets d..d+m-1 from r+d into the output,
//     the sends up to NG_STEPS ahead of the receives.
//   ReduceScatter: for o = N-1 down to 0: input block + the partial sums
//     from r-2^k for every k in the fan [ngPatFanBegin(o), ngPatFanEnd(N, o))
//     go to r+2^h(o), or at o = 0 (with the op's post step) to the output.
//     Partial sums wait in the FIFO slots they arrived in (no scratch
//     memory), which fits the FIFOs up to 24 ranks (enqueue.PATFits; the
//     tuner never runs it beyond).
//
// Work: as the RING functions (AllGather counts bytes, ReduceScatter
// elements; count per rank, the channel handles [chanOffset,
// chanOffset+chanCount) of each block, in steps of one FIFO slot).
//
// ngPat::step is a small SIMPLE engine of its own (ngPrims has a fixed
// number of connections): any number of receive and send connections, the
// step counters kept in the connections' step words, one step per call.
#ifndef NG_PAT_H_
#define NG_PAT_H_
#include "ng_coll_common.h"

// Connections one PAT step may use: 31 fan dimensions (N < 2^31) + 1.
#define NG_PAT_MAX_CONNS 32

// floor(log2 o), o >= 1.
__device__ __forceinline__ int ngPatHigh(int o) { return 31 - __clz(o); }

// First dimension of offset o's fan: every k above h(o), all for o == 0.
__device__ __forceinline__ int ngPatFanBegin(int o) { return o == 0 ? 0 : ngPatHigh(o) + 1; }

// One past the last dimension k of offset o's fan: 2^k < N - o.
__device__ __forceinline__ int ngPatFanEnd(int N, int o) {
  const int m = N - o - 1;
  return m >= 1 ? ngPatHigh(m) + 1 : 0;
}

template <typename T, typename Op>
struct ngPat {
  struct ngShmem* sh;
  ngGroup g;
  Op op;
  int me, N;

  __device__ __forceinline__ ngPat(struct ngShmem* sh_, ngGroup g_)
      : sh(sh_), g(g_), op(sh_->work), me(sh_->comm.rank), N(sh_->comm.nRanks) {}

  // The rank at distance delta (either sign, |delta| < N).
  __device__ __forceinline__ int peer(int64_t delta) const { return (int)((((int64_t)me + delta) % N + N) % N); }

  // Connection q of a step: q < nFan is fan dimension fb+q with peer
  // me - 2^(fb+q) (a send when fanSend), q == nFan the single connection
  // with peer `single` (the other direction).
  __device__ __forceinline__ const struct ngConnInfo* conn(int q, int nFan, int fb, int single, bool fanSend,
                                                           bool* isSend) const {
    int p;
    if (q < nFan) {
      p = peer(-(1ll << (fb + q)));
      *isSend = fanSend;
    } else {
      p = single;
      *isSend = !fanSend;
    }
    return *isSend ? ngSendConnInfo(sh, p) : ngRecvConnInfo(sh, p);
  }

  // One step over n elements: src (after op.pre) plus every received slot,
  // op.post when post, to dst and every send slot. Fan dimensions
  // [fb, fe) go to or come from me - 2^k (sends when fanSend), single
  // (-1: none) is the one connection of the other direction. Returns false
  // on abort.
  __device__ __forceinline__ bool step(const T* src, T* dst, int n, int single, int fb, int fe, bool fanSend,
                                       bool post) {
    const int nFan = fe > fb ? fe - fb : 0;
    const int nConn = nFan + (single >= 0 ? 1 : 0);
    // Wait for credit (send) and data (receive), one thread per connection.
    for (int q = g.tid; q < nConn; q += g.nThreads) {
      bool isSend;
      const struct ngConnInfo* ci = conn(q, nFan, fb, single, fanSend, &isSend);
      const uint64_t s = ngLdVolatile(reinterpret_cast<const uint64_t*>(ci->step));
      if (isSend) {
        if (s >= NG_STEPS) ngWaitGE(sh, reinterpret_cast<const uint64_t*>(ci->head), s + 1 - NG_STEPS);
      } else {
        ngWaitGE(sh, reinterpret_cast<const uint64_t*>(ci->tail), s + 1);
        __threadfence();
      }
    }
    ngBarrier(g);
    if (ngAborted(sh)) return false;

    const T* in[NG_PAT_MAX_CONNS];
    T* out[NG_PAT_MAX_CONNS];
    int nIn = 0, nOut = 0;
    for (int q = 0; q < nConn; q++) {
      bool isSend;
      const struct ngConnInfo* ci = conn(q, nFan, fb, single, fanSend, &isSend);
      const uint64_t s = ngLdVolatile(reinterpret_cast<const uint64_t*>(ci->step));
      char* p = reinterpret_cast<char*>(ci->buffs[NG_PROTO_SIMPLE]) +
                (size_t)(s % NG_STEPS) * (ci->buffSizes[NG_PROTO_SIMPLE] / NG_STEPS);
      if (isSend) out[nOut++] = reinterpret_cast<T*>(p);
      else in[nIn++] = reinterpret_cast<const T*>(p);
    }
    if (src != nullptr || nIn > 0) data(src, dst, n, in, nIn, out, nOut, post);

    ngBarrier(g);
    if (ngAborted(sh)) return false;
    if (g.tid == 0) {
      bool sys = false;
      for (int q = 0; q < nConn; q++) {
        bool isSend;
        const struct ngConnInfo* ci = conn(q, nFan, fb, single, fanSend, &isSend);
        if (isSend && !(ci->flags & NG_CONN_SAME_GPU)) sys = true;
        // NET: the step's size, which the sending proxy reads once it sees
        // tail (ng_prims.h, slot formats).
        if (isSend && (ci->flags & NG_CONN_STEP_SIZES)) {
          const uint64_t s = ngLdVolatile(reinterpret_cast<const uint64_t*>(ci->step));
          uint32_t* sz = reinterpret_cast<uint32_t*>(reinterpret_cast<uint64_t*>(ci->tail) + 1) + s % NG_STEPS;
          asm volatile("st.volatile.global.u32 [%0], %1;" ::"l"(sz), "r"((uint32_t)(n * (int)sizeof(T))) : "memory");
        }
      }
      if (nOut > 0) {
        if (sys) __threadfence_system();
        else __threadfence();
      }
      for (int q = 0; q < nConn; q++) {
        bool isSend;
        const struct ngConnInfo* ci = conn(q, nFan, fb, single, fanSend, &isSend);
        uint64_t* stepPtr = reinterpret_cast<uint64_t*>(ci->step);
        const uint64_t s = ngLdVolatile(stepPtr) + 1;
        ngStVolatile(reinterpret_cast<uint64_t*>(isSend ? ci->tail : ci->head), s);
        ngStVolatile(stepPtr, s);
      }
    }
    // The next step reads the step words thread 0 just wrote.
    ngBarrier(g);
    return true;
  }

  __device__ __forceinline__ void data(const T* src, T* dst, int n, const T* const* in, int nIn, T* const* out,
                                       int nOut, bool post) {
    const bool aligned = (((uintptr_t)src | (uintptr_t)dst) & 15) == 0; // slots are 16-byte aligned
    constexpr int EPP = 16 / sizeof(T);
    const int nPacks = aligned ? n / EPP : 0;
    for (int i = g.tid; i < nPacks; i += g.nThreads) {
      uint4 v = make_uint4(0, 0, 0, 0);
      bool have = false;
      if (src) {
        v = ngPackPre<T>(op, reinterpret_cast<const uint4*>(src)[i]);
        have = true;
      }
      for (int q = 0; q < nIn; q++) {
        const uint4 r = ngLoadCG16(reinterpret_cast<const uint4*>(in[q]) + i);
        v = have ? ngPackReduce<T>(op, v, r) : r;
        have = true;
      }
      if (post) v = ngPackPost<T>(op, v);
      if (dst) reinterpret_cast<uint4*>(dst)[i] = v;
      for (int q = 0; q < nOut; q++) reinterpret_cast<uint4*>(out[q])[i] = v;
    }
    // Element-wise remainder (or everything, when a user pointer is misaligned).
    for (int e = nPacks * EPP + g.tid; e < n; e += g.nThreads) {
      T v;
      bool have = false;
      if (src) {
        v = op.pre(src[e]);
        have = true;
      }
      for (int q = 0; q < nIn; q++) {
        const T r = ngLoadCG(in[q] + e);
        v = have ? op.reduce(v, r) : r;
        have = true;
      }
      if (post) v = op.post(v);
      if (dst) dst[e] = v;
      for (int q = 0; q < nOut; q++) out[q][e] = v;
    }
  }
};

// ngPatRun runs a PAT collective on this channel, the way ngRingRun runs a
// RING one: the threads outside the work's group leave, then body(pat,
// nRanks, rank, count, span, cap) runs the steps (count: work.count, the
// elements of a block; cap: of one FIFO slot) and returns when they are
// done or one stopped the work (abort).
template <typename T, typename Op, typename Body>
__device__ __forceinline__ void ngPatRun(struct ngShmem* sh, Body body) {
  const ngGroup g = ngWorkGroup(sh);
  if (g.tid >= g.nThreads) return;
  const struct ngDevWork w = sh->work;
  const int N = sh->comm.nRanks, me = sh->comm.rank;
  const int64_t count = (int64_t)w.count;
  const ngChanSpan<T> s(w);
  ngPat<T, Op> pat(sh, g);
  body(pat, N, me, count, s, (int64_t)ngStepElems<T, NG_PROTO_SIMPLE>(sh));
}

template <typename T, typename Op>
__device__ __forceinline__ void ngAllGatherPat(struct ngShmem* sh) {
  ngPatRun<T, Op>(sh, [&](ngPat<T, Op>& pat, int N, int me, int64_t count, const ngChanSpan<T>& s, int64_t cap) {
    // Output block of offset o.
    auto out = [&](int o) -> T* { return s.dst + (int64_t)((me + o) % N) * count; };
    for (int64_t off = 0; off < s.total; off += cap) {
      const int n = (int)ngMin64(cap, s.total - off);
      if (!pat.step(s.src + off, out(0) + off, n, -1, 0, 0, true, false)) return;
      for (int64_t d = 1; d < N; d *= 2) {
        const int m = (int)ngMin64(d, N - d);
        const int to = pat.peer(-d), from = pat.peer(d);
        // Send offset j to me-d (as the single connection: a fan of none
        // receives), receive offset d+j from me+d.
        for (int j = 0; j < m && j < NG_STEPS; j++) {
          if (!pat.step(out(j) + off, nullptr, n, to, 0, 0, false, false)) return;
        }
        for (int j = 0; j < m; j++) {
          if (!pat.step(nullptr, out((int)d + j) + off, n, from, 0, 0, true, false)) return;
          if (j + NG_STEPS < m && !pat.step(out(j + NG_STEPS) + off, nullptr, n, to, 0, 0, false, false)) return;
        }
      }
    }
  });
}

template <typename T, typename Op>
__device__ __forceinline__ void ngReduceScatterPat(struct ngShmem* sh) {
  ngPatRun<T, Op>(sh, [&](ngPat<T, Op>& pat, int N, int me, int64_t count, const ngChanSpan<T>& s, int64_t cap) {
    for (int64_t off = 0; off < s.total; off += cap) {
      const int n = (int)ngMin64(cap, s.total - off);
      for (int o = N - 1; o >= 0; o--) {
        const bool last = o == 0;
        const T* in = s.src + (int64_t)((me + o) % N) * count + off;
        // Receive the fan from me-2^k; send to me+2^h(o), or write the result.
        const int to = last ? -1 : pat.peer(1ll << ngPatHigh(o));
        if (!pat.step(in, last ? s.dst + off : nullptr, n, to, ngPatFanBegin(o), ngPatFanEnd(N, o), false, last)) return;
      }
    }
  });
}

#endif // NG_PAT_H_
