// kill.cu: does SIGKILL of one MPS client fault another client's context?
//
// Two roles, each a process on GPU 0 under MPS:
//   kill spin SECS   the victim: one kernel that spins on a host-mapped
//                    flag nobody sets (a collective waiting on a peer)
//   kill tick SECS   the victim or the survivor: short kernels back to back,
//                    each synchronized, for SECS seconds
//   kill spinshm FILE SECS
//                    the victim: spins as spin does, on the first word of
//                    FILE (shared memory, registered with cudaHostRegister),
//                    which another process can set after the victim died
// run.sh starts a survivor (tick), then a victim, SIGKILLs the victim
// (after spinshm's, sets its flag from outside) and reports whether the
// survivor saw an error. Hand-written for ncclgo's
// notes on the kill test under MPS; it uses nothing of ncclgo.
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <cuda_runtime.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

__global__ void spin(volatile int *flag) {
  while (*flag == 0) {
  }
}

__global__ void tick(int *p) { p[threadIdx.x] += 1; }

static double now() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  if (argc == 4 && argv[1][0] == 's') {  // spinshm FILE SECS
    int fd = open(argv[2], O_RDWR | O_CREAT, 0600);
    if (fd < 0 || ftruncate(fd, 4096) != 0) {
      perror(argv[2]);
      return 1;
    }
    void *page = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (page == MAP_FAILED) {
      perror("mmap");
      return 1;
    }
    volatile int *flag = (volatile int *)page;
    *flag = 0;
    cudaError_t e = cudaHostRegister(page, 4096, cudaHostRegisterMapped | cudaHostRegisterPortable);
    if (e != cudaSuccess) {
      printf("spinshm: cudaHostRegister: %s\n", cudaGetErrorString(e));
      return 1;
    }
    int *dflag;
    cudaHostGetDevicePointer(&dflag, page, 0);
    spin<<<1, 1>>>(dflag);
    printf("SPINNING %s\n", cudaGetErrorString(cudaGetLastError()));
    fflush(stdout);
    sleep(atoi(argv[3]));
    *flag = 1;
    e = cudaDeviceSynchronize();
    printf("SPIN DONE %s\n", cudaGetErrorString(e));
    return e != cudaSuccess;
  }
  if (argc != 3) {
    fprintf(stderr, "usage: kill spin|tick SECS | kill spinshm FILE SECS\n");
    return 2;
  }
  double secs = atof(argv[2]);
  cudaError_t e;
  if (argv[1][0] == 's') {
    int *flag;
    if ((e = cudaHostAlloc(&flag, sizeof(int), cudaHostAllocMapped)) != cudaSuccess) {
      printf("spin: cudaHostAlloc: %s\n", cudaGetErrorString(e));
      return 1;
    }
    *flag = 0;
    int *dflag;
    cudaHostGetDevicePointer(&dflag, flag, 0);
    spin<<<1, 1>>>(dflag);
    printf("SPINNING %s\n", cudaGetErrorString(cudaGetLastError()));
    fflush(stdout);
    double end = now() + secs;
    while (now() < end) {
    }
    *flag = 1;
    e = cudaDeviceSynchronize();
    printf("SPIN DONE %s\n", cudaGetErrorString(e));
    return e != cudaSuccess;
  }
  int *p;
  if ((e = cudaMalloc(&p, 32 * sizeof(int))) != cudaSuccess) {
    printf("tick: cudaMalloc: %s\n", cudaGetErrorString(e));
    return 1;
  }
  double start = now(), end = start + secs;
  long n = 0;
  printf("TICKING\n");
  fflush(stdout);
  while (now() < end) {
    tick<<<1, 32>>>(p);
    if ((e = cudaDeviceSynchronize()) != cudaSuccess) {
      printf("TICK FAILED after %ld kernels, %.3f s: %s\n", n, now() - start, cudaGetErrorString(e));
      return 1;
    }
    n++;
  }
  e = cudaFree(p);
  printf("TICK OK %ld kernels in %.1f s, free: %s\n", n, secs, cudaGetErrorString(e));
  return e != cudaSuccess;
}
