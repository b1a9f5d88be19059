// harness.cu — standalone correctness and bandwidth harness for devicesrc/.
//
// Builds, for N ranks sharing ONE GPU, exactly the device state the Go
// runtime builds: one ngDevComm per rank, its ngDevChannels, an ngDevPeer
// array per channel, one connection per ordered pair of ranks per channel
// (receiver-owned FIFOs for LL/LL128/SIMPLE, head/tail counters, one step
// counter per side, ptrExchange slots), everything zeroed; ring 0→1→…→N-1,
// a binary tree (parent (r-1)/2). One stream per rank; kernels launched by
// symbol from the linked device image; works split across channels.
// Results are checked exactly against a host reference (data are small
// integers, so every reduction order gives the same bits).
//
// usage: harness <device_table.cu> [--quick] [--bw-only]
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <type_traits>
#include <vector>
#include "ngabi.h"

#define CK(x)                                                                          \
  do {                                                                                 \
    cudaError_t e_ = (x);                                                              \
    if (e_ != cudaSuccess) {                                                           \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(2);                                                                         \
    }                                                                                  \
  } while (0)

extern "C" __global__ void ngDevKernel_Generic(__grid_constant__ const struct ngKernelArgs args);
extern "C" __global__ void ngDevKernel_AllReduce_Sum_f32_RING_LL(__grid_constant__ const struct ngKernelArgs args);

static std::map<std::string, int> gFuncIds;

static void loadFuncIds(const char* path) {
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    size_t a = line.find("/*"), b = line.find("*/ NG_DEV_FUNC_PTR(");
    if (a != 0 || b == std::string::npos) continue;
    int id = atoi(line.substr(2, b - 2).c_str());
    size_t s = b + strlen("*/ NG_DEV_FUNC_PTR(");
    size_t e = line.find(')', s);
    gFuncIds[line.substr(s, e - s)] = id;
  }
  if (gFuncIds.empty()) {
    fprintf(stderr, "no function ids in %s\n", path);
    exit(2);
  }
}
static int fid(const std::string& name) {
  auto it = gFuncIds.find(name);
  if (it == gFuncIds.end()) {
    fprintf(stderr, "function %s not in the table\n", name.c_str());
    return 0xFFFF; // the kernel reports NG_DEV_ERR_BAD_WORK
  }
  return it->second;
}

// ---- the world: N ranks on one GPU ---------------------------------------------------

static const uint32_t kBuffSizes[3] = {8 * 512 * 8 * 16, 120 * 640 * 8 * 8, 4 << 20}; // LL, LL128, SIMPLE

struct Rank {
  ngDevComm* dComm;
  ngDevChannel* dChannels;
  std::vector<ngDevPeer*> dPeers;   // per channel
  std::vector<int32_t*> dUserRanks; // per channel
  uint32_t* hAbort;                 // host-mapped
  uint32_t* hError;
  uint32_t* dAbort;
  uint32_t* dError;
  cudaStream_t stream;
};

struct World {
  int N = 0, C = 0;
  std::vector<Rank> ranks;
  std::vector<void*> allocs;

  void* dalloc(size_t n) {
    void* p;
    CK(cudaMalloc(&p, n));
    CK(cudaMemset(p, 0, n));
    allocs.push_back(p);
    return p;
  }

  void init(int n, int c) {
    N = n;
    C = c;
    ranks.resize(N);
    // host-side channel images
    std::vector<std::vector<std::vector<ngDevPeer>>> peers(N, std::vector<std::vector<ngDevPeer>>(C, std::vector<ngDevPeer>(N)));
    for (int r = 0; r < N; r++)
      for (int ch = 0; ch < C; ch++) memset(peers[r][ch].data(), 0, sizeof(ngDevPeer) * N);
    for (int ch = 0; ch < C; ch++) {
      for (int s = 0; s < N; s++) {
        for (int r = 0; r < N; r++) {
          if (s == r) continue;
          // connection s -> r on channel ch, FIFOs owned by r
          ngConnInfo ci;
          memset(&ci, 0, sizeof(ci));
          for (int p = 0; p < 3; p++) {
            ci.buffs[p] = (uint64_t)dalloc(kBuffSizes[p]);
            ci.buffSizes[p] = kBuffSizes[p];
          }
          uint64_t* ctr = (uint64_t*)dalloc(8 * sizeof(uint64_t)); // head, tail, sendStep, recvStep, ptrExchange[4]
          ci.head = (uint64_t)(ctr + 0);
          ci.tail = (uint64_t)(ctr + 1);
          ci.ptrExchange = (uint64_t)(ctr + 4);
          ci.flags = NG_CONN_DIRECT | NG_CONN_SAME_GPU;
          ngConnInfo snd = ci, rcv = ci;
          snd.step = (uint64_t)(ctr + 2);
          rcv.step = (uint64_t)(ctr + 3);
          peers[s][ch][r].send = snd;
          peers[r][ch][s].recv = rcv;
        }
      }
    }
    for (int r = 0; r < N; r++) {
      Rank& R = ranks[r];
      CK(cudaStreamCreateWithFlags(&R.stream, cudaStreamNonBlocking));
      CK(cudaHostAlloc((void**)&R.hAbort, 64, cudaHostAllocMapped));
      R.hError = R.hAbort + 4;
      memset(R.hAbort, 0, 64);
      CK(cudaHostGetDevicePointer((void**)&R.dAbort, R.hAbort, 0));
      R.dError = R.dAbort + 4;
      std::vector<ngDevChannel> chans(C);
      R.dPeers.resize(C);
      R.dUserRanks.resize(C);
      for (int ch = 0; ch < C; ch++) {
        R.dPeers[ch] = (ngDevPeer*)dalloc(sizeof(ngDevPeer) * N);
        CK(cudaMemcpy(R.dPeers[ch], peers[r][ch].data(), sizeof(ngDevPeer) * N, cudaMemcpyHostToDevice));
        std::vector<int32_t> ur(N);
        for (int i = 0; i < N; i++) ur[i] = (r + i) % N;
        R.dUserRanks[ch] = (int32_t*)dalloc(sizeof(int32_t) * N);
        CK(cudaMemcpy(R.dUserRanks[ch], ur.data(), sizeof(int32_t) * N, cudaMemcpyHostToDevice));
        ngDevChannel& dc = chans[ch];
        memset(&dc, 0, sizeof(dc));
        dc.ring.prev = (r - 1 + N) % N;
        dc.ring.next = (r + 1) % N;
        dc.ring.index = r;
        dc.ring.userRanks = (uint64_t)R.dUserRanks[ch];
        dc.tree.up = r == 0 ? -1 : (r - 1) / 2;
        for (int k = 0; k < 3; k++) dc.tree.down[k] = -1;
        int nd = 0;
        for (int k = 1; k <= 2; k++)
          if (2 * r + k < N) dc.tree.down[nd++] = 2 * r + k;
        dc.peers = (uint64_t)R.dPeers[ch];
        dc.id = ch;
      }
      R.dChannels = (ngDevChannel*)dalloc(sizeof(ngDevChannel) * C);
      CK(cudaMemcpy(R.dChannels, chans.data(), sizeof(ngDevChannel) * C, cudaMemcpyHostToDevice));
      ngDevComm hc;
      memset(&hc, 0, sizeof(hc));
      hc.rank = r;
      hc.nRanks = N;
      hc.nChannels = C;
      hc.abortFlag = (uint64_t)R.dAbort;
      hc.errorFlag = (uint64_t)R.dError;
      hc.channels = (uint64_t)R.dChannels;
      for (int p = 0; p < 3; p++) hc.buffSizes[p] = kBuffSizes[p];
      R.dComm = (ngDevComm*)dalloc(sizeof(ngDevComm));
      CK(cudaMemcpy(R.dComm, &hc, sizeof(hc), cudaMemcpyHostToDevice));
    }
    CK(cudaDeviceSynchronize());
  }

  void reset() {
    int n = N, c = C;
    destroy();
    init(n, c);
  }

  void destroy() {
    CK(cudaDeviceSynchronize());
    for (void* p : allocs) CK(cudaFree(p));
    allocs.clear();
    for (auto& R : ranks) {
      CK(cudaStreamDestroy(R.stream));
      CK(cudaFreeHost(R.hAbort));
    }
    ranks.clear();
  }

  // Launches per-rank works (works[r][c] for channel c) and waits; returns
  // false (after aborting) on timeout or device error.
  bool run(std::vector<std::vector<ngDevWork>>& works, int nThreads, bool specialized = false, double timeoutS = 8) {
    for (int r = 0; r < N; r++) {
      ngKernelArgs a;
      memset(&a, 0, sizeof(a));
      a.comm = (uint64_t)ranks[r].dComm;
      a.channelMask = C == 64 ? ~0ull : ((1ull << C) - 1);
      a.nWork = C;
      for (int c = 0; c <= C; c++) a.chanWorkStart[c] = c;
      for (int c = 0; c < C; c++) a.works[c] = works[r][c];
      if (specialized) ngDevKernel_AllReduce_Sum_f32_RING_LL<<<C, nThreads, 0, ranks[r].stream>>>(a);
      else ngDevKernel_Generic<<<C, nThreads, 0, ranks[r].stream>>>(a);
      CK(cudaGetLastError());
    }
    auto t0 = std::chrono::steady_clock::now();
    bool timedOut = false;
    for (;;) {
      bool done = true;
      for (int r = 0; r < N; r++) {
        cudaError_t e = cudaStreamQuery(ranks[r].stream);
        if (e == cudaErrorNotReady) done = false;
        else CK(e);
      }
      if (done) break;
      double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (el > timeoutS && !timedOut) {
        timedOut = true;
        for (int r = 0; r < N; r++) *(volatile uint32_t*)ranks[r].hAbort = 1;
      }
    }
    bool ok = !timedOut;
    for (int r = 0; r < N; r++) {
      uint32_t e = *(volatile uint32_t*)ranks[r].hError;
      if (e != 0) {
        if (!timedOut) printf("    rank %d: device error %u\n", r, e);
        ok = false;
      }
    }
    if (timedOut) printf("    TIMEOUT: aborted (errorFlag rank0=%u)\n", *(volatile uint32_t*)ranks[0].hError);
    return ok;
  }
};

// ---- types -------------------------------------------------------------------------------

template <typename T> struct HT {
  static T mk(double v) { return (T)v; }
  static double val(T x) { return (double)x; }
  static const char* name();
};
template <> const char* HT<float>::name() { return "f32"; }
template <> const char* HT<uint32_t>::name() { return "u32"; }
template <> const char* HT<int32_t>::name() { return "i32"; }
template <> const char* HT<int8_t>::name() { return "i8"; }
template <> struct HT<half> {
  static half mk(double v) { return __float2half((float)v); }
  static double val(half x) { return __half2float(x); }
  static const char* name() { return "f16"; }
};
template <> struct HT<__nv_bfloat16> {
  static __nv_bfloat16 mk(double v) { return __float2bfloat16((float)v); }
  static double val(__nv_bfloat16 x) { return __bfloat162float(x); }
  static const char* name() { return "bf16"; }
};
template <> struct HT<__nv_fp8_e4m3> {
  static __nv_fp8_e4m3 mk(double v) { return __nv_fp8_e4m3((float)v); }
  static double val(__nv_fp8_e4m3 x) { return (float)x; }
  static const char* name() { return "f8e4m3"; }
};

enum Op { OpSum, OpProd, OpMin, OpMax, OpPreMul, OpPostDiv };

static double refInput(Op op, const char* tname, int r, size_t i) {
  unsigned h = (unsigned)(r * 131 + i * 7 + (i >> 9));
  if (op == OpProd) { int m = h % 5; return m == 0 ? 2 : (m == 1 ? -1 : 1); }
  if (!strcmp(tname, "f8e4m3")) return h % 3;
  if (!strcmp(tname, "u32") || !strcmp(tname, "i8")) return h % 11;
  return (double)(int)(h % 9) - 4;
}

static const char* protoName(int p) { return p == 0 ? "LL" : (p == 1 ? "LL128" : "SIMPLE"); }

static int gFail = 0, gPass = 0;

static void report(bool ok, const std::string& what) {
  if (ok) gPass++;
  else gFail++;
  if (!ok) printf("FAIL %s\n", what.c_str());
}

// Splits n items over C channels in 16-item-aligned parts.
static void split(size_t n, int C, int c, size_t& off, size_t& cnt) {
  size_t per = (n + C - 1) / C;
  per = (per + 15) / 16 * 16;
  off = std::min(n, per * c);
  cnt = std::min(per, n - off);
}

// ---- reductions: AllReduce / ReduceScatter / Reduce --------------------------------------

enum Coll { CAllReduce, CReduceScatter, CReduce };

template <typename T>
static bool testReduce(World& W, Coll coll, Op op, const std::string& fname, size_t count, bool inPlace, int mis,
                       int nThreads, double preScalar = 0.5, int root = 0) {
  const int N = W.N, C = W.C;
  const char* tn = HT<T>::name();
  size_t sendElems = coll == CReduceScatter ? count * N : count;
  size_t recvElems = count;
  std::vector<T*> sb(N), rb(N), sbase(N), rbase(N);
  for (int r = 0; r < N; r++) {
    size_t bytes = (std::max(sendElems, recvElems) + 64) * sizeof(T);
    sbase[r] = (T*)W.dalloc(bytes);
    rbase[r] = (T*)W.dalloc(bytes);
    std::vector<T> h(sendElems);
    for (size_t i = 0; i < sendElems; i++) h[i] = HT<T>::mk(refInput(op, tn, r, i));
    sb[r] = sbase[r] + mis;
    if (inPlace) {
      rb[r] = coll == CReduceScatter ? sb[r] + (size_t)r * count : sb[r];
    } else {
      rb[r] = rbase[r] + mis;
      CK(cudaMemset(rbase[r], 0xAB, bytes));
    }
    CK(cudaMemcpy(sb[r], h.data(), sendElems * sizeof(T), cudaMemcpyHostToDevice));
  }
  uint64_t opArg = 0;
  if (op == OpMin) opArg = 1;
  if ((op == OpMin || op == OpMax) && std::is_signed<T>::value) opArg |= 1ull << 63;
  if (op == OpPostDiv) opArg = N;
  if (op == OpPreMul) {
    T s = HT<T>::mk(preScalar);
    memcpy(&opArg, &s, sizeof(T));
  }
  std::vector<std::vector<ngDevWork>> works(N, std::vector<ngDevWork>(C));
  for (int r = 0; r < N; r++)
    for (int c = 0; c < C; c++) {
      ngDevWork& w = works[r][c];
      memset(&w, 0, sizeof(w));
      size_t off, cnt;
      split(count, C, c, off, cnt);
      w.sendbuff = (uint64_t)sb[r];
      w.recvbuff = (uint64_t)rb[r];
      w.count = count;
      w.chanOffset = off;
      w.chanCount = cnt;
      w.redOpArg = opArg;
      w.funcId = fid(fname);
      w.root = root;
      w.sendPeer = w.recvPeer = -1;
    }
  bool ok = W.run(works, nThreads);
  // reference
  size_t bad = 0;
  for (int r = 0; r < N && ok; r++) {
    if (coll == CReduce && r != root) continue;
    std::vector<T> h(recvElems);
    CK(cudaMemcpy(h.data(), rb[r], recvElems * sizeof(T), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < recvElems; i++) {
      size_t si = coll == CReduceScatter ? (size_t)r * count + i : i;
      double acc = 0;
      for (int q = 0; q < N; q++) {
        double x = refInput(op, tn, q, si);
        if (op == OpPreMul) x *= preScalar;
        if (q == 0) acc = x;
        else if (op == OpProd) acc *= x;
        else if (op == OpMin) acc = std::min(acc, x);
        else if (op == OpMax) acc = std::max(acc, x);
        else acc += x;
      }
      if (op == OpPostDiv) acc = std::floor(acc / N);
      T ref = HT<T>::mk(acc);
      if (memcmp(&ref, &h[i], sizeof(T)) != 0) {
        if (bad < 3)
          printf("    rank %d elem %zu: got %g want %g\n", r, i, HT<T>::val(h[i]), HT<T>::val(ref));
        bad++;
      }
    }
  }
  char what[256];
  snprintf(what, sizeof(what), "%s %s N=%d count=%zu %s mis=%d thr=%d (%zu bad)", fname.c_str(), tn, N, count,
           inPlace ? "inplace" : "outofplace", mis, nThreads, bad);
  report(ok && bad == 0, what);
  if (!ok) return false;
  return true;
}

// ---- byte movers: AllGather / Broadcast ---------------------------------------------------

static bool testAllGather(World& W, int proto, size_t count, bool inPlace, int mis, int nThreads) {
  const int N = W.N, C = W.C;
  std::vector<char*> sb(N), rb(N);
  for (int r = 0; r < N; r++) {
    size_t bytes = count * N + 64;
    char* rbase = (char*)W.dalloc(bytes);
    CK(cudaMemset(rbase, 0xAB, bytes));
    rb[r] = rbase + mis;
    if (inPlace) {
      sb[r] = rb[r] + (size_t)r * count;
    } else {
      sb[r] = (char*)W.dalloc(count + 64) + mis;
    }
    std::vector<char> h(count);
    for (size_t i = 0; i < count; i++) h[i] = (char)(r * 37 + i * 13 + (i >> 8));
    CK(cudaMemcpy(sb[r], h.data(), count, cudaMemcpyHostToDevice));
  }
  std::string fname = std::string("AllGather_RING_") + protoName(proto);
  std::vector<std::vector<ngDevWork>> works(N, std::vector<ngDevWork>(C));
  for (int r = 0; r < N; r++)
    for (int c = 0; c < C; c++) {
      ngDevWork& w = works[r][c];
      memset(&w, 0, sizeof(w));
      size_t off, cnt;
      split(count, C, c, off, cnt);
      w.sendbuff = (uint64_t)sb[r];
      w.recvbuff = (uint64_t)rb[r];
      w.count = count;
      w.chanOffset = off;
      w.chanCount = cnt;
      w.funcId = fid(fname);
      w.sendPeer = w.recvPeer = -1;
    }
  bool ok = W.run(works, nThreads);
  size_t bad = 0;
  for (int r = 0; r < N && ok; r++) {
    std::vector<char> h(count * N);
    CK(cudaMemcpy(h.data(), rb[r], count * N, cudaMemcpyDeviceToHost));
    for (int q = 0; q < N; q++)
      for (size_t i = 0; i < count; i++)
        if (h[q * count + i] != (char)(q * 37 + i * 13 + (i >> 8))) bad++;
  }
  char what[256];
  snprintf(what, sizeof(what), "%s N=%d count=%zu %s mis=%d (%zu bad)", fname.c_str(), N, count,
           inPlace ? "inplace" : "outofplace", mis, bad);
  report(ok && bad == 0, what);
  return ok;
}

static bool testBroadcast(World& W, int proto, size_t count, int root, int mis, int nThreads) {
  const int N = W.N, C = W.C;
  std::vector<char*> sb(N), rb(N);
  std::vector<char> h(count);
  for (size_t i = 0; i < count; i++) h[i] = (char)(i * 29 + 3);
  for (int r = 0; r < N; r++) {
    char* rbase = (char*)W.dalloc(count + 64);
    CK(cudaMemset(rbase, 0xAB, count + 64));
    rb[r] = rbase + mis;
    sb[r] = (char*)W.dalloc(count + 64) + mis;
    if (r == root) CK(cudaMemcpy(sb[r], h.data(), count, cudaMemcpyHostToDevice));
  }
  std::string fname = std::string("Broadcast_RING_") + protoName(proto);
  std::vector<std::vector<ngDevWork>> works(N, std::vector<ngDevWork>(C));
  for (int r = 0; r < N; r++)
    for (int c = 0; c < C; c++) {
      ngDevWork& w = works[r][c];
      memset(&w, 0, sizeof(w));
      size_t off, cnt;
      split(count, C, c, off, cnt);
      w.sendbuff = (uint64_t)sb[r];
      w.recvbuff = (uint64_t)rb[r];
      w.count = count;
      w.chanOffset = off;
      w.chanCount = cnt;
      w.funcId = fid(fname);
      w.root = root;
      w.sendPeer = w.recvPeer = -1;
    }
  bool ok = W.run(works, nThreads);
  size_t bad = 0;
  for (int r = 0; r < N && ok; r++) {
    std::vector<char> g(count);
    CK(cudaMemcpy(g.data(), rb[r], count, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < count; i++)
      if (g[i] != h[i]) bad++;
  }
  char what[256];
  snprintf(what, sizeof(what), "%s N=%d count=%zu root=%d mis=%d (%zu bad)", fname.c_str(), N, count, root, mis, bad);
  report(ok && bad == 0, what);
  return ok;
}

// Every rank sends `bytes` to rank+dist and receives from rank-dist.
static bool testSendRecv(World& W, size_t bytes, int dist, int nThreads) {
  const int N = W.N, C = W.C;
  std::vector<char*> sb(N), rb(N);
  for (int r = 0; r < N; r++) {
    sb[r] = (char*)W.dalloc(bytes + 64) + 2;
    char* rbase = (char*)W.dalloc(bytes + 64);
    CK(cudaMemset(rbase, 0xAB, bytes + 64));
    rb[r] = rbase + 2;
    std::vector<char> h(bytes);
    for (size_t i = 0; i < bytes; i++) h[i] = (char)(r * 41 + i * 7 + (i >> 10));
    CK(cudaMemcpy(sb[r], h.data(), bytes, cudaMemcpyHostToDevice));
  }
  std::vector<std::vector<ngDevWork>> works(N, std::vector<ngDevWork>(C));
  for (int r = 0; r < N; r++)
    for (int c = 0; c < C; c++) {
      ngDevWork& w = works[r][c];
      memset(&w, 0, sizeof(w));
      size_t off, cnt;
      split(bytes, C, c, off, cnt);
      w.sendbuff = (uint64_t)(sb[r] + off);
      w.recvbuff = (uint64_t)(rb[r] + off);
      w.count = cnt;
      w.chanCount = cnt;
      w.funcId = fid("SendRecv");
      w.sendPeer = (r + dist) % N;
      w.recvPeer = (r - dist + N) % N;
    }
  bool ok = W.run(works, nThreads);
  size_t bad = 0;
  for (int r = 0; r < N && ok; r++) {
    int from = (r - dist + N) % N;
    std::vector<char> g(bytes);
    CK(cudaMemcpy(g.data(), rb[r], bytes, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < bytes; i++)
      if (g[i] != (char)(from * 41 + i * 7 + (i >> 10))) bad++;
  }
  char what[256];
  snprintf(what, sizeof(what), "SendRecv N=%d bytes=%zu dist=%d (%zu bad)", N, bytes, dist, bad);
  report(ok && bad == 0, what);
  return ok;
}

// ---- bandwidth ------------------------------------------------------------------------------

static void bandwidth(int C, int nThreads, size_t bytes, const char* fname, int iters) {
  World W;
  W.init(2, C);
  size_t count = bytes / sizeof(float);
  std::vector<float*> sb(2), rb(2);
  for (int r = 0; r < 2; r++) {
    sb[r] = (float*)W.dalloc(bytes);
    rb[r] = (float*)W.dalloc(bytes);
  }
  std::vector<std::vector<ngDevWork>> works(2, std::vector<ngDevWork>(C));
  for (int r = 0; r < 2; r++)
    for (int c = 0; c < C; c++) {
      ngDevWork& w = works[r][c];
      memset(&w, 0, sizeof(w));
      size_t off, cnt;
      split(count, C, c, off, cnt);
      w.sendbuff = (uint64_t)sb[r];
      w.recvbuff = (uint64_t)rb[r];
      w.count = count;
      w.chanOffset = off;
      w.chanCount = cnt;
      w.funcId = fid(fname);
      w.sendPeer = w.recvPeer = -1;
    }
  std::vector<ngKernelArgs> args(2);
  for (int r = 0; r < 2; r++) {
    ngKernelArgs& a = args[r];
    memset(&a, 0, sizeof(a));
    a.comm = (uint64_t)W.ranks[r].dComm;
    a.channelMask = C == 64 ? ~0ull : ((1ull << C) - 1);
    a.nWork = C;
    for (int c = 0; c <= C; c++) a.chanWorkStart[c] = c;
    for (int c = 0; c < C; c++) a.works[c] = works[r][c];
  }
  cudaEvent_t e0, e1, ev;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  auto launchAll = [&]() {
    for (int r = 0; r < 2; r++) ngDevKernel_Generic<<<C, nThreads, 0, W.ranks[r].stream>>>(args[r]);
  };
  for (int i = 0; i < 3; i++) launchAll();
  CK(cudaDeviceSynchronize());
  CK(cudaEventRecord(e0, W.ranks[0].stream));
  CK(cudaStreamWaitEvent(W.ranks[1].stream, e0, 0));
  for (int i = 0; i < iters; i++) launchAll();
  CK(cudaEventRecord(ev, W.ranks[1].stream));
  CK(cudaStreamWaitEvent(W.ranks[0].stream, ev, 0));
  CK(cudaEventRecord(e1, W.ranks[0].stream));
  CK(cudaEventSynchronize(e1));
  CK(cudaGetLastError());
  float ms;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  double us = ms * 1000.0 / iters;
  double algbw = bytes / (us * 1e-6) / 1e9;
  uint32_t err = *(volatile uint32_t*)W.ranks[0].hError | *(volatile uint32_t*)W.ranks[1].hError;
  printf("BW %s 2 ranks %zu B channels=%d threads=%d: %.1f us  algbw %.1f GB/s  busbw %.1f GB/s  err=%u\n", fname,
         bytes, C, nThreads, us, algbw, algbw, err);
  W.destroy();
}

// Runs the correctness suite on one world; after a failure that may have left
// the connections in an unknown state (timeout, device error) it rebuilds the
// world and goes on.
static bool suite(World& W, bool quick) {
  const int N = W.N;
  std::vector<size_t> sizes = {0, 1, 7, 1023, (1u << 20) + 3};
  for (int proto = 2; proto >= 0; proto--) {
    const std::string P = protoName(proto);
    for (size_t n : sizes) {
      if (!testReduce<float>(W, CAllReduce, OpSum, "AllReduce_Sum_f32_RING_" + P, n, false, 0, 512)) W.reset();
      if (!testReduce<float>(W, CAllReduce, OpSum, "AllReduce_Sum_f32_RING_" + P, n, true, 1, 256)) W.reset();
      if (!testReduce<float>(W, CAllReduce, OpSum, "AllReduce_Sum_f32_TREE_" + P, n, false, 1, 512)) W.reset();
      if (!testAllGather(W, proto, n, false, 2, 512)) W.reset();
      if (!testAllGather(W, proto, n, true, 0, 640)) W.reset();
      if (!testReduce<float>(W, CReduceScatter, OpSum, "ReduceScatter_Sum_f32_RING_" + P, n, false, 1, 512)) W.reset();
      if (!testReduce<float>(W, CReduceScatter, OpSum, "ReduceScatter_Sum_f32_RING_" + P, n, true, 0, 512)) W.reset();
      if (!testBroadcast(W, proto, n, N - 1, 2, 512)) W.reset();
      if (!testReduce<float>(W, CReduce, OpSum, "Reduce_Sum_f32_RING_" + P, n, false, 0, 512, 0.5, N / 2)) W.reset();
      if (quick && n > 1023) break;
    }
    const size_t n = 65537;
    if (!testReduce<uint32_t>(W, CAllReduce, OpSum, "AllReduce_Sum_u32_RING_" + P, n, false, 0, 512)) W.reset();
    if (!testReduce<int32_t>(W, CAllReduce, OpMin, "AllReduce_MinMax_u32_RING_" + P, n, false, 0, 512)) W.reset();
    if (!testReduce<int32_t>(W, CAllReduce, OpMax, "AllReduce_MinMax_u32_TREE_" + P, n, false, 0, 512)) W.reset();
    if (!testReduce<half>(W, CAllReduce, OpPreMul, "AllReduce_PreMulSum_f16_RING_" + P, n, false, 1, 512)) W.reset();
    if (!testReduce<uint32_t>(W, CAllReduce, OpPostDiv, "AllReduce_SumPostDiv_u32_RING_" + P, n, false, 0, 512)) W.reset();
    if (!testReduce<__nv_bfloat16>(W, CAllReduce, OpProd, "AllReduce_Prod_bf16_RING_" + P, n, false, 1, 512)) W.reset();
    if (!testReduce<__nv_fp8_e4m3>(W, CAllReduce, OpSum, "AllReduce_Sum_f8e4m3_RING_" + P, n, false, 3, 512)) W.reset();
    if (!testReduce<__nv_fp8_e4m3>(W, CAllReduce, OpSum, "AllReduce_Sum_f8e4m3_TREE_" + P, n, false, 0, 512)) W.reset();
  }
  if (N > 1) {
    for (size_t b : {(size_t)0, (size_t)1, (size_t)1023, (size_t)(1 << 20) + 3, (size_t)5 << 20})
      for (int d = 1; d < N && d <= 2; d++)
        if (!testSendRecv(W, b, d, 512)) W.reset();
    if (!testSendRecv(W, 100000, 1, 64)) W.reset();
  }
  return true;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: harness device_table.cu [--quick] [--bw-only]\n");
    return 2;
  }
  setvbuf(stdout, nullptr, _IOLBF, 0);
  loadFuncIds(argv[1]);
  bool quick = false, bwOnly = false;
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) quick = true;
    if (!strcmp(argv[i], "--bw-only")) bwOnly = true;
  }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("device: %s sm_%d%d, %d SMs\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount);
  auto tStart = std::chrono::steady_clock::now();

  // Bandwidth first: AllReduce f32, 2 ranks, 512 MiB, SIMPLE.
  for (int C : {8, 16, 32}) bandwidth(C, 512, 512u << 20, "AllReduce_Sum_f32_RING_SIMPLE", 10);
  if (!bwOnly) {
    std::vector<int> rankCounts = {1, 2, 3, 4, 8};
    for (int N : rankCounts) {
      World W;
      W.init(N, 2);
      printf("== %d ranks\n", N);
      suite(W, quick);
      W.destroy();
      printf("   %d passed, %d failed so far (%.1f s)\n", gPass, gFail,
             std::chrono::duration<double>(std::chrono::steady_clock::now() - tStart).count());
      fflush(stdout);
    }
  }
  bandwidth(16, 640, 512u << 20, "AllReduce_Sum_f32_RING_SIMPLE", 10);
  bandwidth(2, 512, 8, "AllReduce_Sum_f32_RING_LL", 200);
  bandwidth(16, 512, 512u << 20, "AllReduce_Sum_f32_RING_LL128", 5);
  printf("RESULT: %d passed, %d failed\n", gPass, gFail);
  return gFail ? 1 : 0;
}
