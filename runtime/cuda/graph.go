package cuda

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// CaptureStatus is a stream's stream-capture state (CUstreamCaptureStatus).
type CaptureStatus int

// The capture states.
const (
	// CaptureNone: work queued on the stream runs.
	CaptureNone CaptureStatus = 0
	// CaptureActive: work queued on the stream is recorded into a graph,
	// and runs only when the graph is launched (replayed).
	CaptureActive CaptureStatus = 1
	// CaptureInvalidated: the capture failed (an illegal call during it);
	// every call on the stream fails until the capture is ended.
	CaptureInvalidated CaptureStatus = 2
)

// String names the state as CUDA does, e.g. "CU_STREAM_CAPTURE_STATUS_ACTIVE".
func (s CaptureStatus) String() string {
	switch s {
	case CaptureNone:
		return "CU_STREAM_CAPTURE_STATUS_NONE"
	case CaptureActive:
		return "CU_STREAM_CAPTURE_STATUS_ACTIVE"
	case CaptureInvalidated:
		return "CU_STREAM_CAPTURE_STATUS_INVALIDATED"
	}
	return fmt.Sprintf("CUstreamCaptureStatus(%d)", int(s))
}

// CaptureMode is how a capture restricts the calls of other threads
// (CUstreamCaptureMode); see BeginCapture.
type CaptureMode int

// The capture modes.
const (
	// CaptureModeGlobal: while the capture runs, potentially unsafe calls
	// (allocations, synchronous copies, queries) fail on every thread not
	// in relaxed mode. torch.cuda.graph and nccl-tests -G use it.
	CaptureModeGlobal CaptureMode = 0
	// CaptureModeThreadLocal: only the capturing thread is restricted.
	CaptureModeThreadLocal CaptureMode = 1
	// CaptureModeRelaxed: nothing is restricted.
	CaptureModeRelaxed CaptureMode = 2
)

// CaptureStatus returns the stream's capture state (cuStreamIsCapturing).
// Asking about the legacy default stream while a blocking stream of its
// context is being captured is an error (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT):
// the legacy stream cannot take work then.
func (s *Stream) CaptureStatus() (CaptureStatus, error) {
	c, h, err := s.stream("Stream.CaptureStatus")
	if err != nil {
		return 0, err
	}
	var st C.int
	if err := check("cuStreamIsCapturing", Result(C.ncu_stream_is_capturing(c, h, &st))); err != nil {
		return 0, s.ctx.wrap(fmt.Sprintf("Stream.CaptureStatus(stream %#x)", s.Handle()), err)
	}
	return CaptureStatus(st), nil
}

// BeginCapture starts capturing the stream into a graph
// (cuStreamBeginCapture_v2): work queued on it from now on is recorded,
// not run, until EndCapture. Unless mode is CaptureModeRelaxed, EndCapture
// must be called from the same OS thread (runtime.LockOSThread).
func (s *Stream) BeginCapture(mode CaptureMode) error {
	c, h, err := s.stream("Stream.BeginCapture")
	if err != nil {
		return err
	}
	if mode < CaptureModeGlobal || mode > CaptureModeRelaxed {
		return badArg("Stream.BeginCapture", "mode %d: want CaptureModeGlobal, CaptureModeThreadLocal or CaptureModeRelaxed", int(mode))
	}
	return s.ctx.wrap("Stream.BeginCapture", check("cuStreamBeginCapture", Result(C.ncu_stream_begin_capture(c, h, C.int(mode)))))
}

// EndCapture ends the stream's capture and returns the graph recorded
// (cuStreamEndCapture). A capture that was invalidated returns an error
// and no graph. Destroy the graph with Destroy.
func (s *Stream) EndCapture() (*Graph, error) {
	c, h, err := s.stream("Stream.EndCapture")
	if err != nil {
		return nil, err
	}
	var g C.CUgraph
	if err := check("cuStreamEndCapture", Result(C.ncu_stream_end_capture(c, h, &g))); err != nil {
		return nil, s.ctx.wrap("Stream.EndCapture", err)
	}
	if g == nil {
		return nil, s.ctx.wrap("Stream.EndCapture", fmt.Errorf("the capture was invalidated: no graph"))
	}
	return &Graph{ctx: s.ctx, h: g}, nil
}

// WaitEventExternal is WaitEvent for a stream being captured: it records an
// event wait node (CU_EVENT_WAIT_EXTERNAL), so that each launch of the
// graph waits for the event's latest record at that time, not at capture
// time. It fails on a stream that is not capturing.
func (s *Stream) WaitEventExternal(e *Event) error {
	c, h, err := s.stream("Stream.WaitEventExternal")
	if err != nil {
		return err
	}
	_, eh, err := e.event("Stream.WaitEventExternal")
	if err != nil {
		return err
	}
	return s.ctx.wrap("Stream.WaitEventExternal", check("cuStreamWaitEvent", Result(C.ncu_stream_wait_event_external(c, h, eh))))
}

// MemcpyHtoDWait copies n bytes from host src to device dst on the stream
// and waits for the copy (cuMemcpyHtoDAsync_v2, cuStreamSynchronize),
// with the calling thread in relaxed capture mode, so that it may run while
// another stream is being captured in global mode. The stream itself must
// not be capturing. src may be Go memory: it is not used after the call.
func (s *Stream) MemcpyHtoDWait(dst DevicePtr, src unsafe.Pointer, n uint64) error {
	c, h, err := s.stream("MemcpyHtoDWait")
	if err != nil {
		return err
	}
	if err := checkCopy("MemcpyHtoDWait", n, dst != 0, src != nil); err != nil || n == 0 {
		return err
	}
	if err := check("cuMemcpyHtoDAsync+cuStreamSynchronize", Result(C.ncu_memcpy_htod_wait(c, C.CUdeviceptr(dst), src, C.size_t(n), h))); err != nil {
		return s.ctx.wrap(fmt.Sprintf("MemcpyHtoDWait(%d bytes)", n), err)
	}
	return nil
}

// RecordExternal is Record for a stream being captured: it records an
// event record node (CU_EVENT_RECORD_EXTERNAL), so that each launch of the
// graph records the event, which stays an ordinary event (queryable,
// waitable by streams that are not capturing). Capture time records
// nothing: the event keeps its earlier state. It fails on a stream that is
// not capturing.
func (e *Event) RecordExternal(s *Stream) error {
	c, h, err := e.event("Event.RecordExternal")
	if err != nil {
		return err
	}
	_, sh, err := s.stream("Event.RecordExternal")
	if err != nil {
		return err
	}
	return e.ctx.wrap("Event.RecordExternal", check("cuEventRecordWithFlags", Result(C.ncu_event_record_external(c, h, sh))))
}

// FollowCapture makes what s captures from now on follow exactly what
// from has captured so far: s's capture dependencies become from's
// (cuStreamGetCaptureInfo_v2, cuStreamUpdateCaptureDependencies). Both
// streams must be capturing into one graph. It is the join of a stream
// back into a capture after a fork: an event recorded on from and waited
// for on s would add from's dependencies to those s already has, so a
// stream joined that way after each of many launches makes every later
// node depend on every earlier one. A driver without the calls (before
// CUDA 11.3), or a from with more than 64 dependencies, gets an error
// matching ErrNotSupported, with nothing changed.
func (s *Stream) FollowCapture(from *Stream) error {
	c, h, err := s.stream("Stream.FollowCapture")
	if err != nil {
		return err
	}
	_, fh, err := from.stream("Stream.FollowCapture")
	if err != nil {
		return err
	}
	return s.ctx.wrap("Stream.FollowCapture", check("cuStreamUpdateCaptureDependencies", Result(C.ncu_stream_follow_capture(c, h, fh))))
}

// GraphRecord is an event record node that RecordBeside added to a
// stream's capture, with that capture's id: what a later RecordBeside on
// the same capture moves, or orders its record after. The zero
// GraphRecord is none (and what RecordBeside returns when it recorded in
// the stream's chain).
type GraphRecord struct {
	node    C.CUgraphNode
	capture uint64
	keep    bool
}

// Beside reports whether r is a record node beside a stream's chain.
func (r GraphRecord) Beside() bool { return r.node != nil }

// Kept returns r marked to stay where it is: a RecordBeside after it adds
// a node that follows it instead of moving it. Something in the capture
// may wait for that record (an external event wait node), which must not
// move past what it waits for.
func (r GraphRecord) Kept() GraphRecord {
	r.keep = true
	return r
}

// RecordBeside is RecordExternal with the record node beside the stream's
// chain instead of in it: the node follows what s captured so far (its
// capture dependencies, cuStreamGetCaptureInfo), and what s captures next
// does not wait for it (cuGraphAddEventRecordNode). At each replay the
// event is then recorded when the work before it is done, without the
// stream's next node waiting for the record. When prev is a record of the
// same capture, prev itself moves after what s captured so far (its edges
// re-pointed: cuGraphRemoveDependencies, cuGraphAddDependencies), so that
// a capture of many launches holds one record, after the latest: each
// record node beside a chain of kernels costs a replay more than the
// kernel itself (tests/gxlat). A prev marked Kept, or a driver that cannot
// re-point edges, gets a new node after prev instead, which keeps the
// event's records in order. It returns the node; a driver without those
// calls, or a stream joined from too many others, gets the record in the
// chain (RecordExternal) and the zero GraphRecord. It fails on a stream
// that is not capturing.
func (e *Event) RecordBeside(s *Stream, prev GraphRecord) (GraphRecord, error) {
	c, h, err := e.event("Event.RecordBeside")
	if err != nil {
		return GraphRecord{}, err
	}
	_, sh, err := s.stream("Event.RecordBeside")
	if err != nil {
		return GraphRecord{}, err
	}
	node, capture := prev.node, C.ulonglong(prev.capture)
	if err := check("cuGraphAddEventRecordNode", Result(C.ncu_event_record_beside(c, h, sh, &node, &capture, moveFlag(prev)))); err != nil {
		return GraphRecord{}, e.ctx.wrap("Event.RecordBeside", err)
	}
	return GraphRecord{node: node, capture: uint64(capture)}, nil
}

// moveFlag is ncu_event_record_beside's move argument for prev.
func moveFlag(prev GraphRecord) C.int {
	if prev.keep {
		return 0
	}
	return 1
}

// Graph is a CUDA graph (CUgraph), as EndCapture returns it.
type Graph struct {
	ctx *Context
	h   C.CUgraph
}

func (g *Graph) graph(op string) (C.CUcontext, C.CUgraph, error) {
	if err := Init(); err != nil {
		return nil, nil, err
	}
	if g == nil || g.h == nil {
		return nil, nil, badArg(op, "nil or destroyed *Graph")
	}
	h, err := g.ctx.ctx(op)
	if err != nil {
		return nil, nil, err
	}
	return h, g.h, nil
}

// NodeCount returns the number of nodes in the graph (cuGraphGetNodes).
func (g *Graph) NodeCount() (int, error) {
	c, h, err := g.graph("Graph.NodeCount")
	if err != nil {
		return 0, err
	}
	var n C.size_t
	if err := check("cuGraphGetNodes", Result(C.ncu_graph_node_count(c, h, &n))); err != nil {
		return 0, g.ctx.wrap("Graph.NodeCount", err)
	}
	return int(n), nil
}

// Instantiate makes an executable graph of g (cuGraphInstantiateWithFlags).
// Destroy it with GraphExec.Destroy; g may be destroyed meanwhile.
func (g *Graph) Instantiate() (*GraphExec, error) {
	c, h, err := g.graph("Graph.Instantiate")
	if err != nil {
		return nil, err
	}
	var e C.CUgraphExec
	if err := check("cuGraphInstantiateWithFlags", Result(C.ncu_graph_instantiate(c, &e, h))); err != nil {
		return nil, g.ctx.wrap("Graph.Instantiate", err)
	}
	return &GraphExec{ctx: g.ctx, h: e}, nil
}

// Destroy destroys the graph (cuGraphDestroy).
func (g *Graph) Destroy() error {
	c, h, err := g.graph("Graph.Destroy")
	if err != nil {
		return err
	}
	g.h = nil
	return g.ctx.wrap("Graph.Destroy", check("cuGraphDestroy", Result(C.ncu_graph_destroy(c, h))))
}

// GraphExec is an executable graph (CUgraphExec).
type GraphExec struct {
	ctx *Context
	h   C.CUgraphExec
}

func (e *GraphExec) exec(op string) (C.CUcontext, C.CUgraphExec, error) {
	if err := Init(); err != nil {
		return nil, nil, err
	}
	if e == nil || e.h == nil {
		return nil, nil, badArg(op, "nil or destroyed *GraphExec")
	}
	h, err := e.ctx.ctx(op)
	if err != nil {
		return nil, nil, err
	}
	return h, e.h, nil
}

// Launch queues one run of the graph on s (cuGraphLaunch).
func (e *GraphExec) Launch(s *Stream) error {
	c, h, err := e.exec("GraphExec.Launch")
	if err != nil {
		return err
	}
	_, sh, err := s.stream("GraphExec.Launch")
	if err != nil {
		return err
	}
	return e.ctx.wrap("GraphExec.Launch", check("cuGraphLaunch", Result(C.ncu_graph_launch(c, h, sh))))
}

// Destroy destroys the executable graph (cuGraphExecDestroy); runs already
// queued still complete.
func (e *GraphExec) Destroy() error {
	c, h, err := e.exec("GraphExec.Destroy")
	if err != nil {
		return err
	}
	e.h = nil
	return e.ctx.wrap("GraphExec.Destroy", check("cuGraphExecDestroy", Result(C.ncu_graph_exec_destroy(c, h))))
}
