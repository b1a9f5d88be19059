// direct.h — DIRECT AllReduce, AllGather, ReduceScatter and Broadcast: ranks
// that share memory (one process, one GPU or GPUs with peer access) read
// each other's user buffers themselves, with no connection FIFO in between.
// AllReduce is described here; the others (barrier 1 publishes the
// pointers, every rank pulls what it needs, barrier 2 ends the call) at
// their functions below.
//
// Mailboxes. comm.direct lists, per rank, that rank's ngDirectSlot array
// (one slot per channel); a rank writes only its own slots and polls its
// peers'. A slot holds the user buffers of the call in progress and `phase`,
// the number of DIRECT barriers the rank has arrived at on that channel
// (zero at setup, stored back by thread 0 only, never reset). Every rank
// runs the same DIRECT works on a channel in the same order and each work
// takes the same number of barriers on every rank (it depends only on the
// channel's element count, which every rank has), so barrier k of a call
// is phase value start+k on every rank: no per-call sequence number is
// exchanged, and a peer that already arrived at a later barrier (it is at
// most one ahead) satisfies the wait as well (>=).
//
// Barrier (ngDirectBarrier): the group syncs, thread 0 fences (gpu scope when
// every rank is on this GPU, NG_DIRECT_SAME_GPU, system scope otherwise) and
// stores phase = target into its slot, thread p waits until peer p's phase
// >= target and fences (all peers at once), and the group syncs again. The
// waits poll the abort flag like every other wait (ngWaitGE), so an abort
// ends them.
//
// LL one-shot (the channel's share is at most NG_DIRECT_LL_BYTES): no
// barrier; every rank stores its share as LL lines into its own mailbox and
// polls its peers' (ngAllReduceDirectLL, below).
// One-shot (a share of at most NG_DIRECT_ONESHOT_BYTES):
//   barrier 1: publish sendbuff/recvbuff, read the peers' pointers;
//   every rank reduces the whole share from every rank's sendbuff, in rank
//   order 0..n-1 (so every rank gets the same bits), into registers;
//   barrier 2: nobody reads any sendbuff any more; store the result. (The
//   result waits in registers because an in-place peer's recvbuff is its
//   sendbuff.)
// Two-shot (larger shares): the share splits into nRanks slices on 16-byte
// boundaries; rank r owns slice r.
//   barrier 1: publish and read the pointers;
//   reduce-scatter: rank r reduces slice r from every rank's sendbuff (rank
//   order) into its own recvbuff; in place this overwrites only slice r of
//   its sendbuff, which no peer reads;
//   barrier 2: every slice is reduced;
//   all-gather: rank r copies slice p from rank p's recvbuff into its own;
//   barrier 3: no peer still reads this rank's recvbuff when it returns.
// Peer data is loaded with ld.global.cg (L2, not the SM's L1, which could
// hold a line of an earlier call of the same kernel).
//
// Co-residency: a rank's block waits at a barrier for the same channel's
// block of every peer. The ranks of a group are one kernel each (launched
// one after the other), and their blocks must all be resident at once, as
// the ring's must: the tuner's residency cap (runtime/tune) guarantees it
// for ranks that share a GPU, and on distinct GPUs each kernel has its own.
#ifndef NG_DIRECT_H_
#define NG_DIRECT_H_

// ngDirectAreaOf is rank's mailbox area: the copy ngKernelMain made before
// the wait where there is one, else the table's entry.
__device__ __forceinline__ uint64_t ngDirectAreaOf(struct ngShmem* sh, int rank) {
  if (sh->directAreas) return sh->directArea[rank];
  return reinterpret_cast<const uint64_t*>(sh->comm.direct)[rank];
}

__device__ __forceinline__ struct ngDirectSlot* ngDirectSlotOf(struct ngShmem* sh, int rank) {
  return reinterpret_cast<struct ngDirectSlot*>(ngDirectAreaOf(sh, rank)) + sh->channelId;
}

__device__ __forceinline__ void ngDirectFence(struct ngShmem* sh) {
  if (sh->comm.directFlags & NG_DIRECT_SAME_GPU) __threadfence();
  else __threadfence_system();
}

// ngDirectBarrier: see the header. Every thread of g calls it with the
// same target. Thread 0 arrives; thread p (p != rank, p < nRanks) waits for
// peer p, so the peers are polled at once rather than one after another
// (one poll's latency per barrier instead of nRanks-1). Returns false on
// abort.
__device__ __forceinline__ bool ngDirectBarrier(struct ngShmem* sh, const ngGroup& g, uint64_t target) {
  ngBarrier(g);
  const int n = sh->comm.nRanks, me = sh->comm.rank;
  if (g.tid == 0) {
    ngDirectFence(sh); // the group's writes before the barrier, then the arrival
    ngStVolatile(&ngDirectSlotOf(sh, me)->phase, target);
  }
  if (g.tid < n && g.tid != me) {
    // The peer's writes before its arrival, then the group's reads (the
    // barrier below passes the order on to the other threads).
    if (ngWaitGE(sh, &ngDirectSlotOf(sh, g.tid)->phase, target)) ngDirectFence(sh);
  }
  ngBarrier(g);
  return !ngAborted(sh);
}

// Windows (NG_DIRECT_WINDOWS: some ranks are in other processes). A
// rank's raw pointers mean nothing in another process, so a work carries
// NG_WORK_DIRECT_WIN and the window indices of its buffers (sendPeer,
// recvPeer), and a rank publishes window references: bit 63, the window
// index at NG_DIRECT_WIN_SHIFT, the byte offset in its window below. A
// reader resolves peer p's reference in its own window table
// (comm.direct[nRanks + w*nRanks + p], p's window w as mapped here; the
// host fills row w on every rank at registration, which is collective). A
// reference that does not resolve (a rank's buffers in no window: its host
// disagreed, or a window unknown here) is 0 in sh->directSend/Recv; every
// rank checks every rank's after barrier 1, so all stop alike.
#define NG_DIRECT_WIN_REF (1ull << 63)
#define NG_DIRECT_WIN_OFF_MASK ((1ull << NG_DIRECT_WIN_SHIFT) - 1)

__device__ __forceinline__ uint64_t ngDirectWinBase(struct ngShmem* sh, uint64_t w, int rank) {
  if (w >= NG_DIRECT_MAX_WINDOWS) return 0;
  const uint64_t* table = reinterpret_cast<const uint64_t*>(sh->comm.direct);
  const int n = sh->comm.nRanks;
  return table[n + w * n + rank];
}

// ngDirectWinRef is this rank's reference for p in window win (0 if p is
// not in it as the table says).
__device__ __forceinline__ uint64_t ngDirectWinRef(struct ngShmem* sh, int win, const void* p) {
  if (!(sh->work.flags & NG_WORK_DIRECT_WIN) || win < 0) return 0;
  const uint64_t base = ngDirectWinBase(sh, (uint64_t)win, sh->comm.rank), a = (uint64_t)(uintptr_t)p;
  if (base == 0 || a < base || a - base > NG_DIRECT_WIN_OFF_MASK) return 0;
  return NG_DIRECT_WIN_REF | ((uint64_t)win << NG_DIRECT_WIN_SHIFT) | (a - base);
}

// ngDirectWinResolve is peer p's buffer for reference v, or 0.
__device__ __forceinline__ uint64_t ngDirectWinResolve(struct ngShmem* sh, uint64_t v, int p) {
  if (!(v & NG_DIRECT_WIN_REF)) return 0;
  const uint64_t base = ngDirectWinBase(sh, (v & ~NG_DIRECT_WIN_REF) >> NG_DIRECT_WIN_SHIFT, p);
  return base == 0 ? 0 : base + (v & NG_DIRECT_WIN_OFF_MASK);
}

// ngDirectOpen publishes this rank's buffers, passes barrier 1 and copies
// every rank's buffers into sh->directSend/directRecv. phase is set (in
// every thread) to the slot's count before the call. Returns false on
// abort, and when some rank's window references do not resolve (after
// the error is recorded and barrier 2 passed, as on every rank).
__device__ __forceinline__ bool ngDirectOpen(struct ngShmem* sh, const ngGroup& g, const void* send, void* recv,
                                             uint64_t& phase) {
  struct ngDirectSlot* mine = ngDirectSlotOf(sh, sh->comm.rank);
  const bool windows = sh->comm.directFlags & NG_DIRECT_WINDOWS;
  // Every thread reads the count (one load per warp); thread 0 stores the
  // next one only after ngDirectBarrier's first group barrier.
  phase = ngLdVolatile(&mine->phase);
  if (g.tid == 0) {
    if (windows) {
      ngStVolatile(&mine->sendbuff, ngDirectWinRef(sh, sh->work.sendPeer, send));
      ngStVolatile(&mine->recvbuff, ngDirectWinRef(sh, sh->work.recvPeer, recv));
    } else {
      ngStVolatile(&mine->sendbuff, (uint64_t)(uintptr_t)send);
      ngStVolatile(&mine->recvbuff, (uint64_t)(uintptr_t)recv);
    }
  }
  if (!ngDirectBarrier(sh, g, phase + 1)) return false;
  if (!windows) {
    for (int p = g.tid; p < sh->comm.nRanks; p += g.nThreads) {
      struct ngDirectSlot* s = ngDirectSlotOf(sh, p);
      sh->directSend[p] = ngLdVolatile(&s->sendbuff);
      sh->directRecv[p] = ngLdVolatile(&s->recvbuff);
    }
    ngBarrier(g);
    return true;
  }
  const int me = sh->comm.rank, n = sh->comm.nRanks;
  for (int p = g.tid; p < n; p += g.nThreads) {
    struct ngDirectSlot* s = ngDirectSlotOf(sh, p);
    const uint64_t vs = ngLdVolatile(&s->sendbuff), vr = ngLdVolatile(&s->recvbuff);
    if (p == me) { // its own pointers, as long as it published valid references
      sh->directSend[p] = vs ? (uint64_t)(uintptr_t)send : 0;
      sh->directRecv[p] = vr ? (uint64_t)(uintptr_t)recv : 0;
    } else {
      sh->directSend[p] = ngDirectWinResolve(sh, vs, p);
      sh->directRecv[p] = ngDirectWinResolve(sh, vr, p);
    }
  }
  ngBarrier(g);
  bool ok = true;
  for (int p = 0; p < n; p++) ok = ok && sh->directSend[p] != 0 && sh->directRecv[p] != 0;
  if (ok) return true;
  if (g.tid == 0) ngRecordError(sh, NG_DEV_ERR_BAD_WORK);
  // Nobody may reuse its slot before every rank has read it.
  ngDirectBarrier(sh, g, phase + 2);
  return false;
}

// ngDirectRuns reports whether DIRECT can run on this communicator, or
// reports the work unsupported. The host sets comm.direct on every rank or
// on none, so every rank stops alike and none waits for another.
__device__ __forceinline__ bool ngDirectRuns(struct ngShmem* sh) {
  if (sh->comm.direct != 0 && sh->comm.nRanks <= NG_DIRECT_MAX_RANKS) return true;
  ngReportUnsupported(sh);
  return false;
}

template <typename T>
__device__ __forceinline__ const T* ngDirectSendBuf(struct ngShmem* sh, int p) {
  return reinterpret_cast<const T*>(sh->directSend[p]);
}
template <typename T>
__device__ __forceinline__ const T* ngDirectRecvBuf(struct ngShmem* sh, int p) {
  return reinterpret_cast<const T*>(sh->directRecv[p]);
}

// Start of slice s (of nSlices) of n elements: interior bounds rounded down
// to 16 bytes; the same on every rank.
template <typename T>
__device__ __forceinline__ int64_t ngDirectBound(int64_t n, int s, int nSlices) {
  if (s >= nSlices) return n;
  const int64_t gran = ngGranule<T>();
  return n * s / nSlices / gran * gran;
}

// out[0, cnt) = post(reduce over ranks 0..n-1 of pre(send_p[at, at+cnt))):
// element at of every rank's sendbuff lands at out[0]. A thread reads every
// input of an element before it writes that element, so out may be this
// rank's sendbuff + at (in place). With Push, out is ignored and the result
// lands at recv_p[at, at+cnt) of every rank p (the two-shot's push: no
// second pass reads it back).
template <typename T, typename Op, bool Push = false>
__device__ __forceinline__ void ngDirectReduceSlice(struct ngShmem* sh, const ngGroup& g, const Op& op, int64_t at,
                                                    int64_t cnt, T* out) {
  const int n = sh->comm.nRanks;
  uintptr_t bits = Push ? 0 : (uintptr_t)out;
  for (int p = 0; p < n; p++) {
    bits |= (uintptr_t)(ngDirectSendBuf<T>(sh, p) + at);
    if (Push) bits |= (uintptr_t)(ngDirectRecvBuf<T>(sh, p) + at);
  }
  constexpr int EPP = 16 / sizeof(T);
  const int64_t nPacks = (bits & 15) == 0 ? cnt / EPP : 0;
  const int tid = g.tid, nt = g.nThreads;
  uint4* out4 = reinterpret_cast<uint4*>(out);
  constexpr int U = 4;
  int64_t i = tid;
  for (; i + (U - 1) * nt < nPacks; i += U * nt) {
    uint4 v[U];
    const uint4* s0 = reinterpret_cast<const uint4*>(ngDirectSendBuf<T>(sh, 0) + at);
#pragma unroll
    for (int u = 0; u < U; u++) v[u] = ngPackPre<T>(op, ngLoadCG16(s0 + i + u * nt));
    for (int p = 1; p < n; p++) {
      const uint4* sp = reinterpret_cast<const uint4*>(ngDirectSendBuf<T>(sh, p) + at);
      uint4 r[U];
#pragma unroll
      for (int u = 0; u < U; u++) r[u] = ngLoadCG16(sp + i + u * nt);
#pragma unroll
      for (int u = 0; u < U; u++) v[u] = ngPackReduce<T>(op, v[u], ngPackPre<T>(op, r[u]));
    }
#pragma unroll
    for (int u = 0; u < U; u++) v[u] = ngPackPost<T>(op, v[u]);
    if (Push) {
      for (int p = 0; p < n; p++) {
        uint4* o = reinterpret_cast<uint4*>(const_cast<T*>(ngDirectRecvBuf<T>(sh, p) + at));
#pragma unroll
        for (int u = 0; u < U; u++) o[i + u * nt] = v[u];
      }
    } else {
#pragma unroll
      for (int u = 0; u < U; u++) out4[i + u * nt] = v[u];
    }
  }
  for (; i < nPacks; i += nt) {
    uint4 v = ngPackPre<T>(op, ngLoadCG16(reinterpret_cast<const uint4*>(ngDirectSendBuf<T>(sh, 0) + at) + i));
    for (int p = 1; p < n; p++)
      v = ngPackReduce<T>(op, v, ngPackPre<T>(op, ngLoadCG16(reinterpret_cast<const uint4*>(ngDirectSendBuf<T>(sh, p) + at) + i)));
    v = ngPackPost<T>(op, v);
    if (Push) {
      for (int p = 0; p < n; p++) reinterpret_cast<uint4*>(const_cast<T*>(ngDirectRecvBuf<T>(sh, p) + at))[i] = v;
    } else {
      out4[i] = v;
    }
  }
  // Element-wise remainder (or everything, when a pointer is misaligned).
  for (int64_t e = nPacks * EPP + tid; e < cnt; e += nt) {
    T v = op.pre(ngLoadCG(ngDirectSendBuf<T>(sh, 0) + at + e));
    for (int p = 1; p < n; p++) v = op.reduce(v, op.pre(ngLoadCG(ngDirectSendBuf<T>(sh, p) + at + e)));
    v = op.post(v);
    if (Push) {
      for (int p = 0; p < n; p++) const_cast<T*>(ngDirectRecvBuf<T>(sh, p))[at + e] = v;
    } else {
      out[e] = v;
    }
  }
}

// dst[0, cnt) = src[0, cnt), src and dst this rank's or a peer's buffers,
// by every thread of g: 16-byte packs when both are 16-byte aligned, U of
// them in flight per thread (8: 64 KiB per 512-thread block, what one SM
// needs to keep its share of HBM busy), then element-wise.
template <typename T>
__device__ __forceinline__ void ngDirectCopy(const ngGroup& g, const T* src, T* dst, int64_t cnt) {
  constexpr int EPP = 16 / sizeof(T);
  const int64_t nPacks = (((uintptr_t)src | (uintptr_t)dst) & 15) == 0 ? cnt / EPP : 0;
  const int tid = g.tid, nt = g.nThreads;
  const uint4* in = reinterpret_cast<const uint4*>(src);
  uint4* out = reinterpret_cast<uint4*>(dst);
  constexpr int U = 8;
  int64_t i = tid;
  for (; i + (U - 1) * nt < nPacks; i += U * nt) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; u++) v[u] = ngLoadCG16(in + i + u * nt);
#pragma unroll
    for (int u = 0; u < U; u++) out[i + u * nt] = v[u];
  }
  for (; i < nPacks; i += nt) out[i] = ngLoadCG16(in + i);
  for (int64_t e = nPacks * EPP + tid; e < cnt; e += nt) dst[e] = ngLoadCG(src + e);
}

// ---- LL one-shot (AllReduce, shares of at most NG_DIRECT_LL_BYTES) --------------
//
// No barrier, no pointer exchange, no fence. Per channel, a rank owns two LL
// buffers in its mailbox area (after its NG_MAX_CHANNELS slots), each of
// NG_DIRECT_LL_LINES 16-byte lines {data0, flag, data1, flag} (ng_prims.h's
// LL line: the flag travels in the same 8 bytes as each data word, so a
// reader that sees the flag sees the data). The rank's slot counts its LL
// one-shots on the channel (llSeq, zero at setup). Call s:
//   1. every thread loads its first line of src and reads s (the two
//      loads overlap); threads < nRanks put every rank's buffer s&1
//      address in sh->directSend; threads store the rank's share as LL
//      lines with flag ngLLFlag(s) (never 0, so zeroed memory never
//      matches) into the rank's own buffer s&1;
//   2. group barrier (the addresses; every thread has read s); thread 0
//      stores s+1 into llSeq;
//   3. every thread polls its lines in every peer's buffer s&1 until both
//      flags are ngLLFlag(s) (a batch of peers' lines loaded at once, then
//      each waited for), reduces them with its own in rank order 0..n-1
//      (every rank gets the same bits) and stores the result.
// Reuse: a rank writes buffer s&1 again at call s+2, after its call s+1,
// which waited for every peer's s+1 lines (a call has at least one line:
// an empty share is no call); a peer stores those after its
// call s ended (the kernel's __syncthreads between works, or the kernel
// boundary), so every peer is done reading the rank's s lines. A peer is
// at most one call ahead (it cannot finish s+1 before this rank's s+1
// lines exist), and a peer at s+1 writes the other buffer. Stale lines:
// line l of buffer s&1 holds the flag of the last call of that parity that
// wrote it; a call writes only its own lines, so once in
// NG_DIRECT_LL_FULL_PERIOD calls (s mod the period < 2: both parities) a
// rank writes its buffers whole (zero data past its share). Every line then
// dates from fewer than NG_DIRECT_LL_FULL_PERIOD calls back, and ngLLFlag
// repeats only every 0xFFFFFFFF calls (odd; with the same parity, every
// 2*0xFFFFFFFF): no stale line carries the flag a reader waits for.
// runtime/comm's TestDirectLLProtocol runs this protocol on goroutines.
// The result is stored only after the thread read its own share (the same
// thread, the same lines), and peers read only the mailbox, so in place is
// safe.
#define NG_DIRECT_LL_LINES (NG_DIRECT_LL_BYTES / 8)
#define NG_DIRECT_LL_FULL_PERIOD (1ull << 30)
// Peers' lines one thread loads at once before it waits for the first.
#define NG_DIRECT_LL_BATCH 8

// Line buffer `parity` of rank r's channel (this block's).
__device__ __forceinline__ uint4* ngDirectLLBuf(struct ngShmem* sh, int rank, int parity) {
  char* area = reinterpret_cast<char*>(ngDirectAreaOf(sh, rank)) + NG_MAX_CHANNELS * sizeof(struct ngDirectSlot);
  return reinterpret_cast<uint4*>(area) + ((size_t)sh->channelId * 2 + parity) * NG_DIRECT_LL_LINES;
}

__device__ __forceinline__ void ngDirectLLStore(uint4* p, uint64_t v, uint32_t flag) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"((uint32_t)v), "r"(flag),
               "r"((uint32_t)(v >> 32)), "r"(flag)
               : "memory");
}

__device__ __forceinline__ uint4 ngDirectLLLoad(const uint4* p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p)
               : "memory");
  return v;
}

// Reloads line p into v until both its flags are flag; false on abort.
__device__ __forceinline__ bool ngDirectLLWait(struct ngShmem* sh, const uint4* p, uint4& v, uint32_t flag) {
  int spins = 0;
  while (v.y != flag || v.w != flag) {
    if (++spins == NG_SPINS_BEFORE_ABORT_CHECK) {
      spins = 0;
      if (ngCheckAbort(sh)) return false;
    }
    v = ngDirectLLLoad(p);
  }
  return true;
}

// ngAllReduceDirectLL reduces this channel's nbytes of src (the rank's
// sendbuff + chanOffset) into dst; see above. Every thread of g calls it.
template <typename T, typename Op>
__device__ __forceinline__ void ngAllReduceDirectLL(struct ngShmem* sh, const ngGroup& g, const Op& op, const T* src,
                                                    T* dst, int nbytes) {
  // An empty share is no LL call on any rank (none counts it): a call
  // without lines would let a rank run ahead of its peers unchecked.
  if (nbytes <= 0) return;
  const int n = sh->comm.nRanks, me = sh->comm.rank;
  const int nLines = (nbytes + 7) / 8;
  // The thread's first line of its share, loaded before the call count so
  // that the two loads overlap (the count's volatile load, a "memory"
  // clobber, would keep this one after it).
  const uint64_t first = g.tid < nLines ? ngLoadPack8(src, g.tid, nbytes) : 0;
  struct ngDirectSlot* mine = ngDirectSlotOf(sh, me);
  const uint64_t seq = ngLdVolatile(&mine->llSeq);
#ifdef NG_TRACE
  if (seq != ~0ull) ngTraceMark(sh, 7); // the call count loaded (the mark depends on it)
#endif
  const int parity = (int)(seq & 1);
  const uint32_t flag = ngLLFlag(seq);
  const int nWrite = (seq & (NG_DIRECT_LL_FULL_PERIOD - 1)) < 2 ? NG_DIRECT_LL_LINES : nLines;
  uint4* own = ngDirectLLBuf(sh, me, parity);
  // The peers' addresses first: their loads overlap the ones above (the
  // stores' "memory" clobber would keep them after the stores).
  for (int p = g.tid; p < n; p += g.nThreads) sh->directSend[p] = (uint64_t)(uintptr_t)ngDirectLLBuf(sh, p, parity);
  for (int line = g.tid; line < nWrite; line += g.nThreads)
    ngDirectLLStore(own + line, line == g.tid ? first : line < nLines ? ngLoadPack8(src, line, nbytes) : 0, flag);
  ngBarrier(g);
  ngTraceMark(sh, 3); // the rank's lines stored
  if (g.tid == 0) ngStVolatile(&mine->llSeq, seq + 1);
  for (int line = g.tid; line < nLines; line += g.nThreads) {
    uint64_t acc = 0;
    for (int p0 = 0; p0 < n; p0 += NG_DIRECT_LL_BATCH) {
      uint4 v[NG_DIRECT_LL_BATCH];
#pragma unroll
      for (int j = 0; j < NG_DIRECT_LL_BATCH; j++) {
        const int p = p0 + j;
        v[j] = make_uint4(0, 0, 0, 0);
        if (p < n && p != me) v[j] = ngDirectLLLoad(reinterpret_cast<const uint4*>(sh->directSend[p]) + line);
      }
#pragma unroll
      for (int j = 0; j < NG_DIRECT_LL_BATCH; j++) {
        const int p = p0 + j;
        if (p < n) {
          uint64_t r;
          if (p == me) {
            r = line == g.tid ? first : ngLoadPack8(src, line, nbytes);
          } else {
            if (!ngDirectLLWait(sh, reinterpret_cast<const uint4*>(sh->directSend[p]) + line, v[j], flag)) return;
            r = (uint64_t)v[j].x | ((uint64_t)v[j].z << 32);
          }
          r = ngPackPre<T>(op, r);
          acc = p == 0 ? r : ngPackReduce<T>(op, acc, r);
        }
      }
    }
    ngStorePack8(dst, line, nbytes, ngPackPost<T>(op, acc));
  }
  ngTraceMark(sh, 4); // thread 0's line reduced
}

// ngDirectLLTakes reports whether work w's channel share runs as the LL
// one-shot (at most NG_DIRECT_LL_BYTES).
template <typename T>
__device__ __forceinline__ bool ngDirectLLTakes(const struct ngDevWork& w) {
  return (int64_t)w.chanCount * (int64_t)sizeof(T) <= NG_DIRECT_LL_BYTES;
}

// ngAllReduceDirectLLWork runs work w's channel share as the LL one-shot;
// every thread of g calls it.
template <typename T, typename Op>
__device__ __forceinline__ void ngAllReduceDirectLLWork(struct ngShmem* sh, const ngGroup& g, const struct ngDevWork& w) {
  const int64_t off = (int64_t)w.chanOffset, cnt = (int64_t)w.chanCount;
  const Op op(w);
  ngAllReduceDirectLL<T, Op>(sh, g, op, reinterpret_cast<const T*>(w.sendbuff) + off,
                             reinterpret_cast<T*>(w.recvbuff) + off, (int)(cnt * (int64_t)sizeof(T)));
}

// Packs of 8 bytes one thread holds in the one-shot: enough for
// NG_DIRECT_ONESHOT_BYTES with the smallest group the planner gives a
// DIRECT work (128 threads; see runtime/tune).
#define NG_DIRECT_ONESHOT_PACKS (NG_DIRECT_ONESHOT_BYTES / (8 * 128))

template <typename T, typename Op>
__device__ __forceinline__ void ngAllReduceDirect(struct ngShmem* sh) {
  const ngGroup g = ngWorkGroup(sh);
  if (g.tid >= g.nThreads) return;
  const struct ngDevWork w = sh->work;
  const int n = sh->comm.nRanks;
  if (!ngDirectRuns(sh)) return;
  if (ngDirectLLTakes<T>(w)) {
    // Every rank has the same share, so every rank takes this path.
    ngAllReduceDirectLLWork<T, Op>(sh, g, w);
    return;
  }
  const int64_t off = (int64_t)w.chanOffset, cnt = (int64_t)w.chanCount;
  T* dst = reinterpret_cast<T*>(w.recvbuff);
  const Op op(w);
  uint64_t phase;
  if (!ngDirectOpen(sh, g, reinterpret_cast<const void*>(w.sendbuff), dst, phase)) return;

  if (cnt * (int64_t)sizeof(T) <= NG_DIRECT_ONESHOT_BYTES) {
    const int nbytes = (int)(cnt * (int64_t)sizeof(T));
    const int nPacks = (nbytes + 7) / 8;
    if (nPacks > NG_DIRECT_ONESHOT_PACKS * g.nThreads) {
      // A group smaller than the planner ever gives: every rank has the
      // same one, so every rank reports and passes the last barrier alike.
      if (g.tid == 0) ngRecordError(sh, NG_DEV_ERR_BAD_WORK);
      ngDirectBarrier(sh, g, phase + 2);
      return;
    }
    uint64_t v[NG_DIRECT_ONESHOT_PACKS];
#pragma unroll
    for (int k = 0; k < NG_DIRECT_ONESHOT_PACKS; k++) {
      const int i = g.tid + k * g.nThreads;
      v[k] = 0;
      if (i < nPacks) {
        uint64_t a = ngPackPre<T>(op, ngLoadPack8<T, true>(ngDirectSendBuf<T>(sh, 0) + off, i, nbytes));
        for (int p = 1; p < n; p++)
          a = ngPackReduce<T>(op, a, ngPackPre<T>(op, ngLoadPack8<T, true>(ngDirectSendBuf<T>(sh, p) + off, i, nbytes)));
        v[k] = ngPackPost<T>(op, a);
      }
    }
    if (!ngDirectBarrier(sh, g, phase + 2)) return; // no rank reads a sendbuff any more
#pragma unroll
    for (int k = 0; k < NG_DIRECT_ONESHOT_PACKS; k++) {
      const int i = g.tid + k * g.nThreads;
      if (i < nPacks) ngStorePack8(dst + off, i, nbytes, v[k]);
    }
    return;
  }

  // Two-shot, pushed: each rank reduces its slice of every rank's sendbuff
  // and stores the result into every rank's recvbuff (reads S, writes S per
  // rank: 2n·S in all, against (3n-1)·S when each rank gathers the others'
  // slices back). Slice p is read only by rank p (every rank's input) and
  // written only by rank p (every rank's output), so in place is safe:
  // rank p reads an element of every input before it stores that element.
  // Barrier 1 (ngDirectOpen) says every rank's buffers are ready; barrier
  // 2 says every slice has landed, so when a rank's kernel ends its
  // recvbuff is whole and no peer reads its sendbuff any more.
  const int me = sh->comm.rank;
  const int64_t lo = ngDirectBound<T>(cnt, me, n), hi = ngDirectBound<T>(cnt, me + 1, n);
  ngDirectReduceSlice<T, Op, true>(sh, g, op, off + lo, hi - lo, nullptr);
  ngDirectBarrier(sh, g, phase + 2); // every slice is reduced and stored everywhere
}

// AllGather (bytes): block p of every rank's recvbuff is rank p's sendbuff
// (work: count bytes per block, the channel's [chanOffset, +chanCount) of
// each). Barrier 1 publishes the pointers; every rank copies each rank's
// block straight from its sendbuff into its own recvbuff, its own first,
// then the others from the next rank on (so the ranks spread their reads);
// barrier 2: no peer reads this rank's sendbuff when it returns. In place
// (sendbuff == recvbuff + rank*count) the own block is already there and a
// rank writes only the other blocks of its recvbuff, which no peer reads
// (peer p reads recvbuff_p's block p only through its sendbuff).
template <typename T>
__device__ __forceinline__ void ngAllGatherDirect(struct ngShmem* sh) {
  const ngGroup g = ngWorkGroup(sh);
  if (g.tid >= g.nThreads) return;
  if (!ngDirectRuns(sh)) return;
  const struct ngDevWork w = sh->work;
  const int n = sh->comm.nRanks, me = sh->comm.rank;
  const int64_t count = (int64_t)w.count, off = (int64_t)w.chanOffset, cnt = (int64_t)w.chanCount;
  T* dst = reinterpret_cast<T*>(w.recvbuff);
  uint64_t phase;
  if (!ngDirectOpen(sh, g, reinterpret_cast<const void*>(w.sendbuff), dst, phase)) return;
  for (int q = 0; q < n; q++) {
    const int p = me + q < n ? me + q : me + q - n;
    const T* src = ngDirectSendBuf<T>(sh, p) + off;
    T* d = dst + (int64_t)p * count + off;
    if (src != d) ngDirectCopy<T>(g, src, d, cnt);
  }
  ngDirectBarrier(sh, g, phase + 2); // no peer reads our sendbuff any more
}

// ReduceScatter: rank r's recvbuff is the reduction of block r of every
// rank's sendbuff (work: count elements per block, the channel's
// [chanOffset, +chanCount) of each). Barrier 1 publishes the pointers; rank
// r reduces its block from every sendbuff, in rank order, into its
// recvbuff; barrier 2: no peer reads this rank's sendbuff when it returns.
// In place (recvbuff == sendbuff + rank*count) a rank overwrites only block
// r of its own sendbuff, which no peer reads (peer p reads block p), each
// element after reading it.
template <typename T, typename Op>
__device__ __forceinline__ void ngReduceScatterDirect(struct ngShmem* sh) {
  const ngGroup g = ngWorkGroup(sh);
  if (g.tid >= g.nThreads) return;
  if (!ngDirectRuns(sh)) return;
  const struct ngDevWork w = sh->work;
  const int me = sh->comm.rank;
  const int64_t count = (int64_t)w.count, off = (int64_t)w.chanOffset, cnt = (int64_t)w.chanCount;
  T* dst = reinterpret_cast<T*>(w.recvbuff);
  const Op op(w);
  uint64_t phase;
  if (!ngDirectOpen(sh, g, reinterpret_cast<const void*>(w.sendbuff), dst, phase)) return;
  ngDirectReduceSlice<T, Op>(sh, g, op, (int64_t)me * count + off, cnt, dst + off);
  ngDirectBarrier(sh, g, phase + 2); // no peer reads our sendbuff any more
}

// Broadcast (bytes): every rank copies the root's sendbuff into its own
// recvbuff (the root too, unless in place). Barrier 1 publishes the
// pointers; barrier 2: no rank reads the root's sendbuff when it returns.
// Every rank takes both barriers, so the phase counts stay equal.
template <typename T>
__device__ __forceinline__ void ngBroadcastDirect(struct ngShmem* sh) {
  const ngGroup g = ngWorkGroup(sh);
  if (g.tid >= g.nThreads) return;
  if (!ngDirectRuns(sh)) return;
  const struct ngDevWork w = sh->work;
  const int root = w.root;
  const int64_t off = (int64_t)w.chanOffset, cnt = (int64_t)w.chanCount;
  T* dst = reinterpret_cast<T*>(w.recvbuff);
  if (root < 0 || root >= sh->comm.nRanks) {
    // Every rank has the same work: all stop here alike.
    if (g.tid == 0) ngRecordError(sh, NG_DEV_ERR_BAD_WORK);
    return;
  }
  uint64_t phase;
  if (!ngDirectOpen(sh, g, reinterpret_cast<const void*>(w.sendbuff), dst, phase)) return;
  const T* src = ngDirectSendBuf<T>(sh, root) + off;
  if (src != dst + off) ngDirectCopy<T>(g, src, dst + off, cnt);
  ngDirectBarrier(sh, g, phase + 2); // nobody reads the root's sendbuff any more
}

#endif // NG_DIRECT_H_
