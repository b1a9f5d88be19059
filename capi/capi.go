package main

/*
#cgo CFLAGS: -I${SRCDIR}/../generated/include -DNCCLGO_TYPES_ONLY
#include <stdlib.h>
#include <string.h>
#include "nccl.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"unsafe"

	"github.com/ncclgo/ncclgo"
	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/runtime/bootstrap"
	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/ncclgo/ncclgo/runtime/transport"
)

// result is ncclResult_t.
type result = C.ncclResult_t

// errNotImplemented marks what ncclgo does not do yet: ncclInvalidUsage.
var errNotImplemented = errors.New("not implemented by ncclgo yet")

// lastError is ncclGetLastError's buffer: C memory, so that the pointer
// handed out stays valid; like NCCL's, it is global and overwritten by the
// next failure.
var (
	lastErrMu  sync.Mutex
	lastErrBuf = (*C.char)(C.calloc(1, lastErrSize))
)

const lastErrSize = 1024

func setLastError(msg string) {
	lastErrMu.Lock()
	defer lastErrMu.Unlock()
	if len(msg) >= lastErrSize {
		msg = msg[:lastErrSize-4] + "..."
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(lastErrBuf)), lastErrSize)
	n := copy(b, msg)
	b[n] = 0
}

// fail records err as the last error and returns its ncclResult_t.
func fail(op string, err error) result {
	if err == nil {
		return C.ncclSuccess
	}
	setLastError(fmt.Sprintf("nccl%s: %v", op, err))
	return resultOf(err)
}

// argError is an invalid argument of a C entry point.
func argError(op, arg string, value any, want string) result {
	return fail(op, &ncclgo.ArgError{Arg: arg, Value: value, Want: want})
}

// notImplemented fails op with ncclInvalidUsage.
func notImplemented(op, what string) result {
	return fail(op, fmt.Errorf("%s: %w", what, errNotImplemented))
}

// resultOf maps a Go error onto the ncclResult_t a NCCL client expects.
func resultOf(err error) result {
	var ce *cuda.Error
	var ne net.Error
	var se *os.SyscallError
	var errno syscall.Errno
	switch {
	case err == nil:
		return C.ncclSuccess
	case errors.Is(err, ncclgo.ErrInvalidArgument), errors.Is(err, bootstrap.ErrInvalidID):
		return C.ncclInvalidArgument
	case errors.Is(err, ncclgo.ErrInvalidUsage), errors.Is(err, ncclgo.ErrDestroyed),
		errors.Is(err, errNotImplemented), errors.Is(err, transport.ErrNoTransport),
		errors.Is(err, ncclgo.ErrSharedGPUNeedsMPS):
		return C.ncclInvalidUsage
	case errors.Is(err, cuda.ErrNoDriver), errors.As(err, &ce):
		return C.ncclUnhandledCudaError
	case errors.Is(err, bootstrap.ErrTimeout), errors.Is(err, bootstrap.ErrPeerClosed),
		errors.Is(err, bootstrap.ErrRejected), errors.Is(err, bootstrap.ErrBadMagic),
		errors.Is(err, bootstrap.ErrAborted), errors.Is(err, ncclgo.ErrAborted),
		errors.As(err, new(*ncclgo.PeerLostError)):
		return C.ncclRemoteError
	case errors.As(err, &ne), errors.As(err, &se), errors.As(err, &errno):
		return C.ncclSystemError
	}
	return C.ncclInternalError
}

// errorStrings are ncclGetErrorString's answers, in C memory for good.
var errorStrings = func() map[result]*C.char {
	m := map[result]*C.char{}
	for r, s := range map[result]string{
		C.ncclSuccess:            "no error",
		C.ncclUnhandledCudaError: "unhandled cuda error (see ncclGetLastError for details)",
		C.ncclSystemError:        "unhandled system error (see ncclGetLastError for details)",
		C.ncclInternalError:      "internal error (see ncclGetLastError; please report it to the ncclgo developers)",
		C.ncclInvalidArgument:    "invalid argument (see ncclGetLastError for details)",
		C.ncclInvalidUsage:       "invalid usage (see ncclGetLastError for details)",
		C.ncclRemoteError:        "remote process exited or there was a network error",
		C.ncclInProgress:         "NCCL operation in progress",
	} {
		m[r] = C.CString(s)
	}
	m[C.ncclNumResults] = C.CString("unknown result code")
	return m
}()

//export ncclGetErrorString
func ncclGetErrorString(r result) *C.char {
	if s, ok := errorStrings[r]; ok {
		return s
	}
	return errorStrings[C.ncclNumResults]
}

//export ncclGetLastError
func ncclGetLastError(comm C.ncclComm_t) *C.char { return lastErrBuf }

//export ncclGetVersion
func ncclGetVersion(version *C.int) result {
	if version == nil {
		return argError("GetVersion", "version", "NULL", "a pointer to an int")
	}
	*version = generated.NCCLVersionCode
	return C.ncclSuccess
}

// keepContext runs fn on the calling thread and then restores the thread's
// current CUDA context, which the driver binding switches per call: the
// host (cudart's current device) must not see it change.
func keepContext(fn func() result) result {
	prev, err := cuda.CurrentContextHandle()
	if err != nil {
		return fn()
	}
	r := fn()
	if cur, err := cuda.CurrentContextHandle(); err == nil && cur != prev {
		_ = cuda.SetCurrentContext(prev)
	}
	return r
}
