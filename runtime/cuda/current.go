package cuda

/*
#include "shim.h"
*/
import "C"

import "unsafe"

// The calling OS thread's current context. These exist for hosts that
// drive CUDA themselves (the C API in capi): cudart's "current device" is
// the device of the thread's current context. The goroutine must stay on
// its thread between calls (runtime.LockOSThread, or a cgo callback, which
// is locked to the C thread) for the answers to mean anything.

// CurrentContextHandle returns the raw CUcontext current on the calling
// thread (cuCtxGetCurrent), 0 when none is. CurrentContext wraps it.
func CurrentContextHandle() (uintptr, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	var h C.CUcontext
	if err := check("cuCtxGetCurrent", Result(C.ncu_ctx_get_current(&h))); err != nil {
		return 0, err
	}
	return uintptr(unsafe.Pointer(h)), nil // as Context.Handle: no second cgo call
}

// SetCurrentContext makes the raw context h current on the calling thread
// (cuCtxSetCurrent); 0 leaves the thread without a current context.
func SetCurrentContext(h uintptr) error {
	if err := Init(); err != nil {
		return err
	}
	return check("cuCtxSetCurrent", Result(C.ncu_ctx_set_current_handle(C.uintptr_t(h))))
}

// CurrentDevice returns the device of the calling thread's current context
// (cuCtxGetDevice); ok is false when no context is current.
func CurrentDevice() (d Device, ok bool, err error) {
	h, err := CurrentContextHandle()
	if err != nil || h == 0 {
		return 0, false, err
	}
	var dev C.CUdevice
	if err := check("cuCtxGetDevice", Result(C.ncu_ctx_get_device(C.ncu_ctx_from(C.uintptr_t(h)), &dev))); err != nil {
		return 0, false, err
	}
	return Device(dev), true, nil
}
