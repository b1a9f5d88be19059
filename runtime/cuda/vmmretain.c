// Entry points resolved apart from shim.c's table: the VMM calls that
// windows need (vmmretain.go). The library is the one ncu_load opened
// (dlopen returns the same handle again), so these resolve in the same
// driver.
#include <dlfcn.h>
#include <stdio.h>

#include "shim.h"

static CUresult (*r_cuCtxGetCurrent)(CUcontext* c);
static CUresult (*r_cuCtxSetCurrent)(CUcontext c);
static CUresult (*r_cuMemRetainAllocationHandle)(CUmemGenericAllocationHandle* h, void* addr);

// ncu_retain_load resolves the entry points in the library at path; 0 on
// success, otherwise 1 with a message in err. cuMemRetainAllocationHandle
// may be missing (a driver before CUDA 11): the call then reports
// NCU_ERROR_NOT_SUPPORTED.
int ncu_retain_load(const char* path, char* err, size_t errlen) {
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    const char* e = dlerror();
    snprintf(err, errlen, "%s", e ? e : "dlopen failed");
    return 1;
  }
  r_cuCtxGetCurrent = (CUresult(*)(CUcontext*))dlsym(lib, "cuCtxGetCurrent");
  r_cuCtxSetCurrent = (CUresult(*)(CUcontext))dlsym(lib, "cuCtxSetCurrent");
  r_cuMemRetainAllocationHandle =
      (CUresult(*)(CUmemGenericAllocationHandle*, void*))dlsym(lib, "cuMemRetainAllocationHandle");
  if (r_cuCtxGetCurrent == NULL || r_cuCtxSetCurrent == NULL) {
    snprintf(err, errlen, "%s lacks cuCtxGetCurrent or cuCtxSetCurrent", path);
    return 1;
  }
  return 0;
}

// ncu_mem_retain returns the VMM allocation mapped at p, with c current.
CUresult ncu_mem_retain(CUcontext c, CUmemGenericAllocationHandle* h, CUdeviceptr p) {
  if (r_cuMemRetainAllocationHandle == NULL) return NCU_ERROR_NOT_SUPPORTED;
  CUcontext cur = NULL;
  if (r_cuCtxGetCurrent(&cur) != NCU_SUCCESS || cur != c) {
    CUresult r = r_cuCtxSetCurrent(c);
    ncu_scope_switched(c, r);
    if (r != NCU_SUCCESS) return r;
  }
  return r_cuMemRetainAllocationHandle(h, (void*)(uintptr_t)p);
}
