package comm

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/ncclgo/ncclgo/runtime/enqueue"
)

// laneState is a rank's lane (runtime/enqueue.Lane): where a rank that
// shares its GPU with another rank of this process launches what it is
// handed on a default stream. Guarded by Engine.mu.
type laneState struct {
	shared  bool          // another rank of this process runs on this GPU
	lane    *enqueue.Lane // made at the first launch that needs it
	entered *cuda.Stream  // the caller's stream of an Enter not yet left
	// captured says that a launch on the entered lane was captured into
	// a CUDA graph (runLocked): its Leave then follows (leaveLaneLocked).
	captured bool
	// in mirrors entered != nil, for leaveLane to skip e.mu when no lane
	// is entered (the common case); written under mu.
	in atomic.Bool
}

// laneFor returns the stream run launches on for the caller's stream: the
// caller's own, or, for a default stream of a rank that shares its GPU
// within the process, the rank's lane entered from it (left by leaveLanes
// once every rank of the group has entered). e.mu is held.
func (e *Engine) laneFor(stream *cuda.Stream) (*cuda.Stream, error) {
	if !e.lanes.shared || !stream.IsDefault() {
		return stream, nil
	}
	if e.lanes.lane == nil {
		l, err := enqueue.NewLane(e.cctx)
		if err != nil {
			return nil, fmt.Errorf("ncclgo: rank %d: %w", e.rank, err)
		}
		e.lanes.lane = l
	}
	s, err := e.lanes.lane.Enter(stream)
	if err != nil {
		return nil, fmt.Errorf("ncclgo: rank %d: %w", e.rank, err)
	}
	e.lanes.entered, e.lanes.captured = stream, false
	e.lanes.in.Store(true)
	return s, nil
}

// noteLaneCapture records, for the launch run queued on stream under
// capture state c, that the entered lane's work was captured. e.mu is
// held.
func (e *Engine) noteLaneCapture(stream *cuda.Stream, c enqueue.Capture) {
	if c && e.lanes.entered != nil && e.lanes.lane.Stream() == stream {
		e.lanes.captured = true
	}
}

// leaveLanes joins each launch's lane back to the caller's stream: after
// every rank of the group has entered its lane, so that no rank's Enter
// on a shared stream comes after another's Leave.
func leaveLanes(ls []Launch) error {
	var errs []error
	var followed []uintptr // callers a captured lane left this group (leaveLaneLocked)
	for _, l := range ls {
		if err := l.Engine.leaveLane(&followed); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// leaveLane joins e's lane back to the stream it was entered from, if a
// launch entered it.
func (e *Engine) leaveLane(followed *[]uintptr) error {
	if !e.lanes.in.Load() {
		return nil // as leaveLaneLocked finds it
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.leaveLaneLocked(followed)
}

// leaveLaneLocked is leaveLane with e.mu held. followed lists the callers
// whose captured lanes left in this group: the first captured lane to
// leave a caller sets the caller's capture dependencies
// (enqueue.Lane.LeaveFollowing), the others add theirs (Leave). nil is a
// group of one launch.
func (e *Engine) leaveLaneLocked(followed *[]uintptr) error {
	s := e.lanes.entered
	if s == nil {
		return nil
	}
	e.lanes.entered = nil
	e.lanes.in.Store(false)
	var err error
	if h := s.Handle(); e.lanes.captured && (followed == nil || !slices.Contains(*followed, h)) {
		err = e.lanes.lane.LeaveFollowing(s)
		if followed != nil {
			*followed = append(*followed, h)
		}
	} else {
		err = e.lanes.lane.Leave(s)
	}
	if err != nil {
		return fmt.Errorf("ncclgo: rank %d: %w", e.rank, err)
	}
	return nil
}

// closeLane destroys the lane (free). It takes mu: a group's leaveLanes
// may still be reading the lane of a rank another goroutine destroys.
func (e *Engine) closeLane() error {
	e.mu.Lock()
	l := e.lanes.lane
	e.lanes.lane, e.lanes.entered = nil, nil
	e.lanes.in.Store(false)
	e.mu.Unlock()
	return l.Close()
}

// UsesLane reports whether the rank shares its GPU with another rank of
// this process, and so launches work handed to it on a default stream on a
// lane of its own, and whether that lane exists (made at the first such
// launch) and has been left by every launch that entered it.
func (e *Engine) UsesLane() (shared, made, left bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lanes.shared, e.lanes.lane != nil, e.lanes.entered == nil
}
