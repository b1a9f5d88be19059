package cuda

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"unsafe"
)

// Ops is a sequence of operations on streams of one context that Run
// queues in one call into the driver: one cgo call and one check of the
// thread's current context for all of them, where the methods of Stream
// and Event make one each. A launch and the event calls that order it
// (the capture check, the waits, the completion record) are such a
// sequence. Each operation's outcome is read after Run by its index (Err,
// Busy, CaptureOf). The zero Ops is empty; Reset empties it for reuse. An
// Ops is not safe for concurrent use.
type Ops struct {
	ctx  *Context
	ops  []C.ncu_op // in mem: cgo's pointer check never walks it at Run
	mem  *opsMem
	args []uint64 // the parameter block of the sequence's launches
	argN int      // its bytes passed
	fns  []*Function
	vias []*LaunchGraph // per operation, the launch graph Via gave it
	via  []*LaunchGraph // the distinct ones, locked by Run
	err  error          // the first invalid operation added
}

// OpFlag says when an operation of an Ops runs.
type OpFlag int

// The flags. Without any, an operation runs whatever happened before it
// (but after a Stop failure nothing runs), and its failure stops nothing.
const (
	// OpStop: when it fails, nothing after it runs.
	OpStop OpFlag = C.NCU_OP_STOP
	// OpSkip: when it fails, only the OpAlways operations after it run.
	OpSkip OpFlag = C.NCU_OP_SKIP
	// OpAlways: runs after an OpSkip failure.
	OpAlways OpFlag = C.NCU_OP_ALWAYS
	// OpIfBusy: runs only if the operation before it is a Query that found
	// work pending.
	OpIfBusy OpFlag = C.NCU_OP_IF_BUSY
	// OpIfPrevOK: runs only if the operation before it ran and succeeded.
	OpIfPrevOK OpFlag = C.NCU_OP_IF_PREV_OK
)

// ErrNotRun is Ops.Err's answer for an operation that did not run.
var ErrNotRun = errors.New("cuda: operation not run")

// Reset empties o, keeping its memory.
func (o *Ops) Reset() {
	if n := len(o.ops); n > 0 {
		// Zeroed here, as bytes, for add to hand out zero operations.
		clear(unsafe.Slice((*byte)(unsafe.Pointer(&o.ops[0])), uintptr(n)*unsafe.Sizeof(C.ncu_op{})))
	}
	o.ctx, o.ops, o.argN, o.err = nil, o.ops[:0], 0, nil
	clear(o.fns)
	o.fns = o.fns[:0]
	clear(o.vias)
	o.vias = o.vias[:0]
	clear(o.via)
	o.via = o.via[:0]
}

// opsMem is C memory holding an Ops' operations, freed by a cleanup once
// nothing references it. Passing Go memory that holds pointers (the
// operations' handles) to C makes cgo check every one of them on each
// Run (runtime.cgoCheckArg: 18 % of an 8-rank launch's host time on the
// fake driver); C memory is not checked.
type opsMem struct{ p unsafe.Pointer }

// grow moves o's operations to C memory of twice the room (16 at first).
func (o *Ops) grow() {
	n := max(16, 2*cap(o.ops))
	p := C.calloc(C.size_t(n), C.size_t(unsafe.Sizeof(C.ncu_op{})))
	if p == nil {
		panic("cuda: Ops: out of host memory")
	}
	m := &opsMem{p: p}
	runtime.AddCleanup(m, func(p unsafe.Pointer) { C.free(p) }, p)
	ops := unsafe.Slice((*C.ncu_op)(p), n)[:len(o.ops)]
	copy(ops, o.ops)
	o.ops, o.mem = ops, m
}

// Len is the number of operations added.
func (o *Ops) Len() int { return len(o.ops) }

func (o *Ops) add(op string, s *Stream, kind int, f OpFlag) (*C.ncu_op, int) {
	if s == nil || s.invalid {
		o.fail(badArg(op, "nil or destroyed *Stream"))
	} else if o.ctx == nil {
		o.ctx = s.ctx
	} else if s.ctx == nil || o.ctx.h != s.ctx.h {
		o.fail(badArg(op, "stream %#x belongs to another context than the sequence's", s.Handle()))
	}
	// Appended zero and filled in place: a literal with kind and flags
	// would be built on the stack and copied, and that copy's loads stall
	// on the literal's just-written stores (a CPU profile put half of
	// add's time on that copy).
	if len(o.ops) == cap(o.ops) {
		o.grow()
	}
	o.ops = o.ops[:len(o.ops)+1] // zero: calloc'd, or cleared by Reset
	p := &o.ops[len(o.ops)-1]
	p.kind, p.flags = C.int(kind), C.int(f)
	if s != nil {
		p.s = s.h
	}
	o.fns = append(o.fns, nil)
	o.vias = append(o.vias, nil)
	return p, len(o.ops) - 1
}

func (o *Ops) fail(err error) {
	if o.err == nil {
		o.err = err
	}
}

func (o *Ops) event(op string, e *Event) C.CUevent {
	if e == nil || e.h == nil {
		o.fail(badArg(op, "nil or destroyed *Event"))
		return nil
	}
	return e.h
}

// Capture adds asking whether s is being captured (cuStreamIsCapturing);
// when it is, or the question fails, nothing after it runs but the
// capture checks that directly follow it (so that a run of checks answers
// for every stream).
func (o *Ops) Capture(s *Stream) int {
	_, i := o.add("Ops.Capture", s, C.NCU_OP_CAPTURE, OpStop)
	return i
}

// Query adds asking whether s has finished all its work (cuStreamQuery),
// in relaxed capture mode as Stream.Query (the thread's mode is switched
// once, before the first query that runs); Busy(i) says.
func (o *Ops) Query(s *Stream, f OpFlag) int {
	_, i := o.add("Ops.Query", s, C.NCU_OP_QUERY, f)
	return i
}

// WaitEvent adds s.WaitEvent(e), or with external s.WaitEventExternal(e).
func (o *Ops) WaitEvent(s *Stream, e *Event, external bool, f OpFlag) int {
	i := o.addEvent("Ops.WaitEvent", s, e, C.NCU_OP_WAIT, C.NCU_OP_WAIT_EXTERNAL, external, f)
	return i
}

// Record adds e.Record(s), or with external e.RecordExternal(s).
func (o *Ops) Record(e *Event, s *Stream, external bool, f OpFlag) int {
	i := o.addEvent("Ops.Record", s, e, C.NCU_OP_RECORD, C.NCU_OP_RECORD_EXTERNAL, external, f)
	if e != nil && s != nil && e.ctx != nil && s.ctx != nil && e.ctx.h != s.ctx.h {
		o.fail(badArg("Ops.Record", "event and stream belong to different contexts"))
	}
	return i
}

// RecordBeside adds e.RecordBeside(s, prev); GraphRecord(i) returns the
// node after Run.
func (o *Ops) RecordBeside(e *Event, s *Stream, prev GraphRecord, f OpFlag) int {
	i := o.Record(e, s, false, f)
	p := &o.ops[i]
	p.kind = C.NCU_OP_RECORD_BESIDE
	p.node, p.capture, p.move = prev.node, C.ulonglong(prev.capture), moveFlag(prev)
	return i
}

// GraphRecord returns RecordBeside i's node (the zero GraphRecord when it
// did not run, failed or recorded in the stream's chain).
func (o *Ops) GraphRecord(i int) GraphRecord {
	p := &o.ops[i]
	if p.kind != C.NCU_OP_RECORD_BESIDE || p.result != C.NCU_SUCCESS {
		return GraphRecord{}
	}
	return GraphRecord{node: p.node, capture: uint64(p.capture)}
}

// addEvent adds an operation on s with event e: kind, or extKind when
// external.
func (o *Ops) addEvent(name string, s *Stream, e *Event, kind, extKind int, external bool, f OpFlag) int {
	if external {
		kind = extKind
	}
	p, i := o.add(name, s, kind, f)
	p.e = o.event(name, e)
	return i
}

// MemcpyDtoDAsync adds s.MemcpyDtoDAsync(dst, src, n); n must not be 0.
func (o *Ops) MemcpyDtoDAsync(s *Stream, dst, src DevicePtr, n uint64, f OpFlag) int {
	p, i := o.add("Ops.MemcpyDtoDAsync", s, C.NCU_OP_DTOD, f)
	if err := checkCopy("Ops.MemcpyDtoDAsync", n, dst != 0, src != 0); err != nil {
		o.fail(err)
	} else if n == 0 {
		o.fail(badArg("Ops.MemcpyDtoDAsync", "a copy of 0 bytes (leave it out)"))
	} else if kernelCopy(n) && s != nil && s.ctx != nil {
		if err := s.ctx.ensureCopyKernel(); err != nil {
			o.fail(err)
		}
	}
	p.dst, p.src, p.n = C.CUdeviceptr(dst), C.CUdeviceptr(src), C.size_t(n)
	return i
}

// Args returns the parameter block of the sequence's launches, n bytes,
// to be written before Run: every Launch of the sequence passes it.
func (o *Ops) Args(n int) unsafe.Pointer {
	if w := (n + 7) / 8; len(o.args) < w {
		o.args = make([]uint64, w)
	}
	o.argN = n
	if n == 0 {
		return nil
	}
	return unsafe.Pointer(&o.args[0])
}

// Launch adds launching f on s with grid × block threads (one-dimensional)
// and the parameter block of Args, as Stream.Launch.
func (o *Ops) Launch(s *Stream, fn *Function, grid, block, sharedMem uint32, f OpFlag) int {
	p, i := o.add("Ops.Launch", s, C.NCU_OP_LAUNCH, f)
	switch {
	case fn == nil || fn.h == nil:
		o.fail(badArg("Launch", "nil *Function"))
	case fn.mod == nil || fn.mod.h == nil:
		o.fail(badArg("Launch", "function %q: module is unloaded", fn.name))
	case grid == 0 || block == 0:
		o.fail(badArg("Launch", "grid %d or block %d is zero", grid, block))
	case s != nil && s.ctx != nil && fn.mod.ctx.h != s.ctx.h:
		o.fail(badArg("Launch", "function %q belongs to device %d's context, the stream to device %d's", fn.name, int(fn.mod.ctx.dev), int(s.ctx.dev)))
	default:
		p.f = fn.h
	}
	p.grid, p.block, p.smem = C.uint(grid), C.uint(block), C.uint(sharedMem)
	o.fns[i] = fn
	return i
}

// Programmatic makes launch i (an index Launch returned) a programmatic
// dependent launch, as Stream.LaunchProgrammatic.
func (o *Ops) Programmatic(i int) {
	if i < 0 || i >= len(o.ops) || o.ops[i].kind != C.NCU_OP_LAUNCH {
		o.fail(badArg("Programmatic", "operation %d is not a launch", i))
		return
	}
	o.ops[i].programmatic = 1
}

// Via makes launch i (an index Launch returned) go through the launch
// graph g, as Stream.LaunchVia: unless it is programmatic, or g is nil or
// of another context. A join graph (NewJoinGraph) of another context, or
// destroyed by Run, fails the sequence: its waits and record would be
// lost.
func (o *Ops) Via(i int, g *LaunchGraph) {
	if i < 0 || i >= len(o.ops) || o.ops[i].kind != C.NCU_OP_LAUNCH {
		o.fail(badArg("Via", "operation %d is not a launch", i))
		return
	}
	if g == nil {
		return
	}
	if g.ctx == nil || o.ctx == nil || g.ctx.h != o.ctx.h { // one context may have several *Context
		if g.isJoin() {
			o.fail(badArg("Via", "a join graph of another context"))
		}
		return
	}
	if !slices.Contains(o.via, g) {
		o.via = append(o.via, g)
	}
	o.vias[i] = g
}

// Run runs the sequence in one call into the driver. It fails, running
// nothing, when an operation was invalid or the context could not be
// made current; otherwise each operation's outcome is in Err, Busy and
// CaptureOf. An empty sequence does nothing.
func (o *Ops) Run() error {
	if o.err != nil {
		return o.err
	}
	if len(o.ops) == 0 {
		return nil
	}
	h, err := o.ctx.ctx("Ops.Run")
	if err != nil {
		return err
	}
	var args unsafe.Pointer
	if o.argN > 0 {
		args = unsafe.Pointer(&o.args[0])
	}
	for _, g := range o.via {
		g.mu.Lock()
	}
	for _, g := range o.via {
		if g.g == nil && g.isJoin() {
			// A join graph's waits and record are not in the sequence:
			// launching without it would drop them.
			for _, g := range o.via {
				g.mu.Unlock()
			}
			return badArg("Ops.Run", "a launch goes through a destroyed join graph")
		}
	}
	for i, g := range o.vias {
		if g != nil {
			o.ops[i].graph = g.via(h)
		}
	}
	r := Result(C.ncu_run_ops(h, &o.ops[0], C.int(len(o.ops)), args, C.size_t(o.argN)))
	for i, g := range o.vias {
		if g != nil {
			o.ops[i].graph = nil
		}
	}
	for _, g := range o.via {
		g.mu.Unlock()
	}
	if err := check("cuCtxSetCurrent", r); err != nil {
		return o.ctx.wrap("Ops.Run", err)
	}
	return nil
}

// Ran reports whether operation i ran.
func (o *Ops) Ran(i int) bool { return o.ops[i].result != C.NCU_OP_NOT_RUN }

// Err returns operation i's failure after Run: nil when it succeeded (a
// Query that found work pending included), ErrNotRun when it did not run,
// else the driver's error as the Stream or Event method would return it.
func (o *Ops) Err(i int) error {
	p := &o.ops[i]
	r := Result(p.result)
	switch {
	case p.result == C.NCU_OP_NOT_RUN:
		return ErrNotRun
	case r == ResultSuccess, r == ResultNotReady && p.kind == C.NCU_OP_QUERY:
		return nil
	}
	var sym, op string
	switch p.kind {
	case C.NCU_OP_CAPTURE:
		sym, op = "cuStreamIsCapturing", "Stream.CaptureStatus"
	case C.NCU_OP_QUERY:
		sym, op = "cuStreamQuery", "Stream.Query"
	case C.NCU_OP_WAIT:
		sym, op = "cuStreamWaitEvent", "Stream.WaitEvent"
	case C.NCU_OP_WAIT_EXTERNAL:
		sym, op = "cuStreamWaitEvent", "Stream.WaitEventExternal"
	case C.NCU_OP_RECORD:
		sym, op = "cuEventRecord", "Event.Record"
	case C.NCU_OP_RECORD_EXTERNAL:
		sym, op = "cuEventRecordWithFlags", "Event.RecordExternal"
	case C.NCU_OP_RECORD_BESIDE:
		sym, op = "cuGraphAddEventRecordNode", "Event.RecordBeside"
	case C.NCU_OP_DTOD:
		sym, op = copySymbol(), fmt.Sprintf("MemcpyDtoDAsync(%d bytes)", uint64(p.n))
	case C.NCU_OP_LAUNCH:
		sym, op = "cuLaunchKernel", fmt.Sprintf("Launch(%q, grid %d, block %d, smem %d, %d arg bytes)", o.fns[i].name, uint(p.grid), uint(p.block), uint(p.smem), o.argN)
	}
	return o.ctx.wrap(op, check(sym, r))
}

// Busy reports whether Query i found work pending on its stream.
func (o *Ops) Busy(i int) bool { return Result(o.ops[i].result) == ResultNotReady }

// CaptureOf returns Capture i's answer (CaptureNone when it did not run).
func (o *Ops) CaptureOf(i int) CaptureStatus { return CaptureStatus(o.ops[i].status) }
