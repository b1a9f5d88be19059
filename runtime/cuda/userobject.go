package cuda

/*
#include "shim.h"
*/
import "C"

import "fmt"

// CaptureID returns the id of the capture s is in, unique in the process
// for its lifetime (cuStreamGetCaptureInfo_v2), or 0 when s is not
// capturing. A driver without the call (before CUDA 11.3) returns an error
// matching ErrNotSupported.
func (s *Stream) CaptureID() (uint64, error) {
	c, h, err := s.stream("Stream.CaptureID")
	if err != nil {
		return 0, err
	}
	var id C.ulonglong
	if err := check("cuStreamGetCaptureInfo_v2", Result(C.ncu_capture_id(c, h, &id))); err != nil {
		return 0, s.ctx.wrap(fmt.Sprintf("Stream.CaptureID(stream %#x)", s.Handle()), err)
	}
	return uint64(id), nil
}

// GraphHold tells when the graph a stream was capturing into is gone: the
// graph, every graph cloned or instantiated from it, and every launch of
// those that was pending. It is a CUDA user object whose reference the
// graph owns; when CUDA destroys it (on a driver thread) the hold only
// marks itself released, which Released reports. Drop ends the owner's
// interest: after it the hold must not be used. A hold dropped while its
// graph lives is freed when the graph goes. Its methods may be called
// from any goroutine, but Drop only once, after every other call.
type GraphHold struct {
	h  *C.ncu_hold
	id uint64
}

// HoldCapture returns a hold on the graph s is capturing into
// (cuUserObjectCreate, cuGraphRetainUserObject with
// CU_GRAPH_USER_OBJECT_MOVE), with the capture's id (see CaptureID). A
// driver without those calls (before CUDA 11.3) returns an error matching
// ErrNotSupported; a stream that is not capturing one matching
// CUDA_ERROR_ILLEGAL_STATE.
func (s *Stream) HoldCapture() (*GraphHold, error) {
	c, h, err := s.stream("Stream.HoldCapture")
	if err != nil {
		return nil, err
	}
	var id C.ulonglong
	var hold *C.ncu_hold
	if err := check("cuUserObjectCreate+cuGraphRetainUserObject", Result(C.ncu_capture_hold(c, h, &id, &hold))); err != nil {
		return nil, s.ctx.wrap(fmt.Sprintf("Stream.HoldCapture(stream %#x)", s.Handle()), err)
	}
	return &GraphHold{h: hold, id: uint64(id)}, nil
}

// CaptureID is the id of the capture the hold was made in.
func (g *GraphHold) CaptureID() uint64 { return g.id }

// Released reports whether the graph the hold was made for is gone.
func (g *GraphHold) Released() bool { return C.ncu_hold_released(g.h) != 0 }

// Drop ends the owner's interest in the hold; the hold must not be used
// afterwards. Dropping a nil hold does nothing.
func (g *GraphHold) Drop() {
	if g == nil || g.h == nil {
		return
	}
	C.ncu_hold_drop(g.h)
	g.h = nil
}

// GraphHoldsAlive returns the number of holds not yet freed: those not
// dropped, and those dropped while their graph lives. For tests that
// check holds are not leaked.
func GraphHoldsAlive() int { return int(C.ncu_holds_alive()) }
