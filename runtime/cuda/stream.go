package cuda

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// Stream is a CUDA stream of a context: one created by NewStream, or a
// caller's existing CUstream wrapped by WrapStream.
type Stream struct {
	ctx     *Context
	h       C.CUstream
	owned   bool
	invalid bool // destroyed
}

// Dim3 is a grid or block shape. Every component must be at least 1; use
// Dim1 for one-dimensional shapes.
type Dim3 struct{ X, Y, Z uint32 }

// Dim1 returns the one-dimensional shape {x, 1, 1}.
func Dim1(x uint32) Dim3 { return Dim3{x, 1, 1} }

// Count returns X*Y*Z.
func (d Dim3) Count() uint64 { return uint64(d.X) * uint64(d.Y) * uint64(d.Z) }

// String formats the shape as "(x,y,z)".
func (d Dim3) String() string { return fmt.Sprintf("(%d,%d,%d)", d.X, d.Y, d.Z) }

// validate rejects zero components, naming the shape (grid or block).
func (d Dim3) validate(op, what string) error {
	if d.X == 0 || d.Y == 0 || d.Z == 0 {
		return badArg(op, "%s %v has a zero dimension (unused dimensions are 1; see Dim1)", what, d)
	}
	return nil
}

// NewStream creates a stream (cuStreamCreate); nonBlocking makes it not
// synchronize with the legacy default stream (CU_STREAM_NON_BLOCKING).
// Destroy it with Destroy.
func (c *Context) NewStream(nonBlocking bool) (*Stream, error) {
	h, err := c.ctx("NewStream")
	if err != nil {
		return nil, err
	}
	var flags C.uint
	if nonBlocking {
		flags = 1
	}
	var s C.CUstream
	if err := check("cuStreamCreate", Result(C.ncu_stream_create(h, &s, flags))); err != nil {
		return nil, c.wrap("NewStream", err)
	}
	return &Stream{ctx: c, h: s, owned: true}, nil
}

// WrapStream wraps a caller's existing CUstream of ctx (0 is the legacy
// default stream). Destroy on a wrapped stream does nothing.
func WrapStream(ctx *Context, handle uintptr) *Stream {
	return &Stream{ctx: ctx, h: C.ncu_stream_from(C.uintptr_t(handle))}
}

// Handle returns the raw CUstream (0 for the legacy default stream).
//
// It makes no cgo call: the launch path asks for it several times a call.
func (s *Stream) Handle() uintptr { return uintptr(unsafe.Pointer(s.h)) }

// The handles of the default streams, as CUDA spells them: 0 (NULL) and
// CU_STREAM_LEGACY (cudaStreamLegacy) name the context's legacy default
// stream, CU_STREAM_PER_THREAD (cudaStreamPerThread) the calling thread's
// per-thread default stream. Every driver call takes them as streams.
const (
	StreamLegacy    uintptr = 0x1
	StreamPerThread uintptr = 0x2
)

// IsDefault reports whether s is one of the default streams (handle 0,
// StreamLegacy or StreamPerThread), which every user of the context (the
// legacy one) or of the thread (the per-thread one) shares, rather than a
// stream created for one purpose.
func (s *Stream) IsDefault() bool {
	switch s.Handle() {
	case 0, StreamLegacy, StreamPerThread:
		return true
	}
	return false
}

// Context returns the stream's context.
func (s *Stream) Context() *Context { return s.ctx }

// stream checks that the driver is usable and s is live, returning the
// context and stream handles.
func (s *Stream) stream(op string) (C.CUcontext, C.CUstream, error) {
	if err := Init(); err != nil {
		return nil, nil, err
	}
	if s == nil {
		return nil, nil, badArg(op, "nil *Stream")
	}
	if s.invalid {
		return nil, nil, badArg(op, "stream is destroyed")
	}
	h, err := s.ctx.ctx(op)
	if err != nil {
		return nil, nil, err
	}
	return h, s.h, nil
}

// Synchronize waits for all work queued on the stream (cuStreamSynchronize).
func (s *Stream) Synchronize() error {
	c, h, err := s.stream("Stream.Synchronize")
	if err != nil {
		return err
	}
	return s.ctx.wrap("Stream.Synchronize", check("cuStreamSynchronize", Result(C.ncu_stream_synchronize(c, h))))
}

// Query reports whether all work queued on the stream has finished
// (cuStreamQuery); "not ready" is (false, nil).
func (s *Stream) Query() (bool, error) {
	c, h, err := s.stream("Stream.Query")
	if err != nil {
		return false, err
	}
	r := Result(C.ncu_stream_query(c, h))
	if r == ResultNotReady {
		return false, nil
	}
	if err := check("cuStreamQuery", r); err != nil {
		return false, s.ctx.wrap("Stream.Query", err)
	}
	return true, nil
}

// Destroy destroys a stream created by NewStream (cuStreamDestroy_v2); work
// already queued still runs. For a wrapped stream it does nothing.
func (s *Stream) Destroy() error {
	c, h, err := s.stream("Stream.Destroy")
	if err != nil {
		return err
	}
	if !s.owned {
		return nil
	}
	s.invalid = true
	return s.ctx.wrap("Stream.Destroy", check("cuStreamDestroy", Result(C.ncu_stream_destroy(c, h))))
}

// WaitEvent makes later work on the stream wait for the event's last
// recorded work (cuStreamWaitEvent). The event may belong to another
// context.
func (s *Stream) WaitEvent(e *Event) error {
	c, h, err := s.stream("Stream.WaitEvent")
	if err != nil {
		return err
	}
	_, eh, err := e.event("Stream.WaitEvent")
	if err != nil {
		return err
	}
	return s.ctx.wrap("Stream.WaitEvent", check("cuStreamWaitEvent", Result(C.ncu_stream_wait_event(c, h, eh))))
}

// MemcpyHtoDAsync queues a copy of n bytes from host src to device dst
// (cuMemcpyHtoDAsync_v2). src must stay valid until the copy has run; it is
// asynchronous only for page-locked memory (MemAllocHost).
func (s *Stream) MemcpyHtoDAsync(dst DevicePtr, src unsafe.Pointer, n uint64) error {
	c, h, err := s.stream("MemcpyHtoDAsync")
	if err != nil {
		return err
	}
	if err := checkCopy("MemcpyHtoDAsync", n, dst != 0, src != nil); err != nil || n == 0 {
		return err
	}
	if err := check("cuMemcpyHtoDAsync", Result(C.ncu_memcpy_htod_async(c, C.CUdeviceptr(dst), src, C.size_t(n), h))); err != nil {
		return s.ctx.wrap(fmt.Sprintf("MemcpyHtoDAsync(%d bytes)", n), err)
	}
	return nil
}

// MemcpyDtoHAsync queues a copy of n bytes from device src to host dst
// (cuMemcpyDtoHAsync_v2). dst must stay valid until the copy has run; use
// page-locked memory (MemAllocHost), not Go memory.
func (s *Stream) MemcpyDtoHAsync(dst unsafe.Pointer, src DevicePtr, n uint64) error {
	c, h, err := s.stream("MemcpyDtoHAsync")
	if err != nil {
		return err
	}
	if err := checkCopy("MemcpyDtoHAsync", n, dst != nil, src != 0); err != nil || n == 0 {
		return err
	}
	if err := check("cuMemcpyDtoHAsync", Result(C.ncu_memcpy_dtoh_async(c, dst, C.CUdeviceptr(src), C.size_t(n), h))); err != nil {
		return s.ctx.wrap(fmt.Sprintf("MemcpyDtoHAsync(%d bytes)", n), err)
	}
	return nil
}

// MemcpyDtoDAsync queues a device-to-device copy of n bytes
// (cuMemcpyAsync, or cuMemcpyDtoDAsync_v2: CopyAPIEnv).
func (s *Stream) MemcpyDtoDAsync(dst, src DevicePtr, n uint64) error {
	c, h, err := s.stream("MemcpyDtoDAsync")
	if err != nil {
		return err
	}
	if err := checkCopy("MemcpyDtoDAsync", n, dst != 0, src != 0); err != nil || n == 0 {
		return err
	}
	if kernelCopy(n) {
		if err := s.ctx.ensureCopyKernel(); err != nil {
			return err
		}
	}
	// copySymbol asks the shim (a cgo call): only on failure.
	if r := Result(C.ncu_memcpy_dtod_async(c, C.CUdeviceptr(dst), C.CUdeviceptr(src), C.size_t(n), h)); r != ResultSuccess {
		return s.ctx.wrap(fmt.Sprintf("MemcpyDtoDAsync(%d bytes)", n), check(copySymbol(), r))
	}
	return nil
}

// MemsetD8Async queues setting n bytes at p to v (cuMemsetD8Async).
func (s *Stream) MemsetD8Async(p DevicePtr, v byte, n uint64) error {
	c, h, err := s.stream("MemsetD8Async")
	if err != nil {
		return err
	}
	if err := checkCopy("MemsetD8Async", n, p != 0); err != nil || n == 0 {
		return err
	}
	if err := check("cuMemsetD8Async", Result(C.ncu_memset_d8_async(c, C.CUdeviceptr(p), C.uchar(v), C.size_t(n), h))); err != nil {
		return s.ctx.wrap(fmt.Sprintf("MemsetD8Async(%d bytes)", n), err)
	}
	return nil
}

// MemsetD32Async queues setting n 32-bit words at p (4-byte aligned) to v
// (cuMemsetD32Async). n counts words, not bytes.
func (s *Stream) MemsetD32Async(p DevicePtr, v uint32, n uint64) error {
	c, h, err := s.stream("MemsetD32Async")
	if err != nil {
		return err
	}
	if err := checkCopy("MemsetD32Async", n, p != 0); err != nil || n == 0 {
		return err
	}
	if p%4 != 0 {
		return badArg("MemsetD32Async", "pointer %#x is not 4-byte aligned", uint64(p))
	}
	if err := check("cuMemsetD32Async", Result(C.ncu_memset_d32_async(c, C.CUdeviceptr(p), C.uint(v), C.size_t(n), h))); err != nil {
		return s.ctx.wrap(fmt.Sprintf("MemsetD32Async(%d words)", n), err)
	}
	return nil
}

// Launch queues kernel f on the stream (cuLaunchKernel). args is the
// kernel's parameter block, packed exactly as the kernel's parameters are
// laid out (each at its natural alignment); it is passed through
// CU_LAUNCH_PARAM_BUFFER_POINTER/SIZE, so it must hold no Go pointers, and
// the driver copies it before Launch returns. Empty args launch a kernel
// without parameters.
func (s *Stream) Launch(f *Function, grid, block Dim3, sharedMem uint32, args []byte) error {
	return s.launch(f, grid, block, sharedMem, args, false)
}

// LaunchProgrammatic is Launch as a programmatic dependent launch
// (cuLaunchKernelEx with CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
// compute capability 9.0 and later): f may start while the kernel before
// it on the stream winds down, so f must wait (PTX griddepcontrol.wait)
// before it touches memory that the work before it writes. A driver
// without cuLaunchKernelEx (before CUDA 12.0) launches f as Launch does;
// where the device cannot launch programmatically the attribute is
// ignored and the wait returns at once.
func (s *Stream) LaunchProgrammatic(f *Function, grid, block Dim3, sharedMem uint32, args []byte) error {
	return s.launch(f, grid, block, sharedMem, args, true)
}

// LaunchVia is Launch through the launch graph g (see LaunchGraph); a nil
// g, or one of another context, launches as Launch does.
func (s *Stream) LaunchVia(g *LaunchGraph, f *Function, grid, block Dim3, sharedMem uint32, args []byte) error {
	if g == nil {
		return s.launch(f, grid, block, sharedMem, args, false)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return s.launchIn(f, grid, block, sharedMem, args, false, g)
}

func (s *Stream) launch(f *Function, grid, block Dim3, sharedMem uint32, args []byte, programmatic bool) error {
	return s.launchIn(f, grid, block, sharedMem, args, programmatic, nil)
}

// launchIn launches f, through g where it is not nil (g.mu held).
func (s *Stream) launchIn(f *Function, grid, block Dim3, sharedMem uint32, args []byte, programmatic bool, g *LaunchGraph) error {
	c, h, err := s.stream("Launch")
	if err != nil {
		return err
	}
	if f == nil || f.h == nil {
		return badArg("Launch", "nil *Function")
	}
	if f.mod == nil || f.mod.h == nil {
		return badArg("Launch", "function %q: module is unloaded", f.name)
	}
	if err := grid.validate("Launch", "grid"); err != nil {
		return err
	}
	if err := block.validate("Launch", "block"); err != nil {
		return err
	}
	if f.mod.ctx.h != c {
		return badArg("Launch", "function %q belongs to device %d's context, the stream to device %d's", f.name, int(f.mod.ctx.dev), int(s.ctx.dev))
	}
	var p unsafe.Pointer
	if len(args) > 0 {
		p = unsafe.Pointer(&args[0])
	}
	r := Result(C.ncu_launch(c, f.h, C.uint(grid.X), C.uint(grid.Y), C.uint(grid.Z),
		C.uint(block.X), C.uint(block.Y), C.uint(block.Z), C.uint(sharedMem), h, p, C.size_t(len(args)), boolInt(programmatic), g.via(c)))
	if err := check("cuLaunchKernel", r); err != nil {
		return s.ctx.wrap(fmt.Sprintf("Launch(%q, grid %v, block %v, smem %d, %d arg bytes)", f.name, grid, block, sharedMem, len(args)), err)
	}
	return nil
}

// Event is a CUDA event of a context.
type Event struct {
	ctx *Context
	h   C.CUevent
}

// NewEvent creates an event (cuEventCreate); disableTiming makes it
// cheaper but unusable with ElapsedMillis (CU_EVENT_DISABLE_TIMING).
func (c *Context) NewEvent(disableTiming bool) (*Event, error) {
	h, err := c.ctx("NewEvent")
	if err != nil {
		return nil, err
	}
	var flags C.uint
	if disableTiming {
		flags = 2
	}
	var e C.CUevent
	if err := check("cuEventCreate", Result(C.ncu_event_create(h, &e, flags))); err != nil {
		return nil, c.wrap("NewEvent", err)
	}
	return &Event{ctx: c, h: e}, nil
}

// event checks that the driver is usable and e is live.
func (e *Event) event(op string) (C.CUcontext, C.CUevent, error) {
	if err := Init(); err != nil {
		return nil, nil, err
	}
	if e == nil || e.h == nil {
		return nil, nil, badArg(op, "nil or destroyed *Event")
	}
	h, err := e.ctx.ctx(op)
	if err != nil {
		return nil, nil, err
	}
	return h, e.h, nil
}

// Record captures the work queued so far on s (cuEventRecord). The stream
// must belong to the event's context.
func (e *Event) Record(s *Stream) error {
	c, h, err := e.event("Event.Record")
	if err != nil {
		return err
	}
	_, sh, err := s.stream("Event.Record")
	if err != nil {
		return err
	}
	return e.ctx.wrap("Event.Record", check("cuEventRecord", Result(C.ncu_event_record(c, h, sh))))
}

// Synchronize waits until the recorded work has finished
// (cuEventSynchronize).
func (e *Event) Synchronize() error {
	c, h, err := e.event("Event.Synchronize")
	if err != nil {
		return err
	}
	return e.ctx.wrap("Event.Synchronize", check("cuEventSynchronize", Result(C.ncu_event_synchronize(c, h))))
}

// Query reports whether the recorded work has finished (cuEventQuery);
// "not ready" is (false, nil).
func (e *Event) Query() (bool, error) {
	c, h, err := e.event("Event.Query")
	if err != nil {
		return false, err
	}
	r := Result(C.ncu_event_query(c, h))
	if r == ResultNotReady {
		return false, nil
	}
	if err := check("cuEventQuery", r); err != nil {
		return false, e.ctx.wrap("Event.Query", err)
	}
	return true, nil
}

// Destroy destroys the event (cuEventDestroy_v2).
func (e *Event) Destroy() error {
	c, h, err := e.event("Event.Destroy")
	if err != nil {
		return err
	}
	e.h = nil
	return e.ctx.wrap("Event.Destroy", check("cuEventDestroy", Result(C.ncu_event_destroy(c, h))))
}

// ElapsedMillis returns the time between two recorded, completed events in
// milliseconds (cuEventElapsedTime).
func ElapsedMillis(start, end *Event) (float32, error) {
	c, sh, err := start.event("ElapsedMillis (start)")
	if err != nil {
		return 0, err
	}
	_, eh, err := end.event("ElapsedMillis (end)")
	if err != nil {
		return 0, err
	}
	var ms C.float
	if err := check("cuEventElapsedTime", Result(C.ncu_event_elapsed(c, &ms, sh, eh))); err != nil {
		return 0, start.ctx.wrap("ElapsedMillis", err)
	}
	return float32(ms), nil
}

// boolInt is b as a C int flag.
func boolInt(b bool) C.int {
	if b {
		return 1
	}
	return 0
}
