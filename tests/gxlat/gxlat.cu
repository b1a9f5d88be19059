// gxlat: what a captured loop of two ranks' 8-byte exchanges costs per
// step on one GPU, by how the two ranks' graphs are built. It stands apart
// from the device library: issue 26's "graph per rank" case (nccl-tests
// -g 2 in one process, each rank's stream captured into its own graph)
// costs 2.2-3.6 us per collective, while one graph holding one kernel for
// both ranks (ncclperf -graph-one) costs 1.0 us. This measures the floor
// of each shape with kernels that do nothing but the handshake:
//
//   one       one graph, one kernel per step (the floor: one rank, or
//             both ranks merged into one kernel)
//   pair      a graph per rank, each step a kernel per rank that stores
//             its step and polls the peer's (today's shape)
//   pair4k    pair with 4 KiB of kernel parameters (ncclgo's kernels take
//             struct ngKernelArgs, 4096 bytes, of which a small call fills
//             256)
//   pairside  pair with an external event record node beside each kernel,
//             each record chained after the one before (what ncclgo's
//             capture adds per collective: cuda.Event.RecordBeside)
//   pairboth  both
//   lead      a graph per rank; the leader's graph runs one kernel per
//             step, which waits for the follower's arrival, then marks
//             the step done; the follower's graph holds no kernel, only
//             stream memory operations: store "arrived", wait for
//             "done", clear "done" (a binary semaphore, so replays
//             repeat it unchanged)
//
// each with and without programmatic dependent launch (PDL). Usage:
// gxlat [steps per graph] [replays]; build and run: bash tests/gxlat/run.sh.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cuda.h>
#include <cuda_runtime.h>

#include "../cudacheck.h"

__device__ __forceinline__ uint32_t ldv(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void stv(uint32_t* p, uint32_t v) {
  asm volatile("st.volatile.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void pdlWait(bool pdl) {
  if (pdl) asm volatile("griddepcontrol.wait;" ::: "memory");
}
__device__ __forceinline__ void pdlLaunch(bool pdl) {
  if (pdl) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

// A step of "one": a store, as a merged kernel's smallest work.
__global__ void stepOne(uint32_t* cnt, int pdl) {
  pdlWait(pdl);
  if (threadIdx.x == 0) stv(cnt, ldv(cnt) + 1);
  pdlLaunch(pdl);
}

// A step of "pair": rank me counts its steps in cnt[me] (only it writes
// it, so replays keep counting up), publishes the count in flag[me] and
// waits for the peer's flag to reach it.
__global__ void stepPair(uint32_t* cnt, uint32_t* flag, int me, int pdl) {
  pdlWait(pdl);
  if (threadIdx.x == 0) {
    uint32_t seq = cnt[me] + 1;
    cnt[me] = seq;
    stv(&flag[me], seq);
    while ((int32_t)(ldv(&flag[me ^ 1]) - seq) < 0) {
    }
  }
  pdlLaunch(pdl);
}

// pair's step with its arguments in a 4 KiB parameter block.
struct BigArgs {
  uint32_t* cnt;
  uint32_t* flag;
  int me;
  int pdl;
  char pad[4096 - 24];
};
__global__ void stepPair4k(__grid_constant__ const BigArgs a) {
  pdlWait(a.pdl);
  if (threadIdx.x == 0) {
    uint32_t seq = a.cnt[a.me] + 1;
    a.cnt[a.me] = seq;
    stv(&a.flag[a.me], seq);
    while ((int32_t)(ldv(&a.flag[a.me ^ 1]) - seq) < 0) {
    }
  }
  pdlLaunch(a.pdl);
}

// A step of "lead": wait for the follower's arrival, take it, mark done.
__global__ void stepLead(uint32_t* arrive, uint32_t* done, int pdl) {
  pdlWait(pdl);
  if (threadIdx.x == 0) {
    while (ldv(arrive) != 1) {
    }
    stv(arrive, 0);
    __threadfence_system();
    stv(done, 1);
  }
  pdlLaunch(pdl);
}

static void launch(cudaStream_t s, const void* fn, void** args, bool pdl) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(1);
  cfg.blockDim = dim3(64);
  cfg.stream = s;
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = at;
  cfg.numAttrs = pdl ? 1 : 0;
  CHECK(cudaLaunchKernelExC(&cfg, fn, args));
}

int main(int argc, char** argv) {
  int steps = argc > 1 ? atoi(argv[1]) : 100;
  int replays = argc > 2 ? atoi(argv[2]) : 200;
  CHECK(cudaSetDevice(0));
  uint32_t* mem;
  CHECK(cudaMalloc(&mem, 4096));
  CHECK(cudaMemset(mem, 0, 4096));
  uint32_t* cnt = mem;          // [2]
  uint32_t* flag = mem + 32;    // [2], its own line
  uint32_t* arrive = mem + 64;  // own line
  uint32_t* done = mem + 96;    // own line
  cudaStream_t s[2];
  for (auto& x : s) CHECK(cudaStreamCreateWithFlags(&x, cudaStreamNonBlocking));

  cudaEvent_t ev[2];
  for (auto& e : ev) CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  static BigArgs big;
  const char* shapes[] = {"one", "pair", "pair4k", "pairside", "pairboth", "lead"};
  for (int shape = 0; shape < 6; shape++) {
    for (int pdl = 0; pdl < 2; pdl++) {
      CHECK(cudaMemset(mem, 0, 4096));
      CHECK(cudaDeviceSynchronize());
      cudaGraphExec_t ex[2] = {nullptr, nullptr};
      int ng = shape == 0 ? 1 : 2;
      const bool side = shape == 3 || shape == 4, params4k = shape == 2 || shape == 4;
      for (int r = 0; r < ng; r++) {
        CHECK(cudaStreamBeginCapture(s[r], cudaStreamCaptureModeThreadLocal));
        cudaGraphNode_t prevRec = nullptr;
        for (int i = 0; i < steps; i++) {
          int me = r;
          if (shape == 0) {
            void* a[] = {&cnt, &pdl};
            launch(s[r], (const void*)stepOne, a, pdl);
          } else if (shape >= 1 && shape <= 4) {
            if (params4k) {
              big.cnt = cnt, big.flag = flag, big.me = me, big.pdl = pdl;
              void* a[] = {&big};
              launch(s[r], (const void*)stepPair4k, a, pdl);
            } else {
              void* a[] = {&cnt, &flag, &me, &pdl};
              launch(s[r], (const void*)stepPair, a, pdl);
            }
            if (side) {
              cudaStreamCaptureStatus st;
              unsigned long long id;
              cudaGraph_t g;
              const cudaGraphNode_t* deps;
              const cudaGraphEdgeData* ed;
              size_t nd;
              CHECK(cudaStreamGetCaptureInfo(s[r], &st, &id, &g, &deps, &ed, &nd));
              cudaGraphNode_t d[2] = {deps[0], prevRec};
              CHECK(cudaGraphAddEventRecordNode(&prevRec, g, d, prevRec ? 2 : 1, ev[r]));
            }
          } else if (r == 0) {
            void* a[] = {&arrive, &done, &pdl};
            launch(s[r], (const void*)stepLead, a, pdl);
          } else {
            CUstream cs = (CUstream)s[r];
            CHECKD(cuStreamWriteValue32(cs, (CUdeviceptr)arrive, 1, CU_STREAM_WRITE_VALUE_DEFAULT));
            CHECKD(cuStreamWaitValue32(cs, (CUdeviceptr)done, 1, CU_STREAM_WAIT_VALUE_EQ));
            CHECKD(cuStreamWriteValue32(cs, (CUdeviceptr)done, 0, CU_STREAM_WRITE_VALUE_DEFAULT));
          }
        }
        cudaGraph_t g;
        CHECK(cudaStreamEndCapture(s[r], &g));
        CHECK(cudaGraphInstantiate(&ex[r], g, 0));
        CHECK(cudaGraphDestroy(g));
      }
      for (int w = 0; w < 5; w++)
        for (int r = 0; r < ng; r++) CHECK(cudaGraphLaunch(ex[r], s[r]));
      CHECK(cudaDeviceSynchronize());
      printf("%-8s pdl=%d  us per step:", shapes[shape], pdl);
      for (int round = 0; round < 5; round++) {
        auto t0 = std::chrono::steady_clock::now();
        for (int k = 0; k < replays; k++)
          for (int r = 0; r < ng; r++) CHECK(cudaGraphLaunch(ex[r], s[r]));
        CHECK(cudaDeviceSynchronize());
        double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
        printf(" %.3f", us / (double)replays / steps);
      }
      uint32_t h[128];
      CHECK(cudaMemcpy(h, mem, sizeof h, cudaMemcpyDeviceToHost));
      printf("   (cnt %u %u, arrive %u, done %u)\n", h[0], h[1], h[64], h[96]);
      for (int r = 0; r < ng; r++) CHECK(cudaGraphExecDestroy(ex[r]));
    }
  }
  return 0;
}
