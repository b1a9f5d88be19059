package cuda

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"
)

// LibraryEnv names the environment variable that, when set, replaces
// "libcuda.so.1" as the file Init loads.
const LibraryEnv = "NCCLGO_CUDA_DRIVER_LIBRARY"

var (
	initOnce sync.Once
	initErr  error
	loaded   atomic.Bool // the library is open and its symbols resolved
)

// Init loads the CUDA driver library, resolves the entry points this
// package uses (the versioned ones, such as cuMemAlloc_v2, by their
// versioned names) and calls cuInit(0). It runs once per process; later
// calls return the first result. Every other function calls it, so calling
// it explicitly is only needed to learn early whether CUDA is usable.
// Failures wrap ErrNoDriver.
func Init() error {
	initOnce.Do(func() { initErr = doInit() })
	return initErr
}

// libraryPath is the driver library Init loads.
func libraryPath() string {
	if lib := os.Getenv(LibraryEnv); lib != "" {
		return lib
	}
	return "libcuda.so.1"
}

func doInit() error {
	lib := libraryPath()
	clib := C.CString(lib)
	defer C.free(unsafe.Pointer(clib))
	var buf [512]C.char
	switch C.ncu_load(clib, &buf[0], C.size_t(len(buf))) {
	case 0:
	case 1:
		return fmt.Errorf("%w: dlopen %s: %s", ErrNoDriver, lib, C.GoString(&buf[0]))
	default:
		return fmt.Errorf("%w: %s", ErrNoDriver, C.GoString(&buf[0]))
	}
	loaded.Store(true)
	// ncclgo's kernels spin-wait on each other, so each must be on the
	// device before any of them runs: lazy loading (CUDA's default) loads a
	// kernel at its first launch and may wait for the device to drain
	// first, which deadlocks against a peer kernel that waits for it. The
	// driver reads the setting at cuInit; a host that initialized CUDA
	// already is covered by the kernel loader, which loads every kernel
	// explicitly (Function.Load).
	if _, set := os.LookupEnv("CUDA_MODULE_LOADING"); !set {
		_ = os.Setenv("CUDA_MODULE_LOADING", "EAGER")
	}
	if err := check("cuInit", Result(C.ncu_init())); err != nil {
		return fmt.Errorf("%w: %w", ErrNoDriver, err)
	}
	mode, err := copyAPIFromEnv(os.LookupEnv)
	if err != nil {
		return err
	}
	setCopyMode(mode)
	return nil
}

// copyMode is how device-to-device copies are queued (CopyAPIEnv): the
// shim's NCU_COPY_* values.
type copyMode int

const (
	copyDtoD    copyMode = C.NCU_COPY_DTOD
	copyGeneric copyMode = C.NCU_COPY_GENERIC
	copyKernel  copyMode = C.NCU_COPY_KERNEL
	copyAuto    copyMode = C.NCU_COPY_AUTO
)

// copyKernelMax is the largest copy copyAuto makes with the copy kernel.
const copyKernelMax = C.NCU_COPY_KERNEL_MAX

// copyModeNow mirrors the shim's mode, for the copy paths' check that the
// context has its copy kernel (copykernel.go).
var copyModeNow atomic.Int32

// setCopyMode switches device-to-device copies to m; cuMemcpyAsync (and
// the kernel, which falls back to it) only where the driver has it.
func setCopyMode(m copyMode) {
	C.ncu_set_copy_mode(C.int(m))
	copyModeNow.Store(int32(C.ncu_get_copy_mode()))
}

// kernelCopy reports whether a copy of n bytes goes through the copy
// kernel in the current mode. The shim's ncu_dtod applies the same rule
// (it queues the copy; this only decides whether the context needs its
// kernel loaded first): both read NCU_COPY_KERNEL_MAX, and asking the
// shim instead would cost a cgo call per copy.
func kernelCopy(n uint64) bool {
	switch copyMode(copyModeNow.Load()) {
	case copyKernel:
		return true
	case copyAuto:
		return n <= copyKernelMax
	}
	return false
}

// copySymbol names the driver call device-to-device copies make now, for
// their errors.
func copySymbol() string {
	switch copyMode(C.ncu_get_copy_mode()) {
	case copyKernel, copyAuto:
		return "cuLaunchKernel(ngcopy) or cuMemcpyAsync"
	case copyGeneric:
		return "cuMemcpyAsync"
	}
	return "cuMemcpyDtoDAsync"
}

// CopyAPIEnv names the environment variable that picks the driver call
// behind device-to-device copies (Stream.MemcpyDtoDAsync,
// Ops.MemcpyDtoDAsync: a one-rank collective's copy): "auto" (the
// default: the copy kernel for copies of up to 8 MiB, cuMemcpyAsync for
// larger ones), "kernel" (always a launch of a copy kernel, loaded into
// each context at its first copy: copykernel.go), "generic"
// (cuMemcpyAsync, what cudaMemcpyAsync calls) or "dtod"
// (cuMemcpyDtoDAsync). All copy the same bytes; they differ in the host's
// cost per call: on an H200 an 8-byte copy cost 3.8 µs through the copy
// kernel, 4.5 through cuMemcpyAsync and 5.3 through cuMemcpyDtoDAsync
// (BenchmarkGPULaunch, session 11), and one rank's 8 B AllReduce through
// the C ABI in nccl-tests, three rounds each beside NCCL 2.28.9 (which
// calls cudaMemcpyAsync): 5.05/4.81/5.35 µs by default against
// 6.34/5.17/6.68, and 6.29/5.94/6.47 with "generic" against
// 6.66/6.73/6.81. Where the
// kernel cannot be loaded, "auto" copies through cuMemcpyAsync and
// "kernel" fails the copy. The 8 MiB bound is where the two met on the
// H200, one rank's AllReduce (ncclperf -g 1): 1 MiB 5.6–8.3 µs through
// the kernel against 8.8–9.2, 8 MiB 7.1–7.3 against 8.2–8.6, 64 MiB
// 36.7–37.3 against 35.3–35.4. A driver without cuMemcpyAsync gets
// cuMemcpyDtoDAsync.
const CopyAPIEnv = "NCCLGO_COPY_API"

// copyAPIFromEnv reads CopyAPIEnv.
func copyAPIFromEnv(lookup func(string) (string, bool)) (copyMode, error) {
	v, ok := lookup(CopyAPIEnv)
	switch {
	case !ok || v == "" || v == "auto":
		return copyAuto, nil
	case v == "generic":
		return copyGeneric, nil
	case v == "dtod":
		return copyDtoD, nil
	case v == "kernel":
		return copyKernel, nil
	}
	return 0, fmt.Errorf("cuda: %s=%q: want auto (the copy kernel up to 8 MiB, cuMemcpyAsync above; the default), kernel (always the copy kernel), generic (cuMemcpyAsync) or dtod (cuMemcpyDtoDAsync)", CopyAPIEnv, v)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// driverErrorText asks the loaded driver for a code's name and description.
func driverErrorText(r Result) (name, desc string, ok bool) {
	if !loaded.Load() {
		return "", "", false
	}
	var n, d *C.char
	if C.ncu_error_name(C.CUresult(r), &n) != 0 || n == nil {
		return "", "", false
	}
	if C.ncu_error_string(C.CUresult(r), &d) != 0 || d == nil {
		return C.GoString(n), "", true
	}
	return C.GoString(n), C.GoString(d), true
}

// DriverVersion returns the CUDA version the driver supports, encoded as
// 1000*major + 10*minor (12020 for CUDA 12.2).
func DriverVersion() (int, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	var v C.int
	if err := check("cuDriverGetVersion", Result(C.ncu_driver_version(&v))); err != nil {
		return 0, err
	}
	return int(v), nil
}
