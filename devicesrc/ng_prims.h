// ng_prims.h — connections, the step protocol and the data-moving engine.
//
// A connection (ngConnInfo) is one direction between two ranks on one channel.
// The receiver owns the FIFO of each protocol: NG_STEPS slots of
// buffSizes[p]/NG_STEPS bytes. Three uint64 counters, all zero at setup and
// only ever growing:
//   *step  (one per side)  steps this side has completed on the connection,
//                          loaded when a work starts, stored back when it ends;
//   *head  (receiver→sender) steps the receiver has consumed: the sender may
//                          write step s into slot s%NG_STEPS once head+NG_STEPS > s;
//   *tail  (sender→receiver) steps the sender has posted (SIMPLE only): the
//                          receiver may read step s once tail > s.
// Every protocol advances the same step counter, so works of different
// protocols may follow each other on one connection.
//
// Slot formats:
//   SIMPLE: raw elements; the sender fences (gpu scope, or system scope when
//           the peer is not on this GPU) before storing tail. On connections
//           flagged NG_CONN_STEP_SIZES (NET) it first stores the step's byte
//           count, a u32, at ((uint32_t*)(tail + 1))[step % NG_STEPS].
//   LL    : 16-byte lines {data0 u32, flag u32, data1 u32, flag u32}, 8 data
//           bytes each; flag = (step % 0xFFFFFFFF) + 1 (never 0, so zeroed
//           memory never matches); written with one st.volatile.v4.
//   LL128 : 128-byte lines of 16 u64: u64 0..14 hold 120 data bytes, u64 15 is
//           the flag = step + 1; 8 threads write a line with one warp-wide
//           st.volatile.v2.u64 (thread 7 carries the flag).
// LL/LL128 receivers poll the flags; their senders never store tail. On
// NG_CONN_STEP_SIZES connections an LL sender stores the step's size word
// (NG_STEP_SIZE_LL | (step & 0x7FF) << 20 | lines) in the same place as
// SIMPLE's, then fences at system scope, before the block barrier after
// which any thread writes a line of the step: a NET proxy that sees a line
// of step s finds the word of s (its tag says so) and knows when the step
// is complete. Every step, even one of 0 lines, stores its word. The proxy
// may hold a step's lines back until all of them are there, so an LL
// sender never waits, between two lines of one step, for a line that
// depends on that step (llExchange sends all its lines first).
//
// Step sizes are taken from comm.buffSizes[proto] (identical on every rank):
//   SIMPLE elements/step = slotBytes/sizeof(T), LL = slotBytes/16*8/sizeof(T),
//   LL128 = slotBytes/128*120/sizeof(T), each rounded down to whole 16 bytes.
// Requirements: each connection's buffSizes[p] >= comm.buffSizes[p];
// comm.buffSizes[SIMPLE] a multiple of 128, [LL] of 256, [LL128] of 2048.
//
// ngPrims<T, Op, Proto, MaxRecv, MaxSend>::step(src, dst, n, recv, send, post)
// performs one step on every connection: it combines the user input src (if
// any, after op.pre) with the data received from each recv connection, applies
// op.post when asked, and writes the result to the user output dst (if any)
// and to every send connection.
#ifndef NG_PRIMS_H_
#define NG_PRIMS_H_

// ---- raw loads/stores ----------------------------------------------------------------

template <int Size> struct ngUint;
template <> struct ngUint<1> { typedef uint8_t type; };
template <> struct ngUint<2> { typedef uint16_t type; };
template <> struct ngUint<4> { typedef uint32_t type; };
template <> struct ngUint<8> { typedef uint64_t type; };

// Load one T bypassing L1 (FIFO data written by another SM).
template <typename T>
__device__ __forceinline__ T ngLoadCG(const T* p) {
  typedef typename ngUint<sizeof(T)>::type U;
  U u;
  if (sizeof(T) == 1) {
    uint16_t t;
    asm volatile("ld.global.cg.u8 %0, [%1];" : "=h"(t) : "l"(p));
    u = (U)t;
  } else if (sizeof(T) == 2) {
    uint16_t t;
    asm volatile("ld.global.cg.u16 %0, [%1];" : "=h"(t) : "l"(p));
    u = (U)t;
  } else if (sizeof(T) == 4) {
    uint32_t t;
    asm volatile("ld.global.cg.u32 %0, [%1];" : "=r"(t) : "l"(p));
    u = (U)t;
  } else {
    uint64_t t;
    asm volatile("ld.global.cg.u64 %0, [%1];" : "=l"(t) : "l"(p));
    u = (U)t;
  }
  T v;
  memcpy(&v, &u, sizeof(T));
  return v;
}

__device__ __forceinline__ uint4 ngLoadCG16(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.cg.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// Loads 8 bytes [8*pack, 8*pack+8) of a buffer of nbytes bytes; bytes past
// the end read as 0. Element-wise when misaligned. CG loads through L2
// (ngLoadCG), as a peer's buffer must be read; else a plain load, as for
// the user's own buffer.
template <bool CG, typename U>
__device__ __forceinline__ U ngLoadMaybeCG(const U* p) {
  if constexpr (CG) return ngLoadCG(p);
  else return *p;
}

template <typename T, bool CG = false>
__device__ __forceinline__ uint64_t ngLoadPack8(const T* base, int pack, int nbytes) {
  const char* p = reinterpret_cast<const char*>(base) + 8 * (size_t)pack;
  if (((uintptr_t)p & 7) == 0 && 8 * pack + 8 <= nbytes) return ngLoadMaybeCG<CG>(reinterpret_cast<const uint64_t*>(p));
  constexpr int N = 8 / sizeof(T);
  T e[N];
  uint64_t zero = 0;
  memcpy(e, &zero, 8);
#pragma unroll
  for (int i = 0; i < N; i++) {
    if (8 * pack + i * (int)sizeof(T) < nbytes) e[i] = ngLoadMaybeCG<CG>(reinterpret_cast<const T*>(p) + i);
  }
  uint64_t v;
  memcpy(&v, e, 8);
  return v;
}

template <typename T>
__device__ __forceinline__ void ngStorePack8(T* base, int pack, int nbytes, uint64_t v) {
  char* p = reinterpret_cast<char*>(base) + 8 * (size_t)pack;
  if (((uintptr_t)p & 7) == 0 && 8 * pack + 8 <= nbytes) {
    *reinterpret_cast<uint64_t*>(p) = v;
    return;
  }
  constexpr int N = 8 / sizeof(T);
  T e[N];
  memcpy(e, &v, 8);
#pragma unroll
  for (int i = 0; i < N; i++) {
    if (8 * pack + i * (int)sizeof(T) < nbytes) reinterpret_cast<T*>(p)[i] = e[i];
  }
}

// ---- connections ---------------------------------------------------------------------

// A connection as the engine holds it: only the FIFO and the step counter
// live in registers; the rest (head, tail and step pointers, sizes, flags)
// is read from the connection's ngConnInfo when needed, which keeps the
// SIMPLE engine within the kernels' register budget.
struct ngConn {
  const struct ngConnInfo* ci;
  char* buff;    // this protocol's FIFO (the receiver's memory)
  uint64_t step; // this side's step counter (same value in every thread)

  // consumed steps (receiver writes)
  __device__ __forceinline__ uint64_t* head() const { return reinterpret_cast<uint64_t*>(ci->head); }
  // posted steps (sender writes, SIMPLE)
  __device__ __forceinline__ uint64_t* tail() const { return reinterpret_cast<uint64_t*>(ci->tail); }
  // this side's persistent step counter
  __device__ __forceinline__ uint64_t* stepPtr() const { return reinterpret_cast<uint64_t*>(ci->step); }
};

__device__ __forceinline__ void ngConnLoad(ngConn& c, const struct ngConnInfo* ci, int proto) {
  c.ci = ci;
  c.buff = reinterpret_cast<char*>(ci->buffs[proto]);
  c.step = ngLdVolatile(c.stepPtr());
}

// The connection to or from peer on this channel: the ring's from the
// kernel's shared copy where it made one (ngShmem.ringConns), else from
// the channel's peer table. Either is read only.
__device__ __forceinline__ const struct ngConnInfo* ngSendConnInfo(struct ngShmem* sh, int peer) {
  if (sh->ringConns && peer == sh->channel.ring.next) return &sh->ringSend;
  return &reinterpret_cast<const struct ngDevPeer*>(sh->channel.peers)[peer].send;
}
__device__ __forceinline__ const struct ngConnInfo* ngRecvConnInfo(struct ngShmem* sh, int peer) {
  if (sh->ringConns && peer == sh->channel.ring.prev) return &sh->ringRecv;
  return &reinterpret_cast<const struct ngDevPeer*>(sh->channel.peers)[peer].recv;
}

// Spins until *p >= target or an abort; returns false on abort.
__device__ __forceinline__ bool ngWaitGE(struct ngShmem* sh, const uint64_t* p, uint64_t target) {
  int spins = 0;
  while (ngLdVolatile(p) < target) {
    if (++spins == NG_SPINS_BEFORE_ABORT_CHECK) {
      spins = 0;
      if (ngCheckAbort(sh)) return false;
    }
  }
  return true;
}

__device__ __forceinline__ uint32_t ngLLFlag(uint64_t step) { return (uint32_t)(step % 0xFFFFFFFFull) + 1u; }

// Elements one step carries for protocol Proto.
template <typename T, int Proto>
__device__ __forceinline__ int ngStepElems(struct ngShmem* sh) {
  uint32_t slot = sh->comm.buffSizes[Proto] / NG_STEPS;
  uint32_t bytes;
  if (Proto == NG_PROTO_SIMPLE) bytes = slot;
  else if (Proto == NG_PROTO_LL) bytes = slot / 16 * 8;
  else bytes = slot / 128 * 120;
  bytes &= ~15u;
  if (bytes < 16) bytes = 16; // degenerate configuration; keeps loops finite
  return (int)(bytes / sizeof(T));
}

// Element granule chunk boundaries are aligned to (16 bytes).
template <typename T>
__device__ __forceinline__ int ngGranule() { return 16 / (int)sizeof(T) > 0 ? 16 / (int)sizeof(T) : 1; }

// ---- the engine ----------------------------------------------------------------------

template <typename T, typename Op, int Proto, int MaxRecv, int MaxSend>
struct ngPrims {
  struct ngShmem* sh;
  ngGroup g;
  Op op;
  int nRecv, nSend;
  ngConn recv[MaxRecv];
  ngConn send[MaxSend];

  __device__ __forceinline__ ngPrims(struct ngShmem* sh_, ngGroup g_, const int* recvPeers, int nRecv_,
                                     const int* sendPeers, int nSend_)
      : sh(sh_), g(g_), op(sh_->work), nRecv(nRecv_), nSend(nSend_) {
#pragma unroll
    for (int k = 0; k < MaxRecv; k++)
      if (k < nRecv) ngConnLoad(recv[k], ngRecvConnInfo(sh, recvPeers[k]), Proto);
#pragma unroll
    for (int k = 0; k < MaxSend; k++)
      if (k < nSend) ngConnLoad(send[k], ngSendConnInfo(sh, sendPeers[k]), Proto);
#ifdef NG_TRACE
    // The step counters' loads done (the mark depends on their values).
    if (sh->traceClock[7] == 0 && (nRecv == 0 || recv[0].step != ~0ull) && (nSend == 0 || send[0].step != ~0ull))
      ngTraceMark(sh, 7);
#endif
  }

  // Stores the step counters back; call once when the work is done (all threads).
  __device__ __forceinline__ void finish() {
    if (g.tid == 0) {
#pragma unroll
      for (int k = 0; k < MaxRecv; k++)
        if (k < nRecv) ngStVolatile(recv[k].stepPtr(), recv[k].step);
#pragma unroll
      for (int k = 0; k < MaxSend; k++)
        if (k < nSend) ngStVolatile(send[k].stepPtr(), send[k].step);
    }
  }

  // One step. Returns false when the work must stop (abort).
  // xchg (LL only, one send and one receive connection): instead of sending
  // the combined value, send pre(src) and write to dst post(reduce) of it and
  // the received line, own operand first when xchg == 1, the peer's first
  // when 2 (ngAllReduceRing's one hop on 2 ranks).
  __device__ __forceinline__ bool step(const T* src, T* dst, int nelem, bool doRecv, bool doSend, bool post,
                                       int xchg = 0) {
    const int nr = doRecv ? nRecv : 0;
    const int ns = doSend ? nSend : 0;
    // LL one hop: this thread's first line of src goes out now, so that
    // its load overlaps the credit check's (and the constructor's step
    // load) instead of following them.
    uint64_t early = 0;
    if constexpr (Proto == NG_PROTO_LL) {
      const int nbytes = nelem * (int)sizeof(T);
      if (xchg != 0 && g.tid < (nbytes + 7) / 8) early = ngLoadPack8(src, g.tid, nbytes);
    }
    // Wait for credit (thread k waits on send connection k) and, SIMPLE, for
    // data (thread 4+k waits on receive connection k).
    {
      bool ok = true;
#pragma unroll
      for (int k = 0; k < MaxSend; k++)
        if (k < ns && g.tid == k) {
          // head's load goes out before step's value is needed (the
          // constructor's load of it may still be in flight), so that the
          // credit check costs no round trip after it; a short head
          // sends the thread back to memory (ngWaitGE).
          const uint64_t seen = ngLdVolatile(send[k].head());
          if (send[k].step >= NG_STEPS && seen < send[k].step + 1 - NG_STEPS)
            ok = ngWaitGE(sh, send[k].head(), send[k].step + 1 - NG_STEPS) && ok;
        }
      if (Proto == NG_PROTO_LL) {
        // NET: the step's size word, visible before any of its lines (the
        // slot's previous word, of step-NG_STEPS, was shipped: head passed it).
#pragma unroll
        for (int k = 0; k < MaxSend; k++)
          if (k < ns && g.tid == k && ok && (send[k].ci->flags & NG_CONN_STEP_SIZES)) {
            uint32_t* sz = reinterpret_cast<uint32_t*>(send[k].tail() + 1) + send[k].step % NG_STEPS;
            const uint32_t lines = (uint32_t)(nelem * (int)sizeof(T) + 7) / 8;
            const uint32_t word = (uint32_t)NG_STEP_SIZE_LL | ((uint32_t)(send[k].step & 0x7FF) << 20) | lines;
            asm volatile("st.volatile.global.u32 [%0], %1;" ::"l"(sz), "r"(word) : "memory");
            __threadfence_system();
          }
      }
      if (Proto == NG_PROTO_SIMPLE) {
#pragma unroll
        for (int k = 0; k < MaxRecv; k++)
          if (k < nr && g.tid == 4 + k) {
            ok = ngWaitGE(sh, recv[k].tail(), recv[k].step + 1) && ok;
            __threadfence();
          }
      }
      (void)ok;
    }
    ngBarrier(g);
    if (ngAborted(sh)) return false;
#ifdef NG_TRACE
    if (sh->traceClock[3] == 0) ngTraceMark(sh, 3); // the first step's state and credit
#endif

    if (Proto == NG_PROTO_SIMPLE) simpleData(src, dst, nelem, nr, ns, post);
    else if (Proto == NG_PROTO_LL) {
      if (xchg != 0) llExchange(src, dst, nelem, xchg == 1, post, early);
      else llData(src, dst, nelem, nr, ns, post);
    }
    else ll128Data(src, dst, nelem, nr, ns, post);

    ngBarrier(g);
    if (ngAborted(sh)) return false;
    ngTraceMark(sh, 4); // the last step's data exchanged
    if (Proto == NG_PROTO_SIMPLE && ns > 0 && g.tid == 0) {
      bool sys = false;
#pragma unroll
      for (int k = 0; k < MaxSend; k++) {
        if (k < ns && !(send[k].ci->flags & NG_CONN_SAME_GPU)) sys = true;
        // NET: the step's size, which the proxy reads once it sees tail.
        if (k < ns && (send[k].ci->flags & NG_CONN_STEP_SIZES)) {
          uint32_t* sz = reinterpret_cast<uint32_t*>(send[k].tail() + 1) + send[k].step % NG_STEPS;
          asm volatile("st.volatile.global.u32 [%0], %1;" ::"l"(sz), "r"((uint32_t)(nelem * (int)sizeof(T))) : "memory");
        }
      }
      if (sys) __threadfence_system();
      else __threadfence();
#pragma unroll
      for (int k = 0; k < MaxSend; k++)
        if (k < ns) ngStVolatile(send[k].tail(), send[k].step + 1);
    }
    if (nr > 0 && g.tid == 0) {
#pragma unroll
      for (int k = 0; k < MaxRecv; k++)
        if (k < nr) ngStVolatile(recv[k].head(), recv[k].step + 1);
    }
#pragma unroll
    for (int k = 0; k < MaxSend; k++)
      if (k < ns) send[k].step++;
#pragma unroll
    for (int k = 0; k < MaxRecv; k++)
      if (k < nr) recv[k].step++;
    return true;
  }

  __device__ __forceinline__ char* slot(const ngConn& c) const {
    return c.buff + (size_t)(c.step % NG_STEPS) * (c.ci->buffSizes[Proto] / NG_STEPS);
  }

  // ---- SIMPLE ----
  __device__ __forceinline__ void simpleData(const T* src, T* dst, int nelem, int nr, int ns, bool post) {
    const T* in[MaxRecv];
    T* out[MaxSend];
#pragma unroll
    for (int k = 0; k < MaxRecv; k++) in[k] = k < nr ? reinterpret_cast<const T*>(slot(recv[k])) : nullptr;
#pragma unroll
    for (int k = 0; k < MaxSend; k++) out[k] = k < ns ? reinterpret_cast<T*>(slot(send[k])) : nullptr;
    if (src == nullptr && nr == 0) return; // nothing to move
    const bool aligned = (((uintptr_t)src | (uintptr_t)dst) & 15) == 0;
    constexpr int EPP = 16 / sizeof(T);
    const int nPacks = aligned ? nelem / EPP : 0;
    const int tid = g.tid, nt = g.nThreads;
    constexpr int U = 4;
    int i = tid;
    for (; i + (U - 1) * nt < nPacks; i += U * nt) {
      uint4 v[U];
      bool have = false;
      if (src) {
#pragma unroll
        for (int u = 0; u < U; u++) v[u] = ngPackPre<T>(op, reinterpret_cast<const uint4*>(src)[i + u * nt]);
        have = true;
      }
#pragma unroll
      for (int k = 0; k < MaxRecv; k++) {
        if (k < nr) {
          uint4 r[U];
#pragma unroll
          for (int u = 0; u < U; u++) r[u] = ngLoadCG16(reinterpret_cast<const uint4*>(in[k]) + i + u * nt);
#pragma unroll
          for (int u = 0; u < U; u++) v[u] = have ? ngPackReduce<T>(op, v[u], r[u]) : r[u];
          have = true;
        }
      }
      if (post) {
#pragma unroll
        for (int u = 0; u < U; u++) v[u] = ngPackPost<T>(op, v[u]);
      }
      if (dst) {
#pragma unroll
        for (int u = 0; u < U; u++) reinterpret_cast<uint4*>(dst)[i + u * nt] = v[u];
      }
#pragma unroll
      for (int k = 0; k < MaxSend; k++) {
        if (k < ns) {
#pragma unroll
          for (int u = 0; u < U; u++) reinterpret_cast<uint4*>(out[k])[i + u * nt] = v[u];
        }
      }
    }
    for (; i < nPacks; i += nt) {
      uint4 v;
      bool have = false;
      if (src) {
        v = ngPackPre<T>(op, reinterpret_cast<const uint4*>(src)[i]);
        have = true;
      }
#pragma unroll
      for (int k = 0; k < MaxRecv; k++) {
        if (k < nr) {
          uint4 r = ngLoadCG16(reinterpret_cast<const uint4*>(in[k]) + i);
          v = have ? ngPackReduce<T>(op, v, r) : r;
          have = true;
        }
      }
      if (post) v = ngPackPost<T>(op, v);
      if (dst) reinterpret_cast<uint4*>(dst)[i] = v;
#pragma unroll
      for (int k = 0; k < MaxSend; k++)
        if (k < ns) reinterpret_cast<uint4*>(out[k])[i] = v;
    }
    // Element-wise remainder (or everything, when a user pointer is misaligned).
    for (int e = nPacks * EPP + tid; e < nelem; e += nt) {
      T v;
      bool have = false;
      if (src) {
        v = op.pre(src[e]);
        have = true;
      }
#pragma unroll
      for (int k = 0; k < MaxRecv; k++) {
        if (k < nr) {
          T r = ngLoadCG(in[k] + e);
          v = have ? op.reduce(v, r) : r;
          have = true;
        }
      }
      if (post) v = op.post(v);
      if (dst) dst[e] = v;
#pragma unroll
      for (int k = 0; k < MaxSend; k++)
        if (k < ns) out[k][e] = v;
    }
  }

  // ---- LL ----
  // Waits for the line at p to carry flag in both halves and returns its 8
  // data bytes in r; false on abort.
  __device__ __forceinline__ bool llRecvLine(const uint4* p, uint32_t flag, uint64_t& r) {
    uint32_t d0, f0, d1, f1;
    int spins = 0;
    while (true) {
      asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
                   : "=r"(d0), "=r"(f0), "=r"(d1), "=r"(f1)
                   : "l"(p)
                   : "memory");
      if (f0 == flag && f1 == flag) break;
      if (++spins == NG_SPINS_BEFORE_ABORT_CHECK) {
        spins = 0;
        if (ngCheckAbort(sh)) return false;
      }
    }
    r = (uint64_t)d0 | ((uint64_t)d1 << 32);
    return true;
  }

  __device__ __forceinline__ void llSendLine(uint4* p, uint32_t flag, uint64_t v) {
    asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"((uint32_t)v), "r"(flag),
                 "r"((uint32_t)(v >> 32)), "r"(flag)
                 : "memory");
  }

  // The one-hop exchange of step(xchg): each thread sends all its lines
  // of pre(src) before it waits for any of the peer's, so two ranks doing
  // the same never wait on each other. The reduction takes the operands in an order
  // both ranks agree on, so that both write the same bits whatever the op
  // (PreMulSum's pre does not contract into the add: ngMulRn).
  // early: src's line g.tid, loaded by step.
  __device__ __forceinline__ void llExchange(const T* src, T* dst, int nelem, bool ownFirst, bool post, uint64_t early) {
    const int nbytes = nelem * (int)sizeof(T);
    const int nLines = (nbytes + 7) / 8;
    uint4* out = reinterpret_cast<uint4*>(slot(send[0]));
    const uint4* in = reinterpret_cast<const uint4*>(slot(recv[0]));
    const uint32_t outFlag = ngLLFlag(send[0].step), inFlag = ngLLFlag(recv[0].step);
    // Every line of the step is sent before any is awaited: a NET proxy
    // ships an LL step only once all its lines are there, so a thread
    // that waited between its sends would wait on itself.
    uint64_t first = 0;
    for (int line = g.tid; line < nLines; line += g.nThreads) {
      const uint64_t a = ngPackPre<T>(op, line == g.tid ? early : ngLoadPack8(src, line, nbytes));
      if (line == g.tid) first = a;
      llSendLine(out + line, outFlag, a);
    }
    for (int line = g.tid; line < nLines; line += g.nThreads) {
      const uint64_t a = line == g.tid ? first : ngPackPre<T>(op, ngLoadPack8(src, line, nbytes));
      uint64_t r;
      if (!llRecvLine(in + line, inFlag, r)) return;
      uint64_t v = ownFirst ? ngPackReduce<T>(op, a, r) : ngPackReduce<T>(op, r, a);
      if (post) v = ngPackPost<T>(op, v);
      ngStorePack8(dst, line, nbytes, v);
    }
  }

  __device__ __forceinline__ void llData(const T* src, T* dst, int nelem, int nr, int ns, bool post) {
    const int nbytes = nelem * (int)sizeof(T);
    const int nLines = (nbytes + 7) / 8;
    uint4* in[MaxRecv];
    uint4* out[MaxSend];
    uint32_t inFlag[MaxRecv], outFlag[MaxSend];
#pragma unroll
    for (int k = 0; k < MaxRecv; k++) {
      in[k] = k < nr ? reinterpret_cast<uint4*>(slot(recv[k])) : nullptr;
      inFlag[k] = ngLLFlag(recv[k].step);
    }
#pragma unroll
    for (int k = 0; k < MaxSend; k++) {
      out[k] = k < ns ? reinterpret_cast<uint4*>(slot(send[k])) : nullptr;
      outFlag[k] = ngLLFlag(send[k].step);
    }
    for (int line = g.tid; line < nLines; line += g.nThreads) {
      uint64_t v = 0;
      bool have = false;
      if (src) {
        v = ngPackPre<T>(op, ngLoadPack8(src, line, nbytes));
        have = true;
      }
#pragma unroll
      for (int k = 0; k < MaxRecv; k++) {
        if (k < nr) {
          uint64_t r;
          if (!llRecvLine(in[k] + line, inFlag[k], r)) return;
          v = have ? ngPackReduce<T>(op, v, r) : r;
          have = true;
        }
      }
      if (post) v = ngPackPost<T>(op, v);
      if (dst) ngStorePack8(dst, line, nbytes, v);
#pragma unroll
      for (int k = 0; k < MaxSend; k++) {
        if (k < ns) llSendLine(out[k] + line, outFlag[k], v);
      }
    }
  }

  // ---- LL128 ----
  __device__ __forceinline__ void ll128Data(const T* src, T* dst, int nelem, int nr, int ns, bool post) {
    const int nbytes = nelem * (int)sizeof(T);
    const int nPacks = (nbytes + 7) / 8;
    const int nLines = (nPacks + 14) / 15;
    uint64_t* in[MaxRecv];
    uint64_t* out[MaxSend];
    uint64_t inFlag[MaxRecv], outFlag[MaxSend];
#pragma unroll
    for (int k = 0; k < MaxRecv; k++) {
      in[k] = k < nr ? reinterpret_cast<uint64_t*>(slot(recv[k])) : nullptr;
      inFlag[k] = recv[k].step + 1;
    }
#pragma unroll
    for (int k = 0; k < MaxSend; k++) {
      out[k] = k < ns ? reinterpret_cast<uint64_t*>(slot(send[k])) : nullptr;
      outFlag[k] = send[k].step + 1;
    }
    const int lane = g.tid & 31, warp = g.tid >> 5, nWarps = g.nThreads >> 5;
    const int p = lane & 7;
    for (int l0 = warp * 4; l0 < nLines; l0 += nWarps * 4) {
      const int L = l0 + (lane >> 3);
      const bool act = L < nLines;
      const int pa = L * 15 + 2 * p; // first pack of this thread; second is pa+1 unless p == 7
      const bool has0 = act && pa < nPacks;
      const bool has1 = act && p < 7 && pa + 1 < nPacks;
      uint64_t v0 = 0, v1 = 0;
      bool have = false;
      if (src) {
        if (has0) v0 = ngPackPre<T>(op, ngLoadPack8(src, pa, nbytes));
        if (has1) v1 = ngPackPre<T>(op, ngLoadPack8(src, pa + 1, nbytes));
        have = true;
      }
#pragma unroll
      for (int k = 0; k < MaxRecv; k++) {
        if (k < nr) {
          uint64_t r0 = 0, r1 = 0;
          const uint64_t* ptr = in[k] + (size_t)L * 16 + 2 * p;
          int spins = 0;
          while (true) {
            if (act) {
              asm volatile("ld.volatile.global.v2.u64 {%0,%1}, [%2];" : "=l"(r0), "=l"(r1) : "l"(ptr) : "memory");
            }
            const bool mine = !act || p != 7 || r1 == inFlag[k];
            const bool grp = __shfl_sync(0xffffffffu, mine, lane | 7);
            if (__all_sync(0xffffffffu, grp)) break;
            bool stop = false;
            if (++spins == NG_SPINS_BEFORE_ABORT_CHECK) {
              spins = 0;
              stop = ngCheckAbort(sh);
            }
            if (__any_sync(0xffffffffu, stop)) {
              ngSetAborted(sh);
              return;
            }
          }
          if (have) {
            v0 = ngPackReduce<T>(op, v0, r0);
            v1 = ngPackReduce<T>(op, v1, r1);
          } else {
            v0 = r0;
            v1 = r1;
          }
          have = true;
        }
      }
      if (post) {
        v0 = ngPackPost<T>(op, v0);
        v1 = ngPackPost<T>(op, v1);
      }
      if (dst) {
        if (has0) ngStorePack8(dst, pa, nbytes, v0);
        if (has1) ngStorePack8(dst, pa + 1, nbytes, v1);
      }
#pragma unroll
      for (int k = 0; k < MaxSend; k++) {
        if (k < ns && act) {
          uint64_t* ptr = out[k] + (size_t)L * 16 + 2 * p;
          const uint64_t w1 = p == 7 ? outFlag[k] : v1;
          asm volatile("st.volatile.global.v2.u64 [%0], {%1,%2};" ::"l"(ptr), "l"(v0), "l"(w1) : "memory");
        }
      }
    }
  }
};

// Default group: the first ngWorkThreads() threads of the block, barrier 1.
__device__ __forceinline__ ngGroup ngWorkGroup(struct ngShmem* sh) {
  ngGroup g;
  g.tid = threadIdx.x;
  g.nThreads = ngWorkThreads(sh);
  g.barId = 1;
  return g;
}

__device__ __forceinline__ int64_t ngDivUp(int64_t a, int64_t b) { return (a + b - 1) / b; }
__device__ __forceinline__ int64_t ngAlignUp(int64_t a, int64_t b) { return (a + b - 1) / b * b; }
__device__ __forceinline__ int64_t ngMin64(int64_t a, int64_t b) { return a < b ? a : b; }

// Rank `i` steps downstream of us in this channel's ring.
__device__ __forceinline__ int ngRingRank(struct ngShmem* sh, int i) {
  return reinterpret_cast<const int32_t*>(sh->channel.ring.userRanks)[i];
}

// Local pass for one rank: dst = post(pre(src)) over n elements, in steps.
template <typename T, typename Op, int Proto>
__device__ __forceinline__ void ngLocalReduceCopy(struct ngShmem* sh, ngGroup g, const T* src, T* dst, int64_t n,
                                                  bool post) {
  if (!Op::kPre && !(Op::kPost && post) && src == dst) return;
  ngPrims<T, Op, Proto, 1, 1> prims(sh, g, nullptr, 0, nullptr, 0);
  const int cap = ngStepElems<T, Proto>(sh);
  for (int64_t off = 0; off < n; off += cap) {
    int nel = (int)ngMin64(cap, n - off);
    if (!prims.step(src + off, dst + off, nel, false, false, post)) return;
  }
}

#endif // NG_PRIMS_H_
