// ng_device.h — the core of ncclgo's device library.
//
// Every generated translation unit includes this header first, then the
// header of its collective. It provides:
//
//   * the macros the generated code expands (NG_DEV_FUNC, NG_DEV_FUNC_UNSUPPORTED,
//     NG_DEV_FUNC_DECL, NG_DEV_FUNC_PTR, NG_DEV_FUNC_NOP, NG_DEV_KERNEL,
//     NG_INLINE_FUNC, NG_INLINE_DIRECT_LL, NG_DEV_KERNEL_NOP,
//     NG_DEV_KERNEL_GENERIC) and ngDevFuncPtr_t;
//   * the block-shared state (struct ngShmem) every device function receives;
//   * the kernel work loop (ngKernelMain).
//
// Device function signature:  __device__ void ngDevFunc_<sym>(struct ngShmem* sh)
// The kernel owns one `__shared__ struct ngShmem` per block; it holds copies of
// the ngDevComm, of this block's ngDevChannel and of the current ngDevWork,
// plus a block-wide abort word. Functions are reached either inlined (the
// kernel's own function id) or through ngDevFuncTable[funcId].
//
// Threads: a function uses the first nThreads threads of the block
// (work.nWarps*32 when non-zero, capped at blockDim.x); the rest return at
// once. Functions synchronise with named barriers (ids 1..3), never with
// __syncthreads, so a function may run on a subset of the block.
#ifndef NG_DEVICE_H_
#define NG_DEVICE_H_

#include <stdint.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#if CUDART_VERSION >= 11000
#include <cuda_bf16.h>
#endif
#if CUDART_VERSION >= 11080
#include <cuda_fp8.h>
#endif
#include "ngabi.h"

// Block-shared state handed to every device function.
struct ngShmem {
  struct ngDevComm comm;       // copy of the communicator
  struct ngDevChannel channel; // copy of this block's channel
  struct ngDevWork work;       // the work being run
  int32_t aborted;             // non-zero: stop (abort flag seen or error); read through ngAborted()
  int32_t channelId;
  // DIRECT (direct.h): every rank's user buffers for the call in progress,
  // read from the ranks' slots once per call (the LL one-shot: every rank's
  // line buffer in directSend).
  uint64_t directSend[NG_DIRECT_MAX_RANKS];
  uint64_t directRecv[NG_DIRECT_MAX_RANKS];
  // NG_ARGS_ONE_PASS: the launch's ranks (0: not such a launch) and this
  // block's slice; every rank's buffers are in directSend and directRecv.
  int32_t onePassRanks;
  int32_t onePassSlice;
  // The ring's two connections on this channel (receive from ring.prev,
  // send to ring.next), copied before the kernel waits for the grids
  // ahead of it (ngKernelMain, RING kernels), so that a step's first
  // loads after the wait are the counters alone; ringConns says they are
  // there (ngRecvConnInfo and ngSendConnInfo hand them out).
  struct ngConnInfo ringRecv;
  struct ngConnInfo ringSend;
  int32_t ringConns;
  // DIRECT: every rank's mailbox area (the first nRanks entries of
  // comm.direct), copied before the wait by RING kernels on communicators
  // with DIRECT; directAreas says they are there (ngDirectAreaOf).
  uint64_t directArea[NG_DIRECT_MAX_RANKS];
  int32_t directAreas;
  // The table entry of the slot's first work, loaded before the wait
  // (the table is written at module load), or null.
  void (*firstFn)(struct ngShmem*);
#ifdef NG_TRACE
  uint64_t traceClock[8]; // NG_TRACE: clock64 at the kernel's marks (ngTraceMark)
  uint64_t traceWaited;    // NG_TRACE: %globaltimer when the wait for the prior grids returned
#endif
};

typedef void (*ngDevFuncPtr_t)(struct ngShmem*);

extern "C" __device__ ngDevFuncPtr_t const ngDevFuncTable[];
extern "C" __device__ int const ngDevFuncCount;

// ---- errors and abort -------------------------------------------------------

// ngRecordError stores code into *comm->errorFlag unless an error is already there.
__device__ __forceinline__ void ngRecordError(struct ngShmem* sh, uint32_t code) {
  uint32_t* ef = reinterpret_cast<uint32_t*>(sh->comm.errorFlag);
  if (ef) atomicCAS(ef, 0u, code);
}

__device__ __forceinline__ int ngAborted(struct ngShmem* sh) {
  return *reinterpret_cast<volatile int32_t*>(&sh->aborted);
}

__device__ __forceinline__ void ngSetAborted(struct ngShmem* sh) {
  *reinterpret_cast<volatile int32_t*>(&sh->aborted) = 1;
}

// ngCheckAbort polls the host abort flag (and the block abort word). It
// returns true when the caller must stop; the first thread to see the host
// flag records NG_DEV_ERR_ABORTED.
static __device__ __noinline__ bool ngCheckAbort(struct ngShmem* sh) {
  if (ngAborted(sh)) return true;
  volatile uint32_t* af = reinterpret_cast<volatile uint32_t*>(sh->comm.abortFlag);
  if (af && *af != 0) {
    ngRecordError(sh, NG_DEV_ERR_ABORTED);
    ngSetAborted(sh);
    return true;
  }
  return false;
}

// Spins between abort polls.
#ifndef NG_SPINS_BEFORE_ABORT_CHECK
#define NG_SPINS_BEFORE_ABORT_CHECK 4096
#endif

// ---- NG_TRACE: a diagnostic build's timeline ---------------------------------------
//
// A kernel set built with --Xnvcc=-DNG_TRACE=N (ncclgen build) times every
// kernel's first block: thread 0 reads clock64 at fixed marks (entry, the
// communicator loaded, the prior grids waited for, a step's state loaded,
// its data exchanged, the work done, the first work's function entered,
// the connections' step counters loaded) and %globaltimer at entry, after
// the wait and at exit,
// and appends a row to a ring of NG_TRACE_ROWS per translation unit. The
// kernel that appends row N prints the NG_TRACE_DUMP rows before row
// N - NG_TRACE_LAG with device printf (flushed to the process's stdout at
// its next synchronisation), one line per row:
//   NGTRACE idx rank nRanks smid comm gt0 gtEnd c1 c2 c3 c4 c5 c6 c7 gtWaited
// (c1..c7: clock64 cycles since entry at each mark, 0 where not reached).
// Without NG_TRACE the marks compile to nothing.
#ifdef NG_TRACE
#ifndef NG_TRACE_ROWS
#define NG_TRACE_ROWS 4096
#endif
#ifndef NG_TRACE_DUMP
#define NG_TRACE_DUMP 3000
#endif
#ifndef NG_TRACE_LAG
#define NG_TRACE_LAG 200
#endif
struct ngTraceRow {
  uint64_t gt0, gtEnd, comm, gtWaited;
  uint64_t clk[8];
  int32_t rank, nRanks, smid, pad;
};
static __device__ struct ngTraceRow ngTraceRing[NG_TRACE_ROWS];
static __device__ unsigned int ngTraceNext;
static __device__ __forceinline__ uint64_t ngGlobalTimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
#define ngTraceMark(sh, k)                                       \
  do {                                                           \
    if (threadIdx.x == 0) (sh)->traceClock[k] = clock64();       \
  } while (0)
static __device__ __noinline__ void ngTraceEnd(struct ngShmem* sh, uint64_t gt0) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  const unsigned int i = atomicAdd(&ngTraceNext, 1u);
  struct ngTraceRow& r = ngTraceRing[i % NG_TRACE_ROWS];
  r.gt0 = gt0;
  r.gtEnd = ngGlobalTimer();
  r.comm = sh->comm.channels;
  r.gtWaited = sh->traceWaited;
  for (int k = 1; k < 8; k++) r.clk[k] = sh->traceClock[k] ? sh->traceClock[k] - sh->traceClock[0] : 0;
  r.rank = sh->comm.rank;
  r.nRanks = sh->comm.nRanks;
  unsigned int smid;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
  r.smid = (int32_t)smid;
  __threadfence();
  if (i == (unsigned int)NG_TRACE) {
    for (unsigned int j = i - NG_TRACE_LAG - NG_TRACE_DUMP; j < i - NG_TRACE_LAG; j++) {
      const struct ngTraceRow& q = ngTraceRing[j % NG_TRACE_ROWS];
      printf("NGTRACE %u %d %d %d %llx %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu\n", j, q.rank, q.nRanks,
             q.smid, (unsigned long long)q.comm, (unsigned long long)q.gt0, (unsigned long long)q.gtEnd,
             (unsigned long long)q.clk[1], (unsigned long long)q.clk[2], (unsigned long long)q.clk[3],
             (unsigned long long)q.clk[4], (unsigned long long)q.clk[5], (unsigned long long)q.clk[6],
             (unsigned long long)q.clk[7], (unsigned long long)q.gtWaited);
    }
  }
}
#else
#define ngTraceMark(sh, k) \
  do {                     \
  } while (0)
#endif

// ---- thread groups and barriers ----------------------------------------------

// A group of whole warps [first, first+nThreads) that synchronise on named
// barrier barId.
struct ngGroup {
  int tid;      // index within the group
  int nThreads; // multiple of 32
  int barId;    // 1..15
};

__device__ __forceinline__ void ngBarrier(const ngGroup& g) {
  if (g.nThreads == 32) {
    __syncwarp();
  } else {
    asm volatile("bar.sync %0, %1;" ::"r"(g.barId), "r"(g.nThreads) : "memory");
  }
}

// ---- memory helpers -------------------------------------------------------------

__device__ __forceinline__ uint64_t ngLdVolatile(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void ngStVolatile(uint64_t* p, uint64_t v) {
  asm volatile("st.volatile.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// Number of threads a function may use for the current work.
__device__ __forceinline__ int ngWorkThreads(struct ngShmem* sh) {
  int n = blockDim.x & ~31;
  int w = sh->work.nWarps;
  if (w != 0 && w * 32 < n) n = w * 32;
  return n;
}

__device__ __forceinline__ void ngReportUnsupported(struct ngShmem* sh) {
  if (threadIdx.x == 0) ngRecordError(sh, NG_DEV_ERR_UNSUPPORTED);
}

static __device__ __noinline__ void ngDevFuncUnsupported(struct ngShmem* sh) { ngReportUnsupported(sh); }

// ---- the kernel -----------------------------------------------------------------

__device__ __forceinline__ int ngNthSetBit(uint64_t mask, int n) {
  for (int i = 0; i < n; i++) mask &= mask - 1; // drop the n lowest set bits
  return mask ? __ffsll((long long)mask) - 1 : -1;
}

__device__ __forceinline__ void ngRunWorkDispatch(struct ngShmem* sh, int fid, ngDevFuncPtr_t pre) {
  if (pre != nullptr) {
    pre(sh);
    return;
  }
  if (fid >= 0 && fid < ngDevFuncCount) {
    ngDevFuncPtr_t f = ngDevFuncTable[fid];
    if (f != nullptr) {
      f(sh);
      return;
    }
  }
  if (threadIdx.x == 0) {
    ngRecordError(sh, NG_DEV_ERR_BAD_WORK);
    ngSetAborted(sh);
  }
}

// ---- functions a kernel runs without the table call ----------------------------
//
// Besides its own function, a kernel may run some of its siblings inline
// (the generator lists them, gen.inlineSiblings): each is an ngInlineFunc
// (runs every work of its id) or an ngInlineEntry (runs the works of its
// id it can, reporting which; the others go through the table), gathered
// in an ngInlineSet that the work loop asks before the table call. Below
// NG_INLINE_ARCH (kspace.InlineArch, sm_90) the set is empty
// (NG_INLINE_SIBLINGS): ptxas cannot fit the SIMPLE engine next to LL
// within the kernels' 96 registers there without spilling.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < NG_INLINE_ARCH
#define NG_INLINE_SIBLINGS 0
#else
#define NG_INLINE_SIBLINGS 1
#endif

// ngInlineFunc runs F (an ngCollFunc) for the works of function Id.
template <int Id, typename F>
struct ngInlineFunc {
  static constexpr int kId = Id;
  static constexpr bool kAlways = true;
  static __device__ __forceinline__ bool run(struct ngShmem* sh) {
    F::run(sh);
    return true;
  }
};

// ngInlineEntry runs the works of function Id that E::run takes, and
// reports whether it took the work.
template <int Id, typename E>
struct ngInlineEntry {
  static constexpr int kId = Id;
  static constexpr bool kAlways = false;
  static __device__ __forceinline__ bool run(struct ngShmem* sh) { return E::run(sh); }
};

// ngInlineSet runs a work inline when one of its members takes it.
template <typename... S>
struct ngInlineSet {
  // run reports whether a member ran the work of function fid.
  static __device__ __forceinline__ bool run(struct ngShmem* sh, int fid) {
    if constexpr (NG_INLINE_SIBLINGS && sizeof...(S) > 0) {
      return ((fid == S::kId && S::run(sh)) || ...);
    }
    (void)sh;
    (void)fid;
    return false;
  }
  // always reports whether every work of function fid runs inline.
  static __device__ __forceinline__ bool always(int fid) {
    if constexpr (NG_INLINE_SIBLINGS && sizeof...(S) > 0) {
      return ((fid == S::kId && S::kAlways) || ...);
    }
    (void)fid;
    return false;
  }
};

// ngWaitPriorGrids waits until the grids this kernel depends on have
// completed and their memory operations are visible (PTX
// griddepcontrol.wait, sm_90 and later; earlier arches have no
// programmatic launch, and nothing to wait for).
__device__ __forceinline__ void ngWaitPriorGrids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// ngTriggerDependents lets the next programmatic launch on this kernel's
// stream start once every block of this grid has called it or exited (PTX
// griddepcontrol.launch_dependents, sm_90 and later; nothing earlier).
__device__ __forceinline__ void ngTriggerDependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// ngNoOnePass stands for "no one-pass entry": the kernel's function is
// not one a multi-rank launch runs in one pass (NG_ARGS_ONE_PASS).
struct ngNoOnePass {
  static constexpr bool kHas = false;
  static __device__ __forceinline__ bool run(const struct ngKernelArgs&, int) { return false; }
};

// ngOnePassOf<Coll, T, Op>::type is the one-pass entry of a kernel whose
// function is (Coll, T, Op): ngNoOnePass but where a collective's header
// specializes it (all_reduce.h).
template <int Coll, typename T, typename Op>
struct ngOnePassOf {
  typedef ngNoOnePass type;
};

// ngNoDirectLL stands for "no DIRECT LL one-shot": the kernel's
// collective has none (DIRECT's LL one-shot is AllReduce's).
struct ngNoDirectLL {
  static __device__ __forceinline__ bool run(struct ngShmem*) { return false; }
};

// ngDirectLLOf<Coll, T, Op>::type runs the DIRECT works that need no
// barrier (a one-pass launch's, the LL one-shot's) and reports whether it
// did (not when the work's share is larger): ngNoDirectLL but where a
// collective's header specializes it (all_reduce.h). A RING LL kernel
// runs it inline as an ngInlineEntry.
template <int Coll, typename T, typename Op>
struct ngDirectLLOf {
  typedef ngNoDirectLL type;
};

// FnId: the function this kernel inlines (-1: none; -2: report every work
// unsupported); F: that function. Inline: its siblings that run without
// the table call too (an ngInlineSet; the SIMPLE sibling of a RING LL
// kernel's function, so that large calls skip the table call's register
// saves, and its type's DIRECT LL one-shots, the smallest AllReduces).
// OnePassF: the one-pass entry of F's collective and type (ngOnePassOf),
// which runs a one-pass launch (NG_ARGS_ONE_PASS_ENTRY) straight from the
// arguments, without the work loop's shared state, barriers and table call.
// RingConns: copy the channel's ring connections into shared memory before
// the wait (a RING kernel's works start with them).
template <int FnId, ngDevFuncPtr_t F, typename Inline = ngInlineSet<>, typename OnePassF = ngNoOnePass,
          bool RingConns = false>
__device__ __forceinline__ void ngKernelMain(const struct ngKernelArgs& args) {
  __shared__ struct ngShmem sh;
  const int tid = threadIdx.x;
#ifdef NG_TRACE
  const uint64_t traceGt0 = ngGlobalTimer();
  if (tid == 0) {
    for (int k = 1; k < 8; k++) sh.traceClock[k] = 0;
    sh.traceClock[0] = clock64();
  }
#endif
  // This block's slot: one rank's channel. A one-rank launch's slot is its
  // channel; a multi-rank launch (nParts > 0) maps it to a rank and a channel
  // through the ngLaunchParts table after its inline works.
  const int v = ngNthSetBit(args.channelMask, blockIdx.x);
  if (v < 0) return; // more blocks than slots: nothing to do (uniform over the block)
  if constexpr (OnePassF::kHas) {
    // A one-pass launch of this kernel's type (NG_ARGS_ONE_PASS_ENTRY)
    // needs nothing but the arguments; run is false, having done nothing,
    // for an op it does not know, which the work loop then runs.
    if ((args.flags & NG_ARGS_ONE_PASS_ENTRY) && OnePassF::run(args, v)) return;
  }
  int c = v;
  const struct ngDevComm* comm = reinterpret_cast<const struct ngDevComm*>(args.comm);
  if (args.nParts != 0) {
    const struct ngLaunchParts* parts = reinterpret_cast<const struct ngLaunchParts*>(args.works + args.nWork);
    const uint32_t e = parts->chans[v];
    c = e & (NG_MAX_CHANNELS - 1);
    comm = reinterpret_cast<const struct ngDevComm*>(parts->comms[e >> 6]);
  }
  // Copy the communicator (8 words), the channel (8 words) and the slot's
  // first work (8 words, threads 96..103: a block has at least 128,
  // enqueue.MinBlockThreads) into shared memory: the host wrote them all
  // before the launch.
  static_assert(sizeof(struct ngDevComm) == 8 * 8 && sizeof(struct ngDevChannel) == 8 * 8 && sizeof(struct ngDevWork) == 8 * 8,
                "ngKernelMain copies 8 words of each");
  const struct ngDevWork* works =
      args.workBuf ? reinterpret_cast<const struct ngDevWork*>(args.workBuf) : args.works;
  const int wBegin = args.chanWorkStart[v], wEnd = args.chanWorkStart[v + 1];
  if (tid >= 96 && tid < 104 && wBegin < wEnd)
    reinterpret_cast<uint64_t*>(&sh.work)[tid - 96] = reinterpret_cast<const uint64_t*>(works + wBegin)[tid - 96];
  if (args.flags & NG_ARGS_ONE_PASS) {
    // Every rank's buffers are in the arguments (works[q] is rank q's) and
    // no block talks to another: the communicator and the channel stay
    // unread (zeroed: no error flag to write), which spares their loads.
    if (tid < 8) {
      reinterpret_cast<uint64_t*>(&sh.comm)[tid] = 0;
    } else if (tid >= 32 && tid < 32 + (int)args.nParts) {
      sh.directSend[tid - 32] = args.works[tid - 32].sendbuff;
      sh.directRecv[tid - 32] = args.works[tid - 32].recvbuff;
    } else if (tid == 64) {
      sh.aborted = 0;
      sh.channelId = c;
      sh.onePassRanks = (int)args.nParts;
      sh.onePassSlice = v;
    }
  } else if (tid < 8) {
    reinterpret_cast<uint64_t*>(&sh.comm)[tid] = reinterpret_cast<const uint64_t*>(comm)[tid];
  } else if (tid >= 32 && tid < 40) {
    const struct ngDevChannel* chans = reinterpret_cast<const struct ngDevChannel*>(comm->channels);
    reinterpret_cast<uint64_t*>(&sh.channel)[tid - 32] = reinterpret_cast<const uint64_t*>(chans + c)[tid - 32];
  } else if (tid == 64) {
    sh.aborted = 0;
    sh.channelId = c;
    sh.onePassRanks = 0;
  }
  if (tid == 65) sh.ringConns = 0;
  if (tid == 66) sh.directAreas = 0;
  __syncthreads();
  if (tid == 67) {
    // The first work's table entry, where the work loop will call through
    // the table (the entry's global load overlaps the wait below).
    const int fid = wBegin < wEnd ? sh.work.funcId : -1;
    const bool inlined = fid == FnId || Inline::always(fid);
    sh.firstFn = (fid >= 0 && fid < ngDevFuncCount && !inlined) ? ngDevFuncTable[fid] : nullptr;
  }
  if constexpr (RingConns) {
    // Uniform over the block: the arguments and the shared copies.
    const int prev = sh.channel.ring.prev, next = sh.channel.ring.next, n = sh.comm.nRanks;
    const bool onePass = (args.flags & NG_ARGS_ONE_PASS) != 0;
    const bool ring = !onePass && sh.channel.peers != 0 && n > 1 && prev >= 0 && prev < n && next >= 0 && next < n;
    // The mailbox table's first nRanks entries are written at setup, like
    // the connections (threads 96..127: a block has at least 128).
    const bool direct = !onePass && sh.comm.direct != 0 && n > 1 && n <= NG_DIRECT_MAX_RANKS;
    if (ring) {
      constexpr int kWords = (int)(sizeof(struct ngConnInfo) / 8);
      static_assert(sizeof(struct ngConnInfo) % 8 == 0 && kWords <= 32, "ngKernelMain copies a connection by words");
      const struct ngDevPeer* peers = reinterpret_cast<const struct ngDevPeer*>(sh.channel.peers);
      if (tid < kWords) {
        reinterpret_cast<uint64_t*>(&sh.ringRecv)[tid] = reinterpret_cast<const uint64_t*>(&peers[prev].recv)[tid];
      } else if (tid >= 32 && tid < 32 + kWords) {
        reinterpret_cast<uint64_t*>(&sh.ringSend)[tid - 32] = reinterpret_cast<const uint64_t*>(&peers[next].send)[tid - 32];
      } else if (tid == 64) {
        sh.ringConns = 1;
      }
    }
    if (direct) {
      static_assert(NG_DIRECT_MAX_RANKS <= 32, "ngKernelMain copies the mailbox table with threads 96..127");
      if (tid >= 96 && tid < 96 + n) {
        sh.directArea[tid - 96] = reinterpret_cast<const uint64_t*>(sh.comm.direct)[tid - 96];
      } else if (tid == 66) {
        sh.directAreas = 1;
      }
    }
    if (ring || direct) __syncthreads();
  }
  ngTraceMark(&sh, 1);
  // NG_KERNEL_PROGRAMMATIC: the host may have launched this kernel before
  // the grids ahead of it on its stream finished (programmatic dependent
  // launch). What was read so far the host wrote before the launch; from
  // here on the kernel reads and writes what earlier work writes (user
  // buffers, step counters, FIFOs), so it waits for those grids and their
  // memory first. Without a programmatic launch the wait returns at once.
  ngWaitPriorGrids();
  ngTraceMark(&sh, 2);
#ifdef NG_TRACE
  if (tid == 0) sh.traceWaited = ngGlobalTimer();
#endif
  // NG_ARGS_TRIGGER_EARLY: only after the wait, so that the next kernel,
  // which waits in its turn, is the only one queued behind this one that
  // can be resident beside it (the host budgets two kernels per stream).
  if (args.flags & NG_ARGS_TRIGGER_EARLY) ngTriggerDependents();
  for (int w = wBegin; w < wEnd; w++) {
    if (w != wBegin && tid < 8) reinterpret_cast<uint64_t*>(&sh.work)[tid] = reinterpret_cast<const uint64_t*>(works + w)[tid];
    __syncthreads();
#ifdef NG_TRACE
    if (w == wBegin) ngTraceMark(&sh, 6);
#endif
    const int fid = sh.work.funcId;
    if (FnId == -2) {
      ngDevFuncUnsupported(&sh);
    } else if (FnId >= 0 && fid == FnId) {
      F(&sh);
    } else if (Inline::run(&sh, fid)) {
    } else {
      ngRunWorkDispatch(&sh, fid, w == wBegin ? sh.firstFn : nullptr);
    }
    __syncthreads();
    if (ngAborted(&sh)) break;
  }
#ifdef NG_TRACE
  ngTraceMark(&sh, 5);
  ngTraceEnd(&sh, traceGt0);
#endif
}

// ---- the generated code's contract -------------------------------------------

#define NG_DEV_FUNC_DECL(sym) __device__ void ngDevFunc_##sym(struct ngShmem* sh);
#define NG_DEV_FUNC_PTR(sym) (&ngDevFunc_##sym)
#define NG_DEV_FUNC_NOP(sym) \
  __device__ void ngDevFunc_##sym(struct ngShmem* sh) { (void)sh; }

// ngCollFunc<Coll, T, Op, Algo, Proto>::run(sh) is specialised by the collective headers.
template <int Coll, typename T, typename Op, int Algo, int Proto>
struct ngCollFunc;
// Its Coll is an NG_COLL_<Name> value, Algo an NG_ALGO_*, Proto an NG_PROTO_*:
// ngabi.h declares them from kspace's vocabulary tables.

#define NG_DEV_FUNC(sym, Coll, RedOp, T, Algo, Proto)                                          \
  __device__ void ngDevFunc_##sym(struct ngShmem* sh) {                                       \
    ngCollFunc<NG_COLL_##Coll, T, ngOp##RedOp<T>, NG_ALGO_##Algo, NG_PROTO_##Proto>::run(sh); \
  }

#define NG_DEV_FUNC_UNSUPPORTED(sym, Coll, RedOp, T, Algo, Proto) \
  __device__ void ngDevFunc_##sym(struct ngShmem* sh) { ngReportUnsupported(sh); }

#define NG_KERNEL_SIGNATURE(sym)                                       \
  extern "C" __global__ void __launch_bounds__(NG_MAX_NTHREADS, 1) \
  ngDevKernel_##sym(__grid_constant__ struct ngKernelArgs const args)

// The host pass only needs the kernel's stub; the device function it inlines
// may be defined for some device architectures only. After fnId come the
// siblings the kernel runs inline too (NG_INLINE_FUNC, NG_INLINE_DIRECT_LL;
// none for most kernels): see ngInlineSet.
#define NG_INLINE_FUNC(id, Coll, RedOp, T, Algo, Proto) \
  ngInlineFunc<id, ngCollFunc<NG_COLL_##Coll, T, ngOp##RedOp<T>, NG_ALGO_##Algo, NG_PROTO_##Proto>>
#define NG_INLINE_DIRECT_LL(id, Coll, RedOp, T) \
  ngInlineEntry<id, typename ngDirectLLOf<NG_COLL_##Coll, T, ngOp##RedOp<T>>::type>
#if defined(__CUDA_ARCH__)
#define NG_DEV_KERNEL(sym, Coll, RedOp, T, Algo, Proto, fnId, ...)                              \
  NG_KERNEL_SIGNATURE(sym) {                                                                 \
    ngKernelMain<fnId, &ngDevFunc_##sym, ngInlineSet<__VA_ARGS__>,                           \
                 typename ngOnePassOf<NG_COLL_##Coll, T, ngOp##RedOp<T>>::type,               \
                 NG_ALGO_##Algo == NG_ALGO_RING>(args);                                        \
  }
#else
#define NG_DEV_KERNEL(sym, Coll, RedOp, T, Algo, Proto, fnId, ...) \
  NG_KERNEL_SIGNATURE(sym) { (void)args; }
#endif

// Arch too old for the kernel's type: every work reports unsupported.
#define NG_DEV_KERNEL_NOP(sym, fnId) \
  NG_KERNEL_SIGNATURE(sym) { (void)(fnId); ngKernelMain<-2, &ngDevFuncUnsupported>(args); }

#define NG_DEV_KERNEL_GENERIC(sym) \
  NG_KERNEL_SIGNATURE(sym) { ngKernelMain<-1, &ngDevFuncUnsupported>(args); }

#include "ng_reduce.h"
#include "ng_prims.h"

#endif // NG_DEVICE_H_
