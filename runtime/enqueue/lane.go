package enqueue

import (
	"errors"
	"fmt"

	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// Lane is a rank's own stream, joined to a caller's stream by events: the
// lane waits for what the caller queued before the call (Enter), and the
// caller's later work waits for what the call queued on the lane (Leave).
//
// Ranks of one process that share a GPU and are handed one stream (the
// legacy default stream, which the whole context shares, or one thread's
// per-thread default stream) would otherwise queue their kernels one after
// the other; a collective's kernel waits for its peers' kernels, so the
// first would wait forever for the second queued behind it. On lanes the
// kernels of one group run side by side, and the caller's stream still
// orders them after its earlier work and before its later work, as
// NCCL's launches on the caller's stream are ordered. For that, a group
// enters every rank's lane before it leaves any: a Leave queued on the
// shared stream before another rank's Enter would order that rank's kernel
// after this one's.
//
// The lane's stream is non-blocking (CU_STREAM_NON_BLOCKING), so it does
// not synchronize implicitly with the legacy default stream; only its
// events order it. A Lane is not safe for concurrent use: its rank's
// launches are serialized by the caller.
type Lane struct {
	s       *cuda.Stream
	in, out *cuda.Event
}

// NewLane creates a lane in ctx: a non-blocking stream and two events
// without timing.
func NewLane(ctx *cuda.Context) (*Lane, error) {
	s, err := ctx.NewStream(true)
	if err != nil {
		return nil, fmt.Errorf("enqueue: lane stream: %w", err)
	}
	in, err := ctx.NewEvent(true)
	if err != nil {
		_ = s.Destroy()
		return nil, fmt.Errorf("enqueue: lane event: %w", err)
	}
	out, err := ctx.NewEvent(true)
	if err != nil {
		_ = in.Destroy()
		_ = s.Destroy()
		return nil, fmt.Errorf("enqueue: lane event: %w", err)
	}
	return &Lane{s: s, in: in, out: out}, nil
}

// Stream returns the lane's own stream.
func (l *Lane) Stream() *cuda.Stream { return l.s }

// Enter makes the lane wait for the work queued on caller so far and
// returns the lane's stream, on which the call's work is then queued.
func (l *Lane) Enter(caller *cuda.Stream) (*cuda.Stream, error) {
	if err := l.in.Record(caller); err != nil {
		return nil, fmt.Errorf("enqueue: lane: recording the caller's stream %#x: %w", caller.Handle(), err)
	}
	if err := l.s.WaitEvent(l.in); err != nil {
		return nil, fmt.Errorf("enqueue: lane: waiting for the caller's stream %#x: %w", caller.Handle(), err)
	}
	return l.s, nil
}

// Leave makes the work queued on caller from now on wait for the work
// queued on the lane so far.
func (l *Lane) Leave(caller *cuda.Stream) error {
	if err := l.out.Record(l.s); err != nil {
		return fmt.Errorf("enqueue: lane: recording the lane: %w", err)
	}
	if err := caller.WaitEvent(l.out); err != nil {
		return fmt.Errorf("enqueue: lane: joining the caller's stream %#x: %w", caller.Handle(), err)
	}
	return nil
}

// LeaveFollowing is Leave for a lane whose work was captured into a CUDA
// graph, the first of a group's lanes to leave caller: caller's capture
// dependencies become the lane's (cuda.Stream.FollowCapture) instead of
// gaining them, as a captured event wait would. The lane entered from
// caller in this group, so everything caller depended on is before the
// lane's work already; without it the default stream of ranks that
// share their GPU would keep every earlier launch among its
// dependencies, and each launch captured after it would depend on all of
// them. The group's other lanes leave with Leave, which adds theirs.
// A driver that cannot follow gets Leave.
func (l *Lane) LeaveFollowing(caller *cuda.Stream) error {
	err := caller.FollowCapture(l.s)
	if errors.Is(err, cuda.ErrNotSupported) {
		return l.Leave(caller)
	}
	if err != nil {
		return fmt.Errorf("enqueue: lane: joining the caller's captured stream %#x: %w", caller.Handle(), err)
	}
	return nil
}

// Close destroys the lane's stream and events; work already queued on the
// lane still runs. The lane must not be used afterwards.
func (l *Lane) Close() error {
	if l == nil {
		return nil
	}
	return errors.Join(l.out.Destroy(), l.in.Destroy(), l.s.Destroy())
}
