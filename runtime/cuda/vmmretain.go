package cuda

/*
#include <stdlib.h>
#include "shim.h"
int ncu_retain_load(const char* path, char* err, size_t errlen);
CUresult ncu_mem_retain(CUcontext c, CUmemGenericAllocationHandle* h, CUdeviceptr p);
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"
)

var (
	retainOnce sync.Once
	retainErr  error
)

// loadRetain resolves vmmretain.c's entry points, once, after Init.
func loadRetain() error {
	retainOnce.Do(func() {
		lib := libraryPath()
		clib := C.CString(lib)
		defer C.free(unsafe.Pointer(clib))
		var buf [512]C.char
		if C.ncu_retain_load(clib, &buf[0], C.size_t(len(buf))) != 0 {
			retainErr = fmt.Errorf("%w: %s: %s", ErrNoDriver, lib, C.GoString(&buf[0]))
		}
	})
	return retainErr
}

// MemRetainAllocationHandle returns the VMM allocation (from MemCreate,
// here or imported) mapped at p, which may lie anywhere in the mapping
// (cuMemRetainAllocationHandle). It takes a reference: release it with
// MemRelease. Memory that is not VMM (MemAlloc's) fails, with
// CUDA_ERROR_INVALID_VALUE, and so does any call on a driver without the
// entry point (ErrNotSupported).
func (c *Context) MemRetainAllocationHandle(p DevicePtr) (MemHandle, error) {
	h, err := c.ctx("MemRetainAllocationHandle")
	if err != nil {
		return 0, err
	}
	if err := loadRetain(); err != nil {
		return 0, err
	}
	if p == 0 {
		return 0, badArg("MemRetainAllocationHandle", "null device pointer")
	}
	var mh C.CUmemGenericAllocationHandle
	if err := check("cuMemRetainAllocationHandle", Result(C.ncu_mem_retain(h, &mh, C.CUdeviceptr(p)))); err != nil {
		return 0, c.wrap(fmt.Sprintf("MemRetainAllocationHandle(%#x)", uint64(p)), err)
	}
	return MemHandle(mh), nil
}
