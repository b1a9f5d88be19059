// flaglat: how long a flag one SM stores takes to reach a poller on another
// SM of the same GPU, by load/store flavour and by SM pair. It stands apart
// from the device library: DIRECT's LL one-shot spends most of an 8-byte
// AllReduce waiting for a peer's line (docs/notes/20261203-session24.md),
// and this measures the floor under that wait.
//
// Two blocks, placed on chosen SMs (every SM gets one block: each block
// asks for most of an SM's shared memory; blocks on other SMs exit), play
// ping-pong on two words: the pinger stores i, waits for the ponger's i;
// the ponger waits for i, stores i. Half a round trip is one store's
// visibility plus the poll that sees it.
//
// Usage: flaglat [iterations] [pairs...] where a pair is A:B (SM ids);
// default 20000 iterations over a spread of pairs. First comes one SM's
// load latency, then the first pair's volatile ping-pong with the words
// moved through 64 KiB (does the address, hence the L2 slice, matter?),
// then every pair by flavour and word spacing. Build and run:
// bash tests/flaglat/run.sh.
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <vector>
#include <cuda_runtime.h>

#include "../cudacheck.h"

enum Flavour { kVolatile, kRelaxedGpu, kAcqRelGpu, kRelaxedSys, kVolatileStagger2, kVolatileStagger4, kNumFlavours };
static const char* kNames[kNumFlavours] = {"volatile", "relaxed.gpu", "acquire/release.gpu", "relaxed.sys",
                                            "volatile, 2 polls in flight", "volatile, 4 polls in flight"};

__device__ __forceinline__ uint32_t smid() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(r));
  return r;
}

template <int F>
__device__ __forceinline__ uint32_t ld(const uint32_t* p) {
  uint32_t v;
  if (F == kRelaxedGpu) asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  else if (F == kAcqRelGpu) asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  else if (F == kRelaxedSys) asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  else asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

template <int F>
__device__ __forceinline__ void st(uint32_t* p, uint32_t v) {
  if (F == kRelaxedGpu) asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
  else if (F == kAcqRelGpu) asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
  else if (F == kRelaxedSys) asm volatile("st.relaxed.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
  else asm volatile("st.volatile.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ void spin(long long cycles) {
  const long long t = clock64();
  while (clock64() - t < cycles) {
  }
}

// waitFor polls p until it holds v. The stagger flavours keep K loads in
// flight, issued gap cycles apart, so that a store is seen within about
// a round trip / K of reaching memory instead of within a whole one.
template <int F>
__device__ __forceinline__ void waitFor(const uint32_t* p, uint32_t v, long long gap) {
  if (F == kVolatileStagger2 || F == kVolatileStagger4) {
    constexpr int K = F == kVolatileStagger2 ? 2 : 4;
    uint32_t r[K];
#pragma unroll
    for (int k = 0; k < K; k++) {
      r[k] = ld<kVolatile>(p);
      if (k + 1 < K) spin(gap);
    }
    for (;;) {
#pragma unroll
      for (int k = 0; k < K; k++) {
        if (r[k] == v) return;
        r[k] = ld<kVolatile>(p);
      }
    }
  } else {
    while (ld<F>(p) != v) {
    }
  }
}

// waitBounded polls p for v for at most budget cycles: the handshake,
// where the other block may not exist (an SM id that no SM has).
__device__ __forceinline__ bool waitBounded(const uint32_t* p, uint32_t v, long long budget) {
  const long long t = clock64();
  while (ld<kVolatile>(p) != v) {
    if (clock64() - t > budget) return false;
  }
  return true;
}

// The handshake's budget: about a second at 2 GHz.
#define FLAGLAT_HANDSHAKE_CYCLES 2000000000ll

struct Result {
  long long cycles;
  unsigned long long ns;
  uint32_t smA, smB;
};

template <int F>
__global__ void pingpong(uint32_t* words, int stride, int iters, uint32_t smA, uint32_t smB, long long gap, Result* out) {
  extern __shared__ char hog[];  // one block per SM
  (void)hog;
  const uint32_t me = smid();
  if (threadIdx.x != 0 || (me != smA && me != smB)) return;
  uint32_t* a = words;           // the pinger's word
  uint32_t* b = words + stride;  // the ponger's word
  if (me == smA) {
    if (!waitBounded(b, 0xFFFFFFFFu, FLAGLAT_HANDSHAKE_CYCLES)) return;  // no ponger: no result
    unsigned long long g0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g0));
    const long long t0 = clock64();
    for (int i = 1; i <= iters; i++) {
      st<F>(a, (uint32_t)i);
      waitFor<F>(b, (uint32_t)i, gap);
    }
    const long long t1 = clock64();
    unsigned long long g1;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g1));
    out->cycles = t1 - t0;
    out->ns = g1 - g0;
    out->smA = smA;
    out->smB = smB;
  } else {
    st<kVolatile>(b, 0xFFFFFFFFu);
    if (!waitBounded(a, 1u, FLAGLAT_HANDSHAKE_CYCLES)) return;  // no pinger
    for (int i = 1; i <= iters; i++) {
      waitFor<F>(a, (uint32_t)i, gap);
      st<F>(b, (uint32_t)i);
    }
  }
}

// chase: one SM's dependent loads of one word (its L2 round trip).
__global__ void chase(const uint32_t* words, int iters, Result* out) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  uint32_t off = 0;
  const long long t0 = clock64();
  for (int i = 0; i < iters; i++) off = ld<kVolatile>(words + off);  // the words are 0: each load needs the last
  const long long t1 = clock64();
  out->cycles = (t1 - t0) + off;
  out->smA = out->smB = smid();
}

typedef void (*Kernel)(uint32_t*, int, int, uint32_t, uint32_t, long long, Result*);

int main(int argc, char** argv) {
  const int iters = argc > 1 ? atoi(argv[1]) : 20000;
  int nsm = 0, smem = 0;
  CHECK(cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, 0));
  CHECK(cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
  std::vector<std::pair<int, int>> pairs;
  for (int i = 2; i < argc; i++) {
    int x, y;
    if (sscanf(argv[i], "%d:%d", &x, &y) == 2 && x >= 0 && y >= 0 && x < nsm && y < nsm && x != y) pairs.push_back({x, y});
    else fprintf(stderr, "flaglat: pair %s: want A:B, two different SM ids below %d\n", argv[i], nsm);
  }
  if (pairs.empty()) pairs = {{0, 1}, {0, 2}, {0, 16}, {0, nsm / 2}, {0, nsm - 1}, {124, 128}, {124, 126}, {nsm / 2, nsm / 2 + 1}};
  uint32_t* words;
  Result* out;
  CHECK(cudaMalloc(&words, 1 << 20));
  CHECK(cudaMallocManaged(&out, sizeof(Result)));
  const Kernel kernels[kNumFlavours] = {pingpong<kVolatile>, pingpong<kRelaxedGpu>, pingpong<kAcqRelGpu>,
                                        pingpong<kRelaxedSys>, pingpong<kVolatileStagger2>, pingpong<kVolatileStagger4>};
  for (int f = 0; f < kNumFlavours; f++)
    CHECK(cudaFuncSetAttribute(kernels[f], cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  int clockKHz = 0;
  CHECK(cudaDeviceGetAttribute(&clockKHz, cudaDevAttrClockRate, 0));
  printf("flaglat: %d SMs at %d MHz, %d iterations; half a round trip in SM cycles (and ns from %%globaltimer)\n", nsm,
         clockKHz / 1000, iters);

  CHECK(cudaMemset(words, 0, 1 << 20));
  chase<<<1, 32>>>(words, iters, out);
  CHECK(cudaDeviceSynchronize());
  printf("one SM's dependent volatile load (L2 round trip), SM %u: %.0f cycles\n", out->smA, (double)out->cycles / iters);

  // Address sweep (volatile, the first pair): the L2 slice a word lands
  // in follows its address, and a slice in the far half of the L2 costs
  // more; two words 128 bytes apart, moved through 64 KiB in 4 KiB steps.
  {
    const auto [x, y] = pairs[0];
    printf("address sweep, SMs %d:%d, volatile:", x, y);
    for (int base = 0; base < 16 * 1024; base += 1024) {  // in words: 4 KiB steps
      CHECK(cudaMemset(words, 0, 1 << 20));
      out->cycles = -1;
      kernels[kVolatile]<<<nsm, 32, smem>>>(words + base, 32, iters, (uint32_t)x, (uint32_t)y, 0, out);
      CHECK(cudaDeviceSynchronize());
      printf(" %.0f", out->cycles < 0 ? -1.0 : (double)out->cycles / iters / 2);
    }
    printf(" cycles\n");
  }

  for (auto [x, y] : pairs) {
    for (int stride : {1, 32, 4096}) {  // same 128-byte line, next line, 16 KiB apart
      for (int f = 0; f < kNumFlavours; f++) {
        const long long gap = f == kVolatileStagger2 ? 350 : f == kVolatileStagger4 ? 175 : 0;
        CHECK(cudaMemset(words, 0, 1 << 20));
        out->cycles = -1;
        kernels[f]<<<nsm, 32, smem>>>(words, stride, iters, (uint32_t)x, (uint32_t)y, gap, out);
        CHECK(cudaDeviceSynchronize());
        if (out->cycles < 0) {
          printf("SMs %3d:%-3d words %5d B apart  %-28s  no result (an SM got no block)\n", x, y, stride * 4, kNames[f]);
          continue;
        }
        printf("SMs %3d:%-3d words %5d B apart  %-28s  %6.0f cycles  %6.0f ns\n", x, y, stride * 4, kNames[f],
               (double)out->cycles / iters / 2, (double)out->ns / iters / 2);
      }
    }
  }
  return 0;
}
