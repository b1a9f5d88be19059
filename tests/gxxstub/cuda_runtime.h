#pragma once
// Stub of CUDA for tests/gxxcheck.sh: just enough declarations for g++
// -fsyntax-only to parse and instantiate the device library. Not CUDA.
#include <stdio.h>  // device printf: cuda_runtime.h declares it too
#include <string.h>
#include <stdint.h>
#define CUDART_VERSION 12040
#define __device__
#define __host__
#define __global__
#define __shared__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __noinline__
#define __grid_constant__
struct dim3s { unsigned x, y, z; };
extern dim3s threadIdx, blockIdx, blockDim, gridDim;
struct uint4 { unsigned x, y, z, w; };
struct uint2 { unsigned x, y; };
struct int4 { int x, y, z, w; };
void __threadfence(); void __threadfence_system(); void __threadfence_block(); void __syncthreads(); void __syncwarp(unsigned m = 0xffffffffu); void __nanosleep(unsigned);
unsigned atomicCAS(unsigned*, unsigned, unsigned); unsigned long long atomicCAS(unsigned long long*, unsigned long long, unsigned long long);
unsigned atomicAdd(unsigned*, unsigned); unsigned long long atomicAdd(unsigned long long*, unsigned long long);
unsigned atomicOr(unsigned*, unsigned); unsigned atomicExch(unsigned*, unsigned);
int __shfl_sync(unsigned, int, int, int w = 32); bool __all_sync(unsigned, int); bool __any_sync(unsigned, int); unsigned __ballot_sync(unsigned, int);
float __fmul_rn(float, float); double __dmul_rn(double, double);
long long clock64(); unsigned long long __globaltimer();
int __popc(unsigned); int __popcll(unsigned long long); int __ffs(int);
int __ffsll(long long); unsigned long long __ldcg(const unsigned long long*);
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return uint4{a, b, c, d}; }
int __clz(int);
