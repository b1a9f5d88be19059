package ncclgo

import (
	"errors"
	"fmt"

	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/ncclgo/ncclgo/runtime/enqueue"
)

// laneState is a rank's lane (runtime/enqueue.Lane): where a rank that
// shares its GPU with another rank of this process launches what it is
// handed on a default stream. Guarded by Comm.mu.
type laneState struct {
	shared  bool          // another rank of this process runs on this GPU
	lane    *enqueue.Lane // made at the first launch that needs it
	entered *cuda.Stream  // the caller's stream of an Enter not yet left
}

// laneFor returns the stream run launches on for the caller's stream: the
// caller's own, or, for a default stream of a rank that shares its GPU
// within the process, the rank's lane entered from it (left by leaveLanes
// once every rank of the group has entered). c.mu is held.
func (c *Comm) laneFor(stream *cuda.Stream) (*cuda.Stream, error) {
	if !c.lanes.shared || !stream.IsDefault() {
		return stream, nil
	}
	if c.lanes.lane == nil {
		l, err := enqueue.NewLane(c.cctx)
		if err != nil {
			return nil, fmt.Errorf("ncclgo: rank %d: %w", c.rank, err)
		}
		c.lanes.lane = l
	}
	s, err := c.lanes.lane.Enter(stream)
	if err != nil {
		return nil, fmt.Errorf("ncclgo: rank %d: %w", c.rank, err)
	}
	c.lanes.entered = stream
	return s, nil
}

// leaveLanes joins each entry's lane back to the caller's stream: after
// every rank of the group has entered its lane, so that no rank's Enter
// on a shared stream comes after another's Leave.
func leaveLanes(entries []*groupEntry) error {
	var errs []error
	for _, e := range entries {
		c := e.comm
		c.mu.Lock()
		if s := c.lanes.entered; s != nil {
			c.lanes.entered = nil
			if err := c.lanes.lane.Leave(s); err != nil {
				errs = append(errs, fmt.Errorf("ncclgo: rank %d: %w", c.rank, err))
			}
		}
		c.mu.Unlock()
	}
	return errors.Join(errs...)
}

// closeLane destroys the lane (free).
func (c *Comm) closeLane() error {
	l := c.lanes.lane
	c.lanes.lane, c.lanes.entered = nil, nil
	return l.Close()
}
