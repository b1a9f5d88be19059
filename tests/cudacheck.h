// cudacheck.h: the error checks of the tests' standalone CUDA programs
// (tests/flaglat, tests/gxlat). A failed call prints where it was, what
// it was and the driver's words for the failure, and exits 1. CHECK takes
// a CUDA runtime call; CHECKD, defined where cuda.h came first, a driver
// API call.
#ifndef NCCLGO_TESTS_CUDACHECK_H_
#define NCCLGO_TESTS_CUDACHECK_H_

#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CHECK(x)                                                                      \
  do {                                                                                \
    cudaError_t e_ = (x);                                                             \
    if (e_ != cudaSuccess) {                                                          \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                        \
    }                                                                                 \
  } while (0)

#ifdef __cuda_cuda_h__
#define CHECKD(x)                                                    \
  do {                                                               \
    CUresult r_ = (x);                                               \
    if (r_ != CUDA_SUCCESS) {                                        \
      const char* s_ = "?";                                          \
      cuGetErrorString(r_, &s_);                                     \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, s_); \
      exit(1);                                                       \
    }                                                                \
  } while (0)
#endif

#endif // NCCLGO_TESTS_CUDACHECK_H_
