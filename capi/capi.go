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
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"github.com/ncclgo/ncclgo"
	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// result is ncclResult_t.
type result = C.ncclResult_t

// errNotImplemented marks what ncclgo does not do yet: ncclInvalidUsage.
var errNotImplemented = errors.New("not implemented by ncclgo yet")

// errInitAborted is the error of an init (or split, or shrink) that
// ncclCommAbort from another thread cancelled. It is ncclInternalError,
// the code NCCL returns there: NCCL's bootstrap and socket loops return
// ncclInternalError once they see the abort flag (bootstrap.cc's
// checkAbort, the socket progress loop), and ncclCommAbort ignores the
// init's error. The message says it is no bug.
var errInitAborted = errors.New("the init was aborted by ncclCommAbort (ncclInternalError, as NCCL returns; not a bug)")

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
	case errors.Is(err, errInitAborted): // before ErrAborted, which it may wrap
		return C.ncclInternalError
	case errors.Is(err, ncclgo.ErrInvalidArgument), errors.Is(err, ncclgo.ErrInvalidID):
		return C.ncclInvalidArgument
	case errors.Is(err, ncclgo.ErrInvalidUsage), errors.Is(err, ncclgo.ErrDestroyed),
		errors.Is(err, errNotImplemented), errors.Is(err, ncclgo.ErrNoTransport),
		errors.Is(err, ncclgo.ErrSharedGPUNeedsMPS):
		return C.ncclInvalidUsage
	case errors.Is(err, ncclgo.ErrNoDriver), errors.As(err, &ce):
		return C.ncclUnhandledCudaError
	case errors.Is(err, ncclgo.ErrTimeout), errors.Is(err, ncclgo.ErrPeerClosed),
		errors.Is(err, ncclgo.ErrRejected), errors.Is(err, ncclgo.ErrBadMagic),
		errors.Is(err, ncclgo.ErrBootstrapAborted), errors.Is(err, ncclgo.ErrAborted),
		errors.Is(err, ncclgo.ErrPeerFailed),
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
func ncclGetErrorString(r result) (s *C.char) {
	defer guardString(&s)
	if s, ok := errorStrings[r]; ok {
		return s
	}
	return errorStrings[C.ncclNumResults]
}

//export ncclGetLastError
func ncclGetLastError(comm C.ncclComm_t) (s *C.char) {
	defer guardString(&s)
	return lastErrBuf
}

//export ncclGetVersion
func ncclGetVersion(version *C.int) (res result) {
	defer guard("GetVersion", &res)
	if version == nil {
		return argError("GetVersion", "version", "NULL", "a pointer to an int")
	}
	*version = generated.NCCLVersionCode
	return C.ncclSuccess
}

// keepContext runs fn on the calling thread and then restores the thread's
// current CUDA context, which the driver binding switches per call: the
// host (cudart's current device) must not see it change.
// It restores the context also when fn panics (guard then recovers).
func keepContext(fn func() result) result { return keepContextOf(nil, fn) }

// keepContextOf is keepContext for a call that makes no context but ctx
// current: when ctx is current already, nothing can change, and the check
// after fn is skipped.
func keepContextOf(ctx *cuda.Context, fn func() result) result {
	prev, err := cuda.CurrentContextHandle()
	if err != nil || ctx != nil && prev != 0 && prev == ctx.Handle() {
		return fn()
	}
	defer func() {
		if cur, err := cuda.CurrentContextHandle(); err == nil && cur != prev {
			_ = cuda.SetCurrentContext(prev)
		}
	}()
	return fn()
}

// errPanic marks a panic inside the library that an entry point (or an
// init goroutine) caught: ncclInternalError.
var errPanic = errors.New("internal error: a bug in ncclgo (please report this message)")

// panicError describes a recovered panic p as an error matching errPanic
// that names the panic and where it happened. Call it from the deferred
// function that recovered.
func panicError(p any) error {
	return fmt.Errorf("%w: panic: %v (in %s)", errPanic, p, panicSite())
}

// panicSite is the function and line that panicked: the first frame
// below runtime.gopanic that is not the runtime's own.
func panicSite() string {
	pcs := make([]uintptr, 64)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	panicking := false
	for {
		f, more := frames.Next()
		switch {
		case f.Function == "runtime.gopanic":
			panicking = true
		case panicking && !strings.HasPrefix(f.Function, "runtime."):
			return fmt.Sprintf("%s at %s:%d", f.Function, filepath.Base(f.File), f.Line)
		}
		if !more {
			return "an unknown place"
		}
	}
}

// guard is deferred first by every exported function that returns an
// ncclResult_t: a panic below it becomes ncclInternalError, with
// ncclGetLastError naming op and the panic, instead of killing the host.
func guard(op string, res *result) {
	if p := recover(); p != nil {
		*res = fail(op, faultError(p))
	}
}

// ownPackage is this package's prefix in function names: "main." in the
// shared library, the import path in its tests.
func ownPackage() string {
	pc, _, _, _ := runtime.Caller(0)
	name := runtime.FuncForPC(pc).Name() // ....ownPackage
	return strings.TrimSuffix(name, "ownPackage")
}

// faultError is panicError, except for a memory fault in this package's
// own code, which only dereferences the caller's pointers: that is a bad
// pointer argument (ncclInvalidArgument), not a bug in ncclgo.
func faultError(p any) error {
	site := panicSite()
	if re, ok := p.(runtime.Error); ok && strings.Contains(re.Error(), "invalid memory address") && strings.HasPrefix(site, ownPackage()) {
		return fmt.Errorf("%w: a pointer argument is not valid memory (fault in %s: %v)", ncclgo.ErrInvalidArgument, site, p)
	}
	return fmt.Errorf("%w: panic: %v (in %s)", errPanic, p, site)
}

// guardString is guard for the exports that return a string: a panic
// returns the text of ncclInternalError.
func guardString(s **C.char) {
	if p := recover(); p != nil {
		setLastError(panicError(p).Error())
		*s = errorStrings[C.ncclInternalError]
	}
}

// recovered runs an init in a goroutine of the library's own: a panic
// becomes the init's error (no caller above could recover it).
func recovered(run func() (*ncclgo.Comm, error)) (gc *ncclgo.Comm, err error) {
	defer func() {
		if p := recover(); p != nil {
			gc, err = nil, panicError(p)
		}
	}()
	return run()
}
