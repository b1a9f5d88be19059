package ncclgo

import (
	"errors"
	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/ncclgo/ncclgo/runtime/enqueue"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"testing"
)

func TestGroupMisuse(t *testing.T) {
	c := fakeComm(t, 0, 2)
	s := cuda.WrapStream(nil, 0x100)
	task := collTask(kspace.AllReduce, 1, 2, 1024, Float32, devOp{op: kspace.Sum}, 0)

	g := NewGroup()
	require.NoError(t, g.Start())
	require.NoError(t, g.add("AllReduce", c, s, task))
	require.NoError(t, g.End(), "an inner End launches nothing")
	assert.Len(t, g.calls.entries, 1)
	// A second stream for one comm in one group is refused.
	err := g.add("AllReduce", c, cuda.WrapStream(nil, 0x200), task)
	var ae *ArgError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, "stream", ae.Arg)
	// The outermost End launches: the comm is destroyed, so it fails, and
	// nothing was launched.
	require.NoError(t, c.Destroy())
	assert.ErrorIs(t, g.End(), ErrDestroyed)
	assert.ErrorIs(t, g.End(), ErrInvalidUsage, "End twice")
	assert.ErrorIs(t, g.Start(), ErrInvalidUsage)
	assert.ErrorIs(t, g.add("AllReduce", c, s, task), ErrInvalidUsage, "using an ended group")

	c = fakeComm(t, 0, 2)
	g = NewGroup()
	g.Discard()
	assert.ErrorIs(t, g.End(), ErrInvalidUsage)

	// Comm.Group discards on error.
	sentinel := errors.New("stop")
	err = c.Group(func(g *Group) error {
		require.NoError(t, g.add("AllReduce", c, s, task))
		return sentinel
	})
	assert.ErrorIs(t, err, sentinel)

	// An empty group is fine.
	assert.NoError(t, NewGroup().End())

	// Aborted and destroyed comms refuse calls.
	c.Abort()
	assert.ErrorIs(t, NewGroup().AllReduce(c, 1, 2, 3, Float32, Sum, s), ErrAborted)
	assert.ErrorIs(t, c.Err(), ErrAborted)
	require.NoError(t, c.Destroy())
	assert.ErrorIs(t, NewGroup().AllReduce(c, 1, 2, 3, Float32, Sum, s), ErrDestroyed)
	assert.ErrorIs(t, c.Destroy(), ErrDestroyed)
}

// A group's plan: AllToAll of 4 ranks gives one SendRecv launch and one
// self copy.
func TestGroupPlansAllToAll(t *testing.T) {
	for r := range 4 {
		c := fakeComm(t, r, 4)
		g := NewGroup()
		require.NoError(t, g.add("AllToAll", c, cuda.WrapStream(nil, 1), allToAllTasks(c, 0x10000, 0x20000, 256, Float32)...))
		p, err := c.e.Plan(g.calls.entries[0].tasks)
		require.NoError(t, err)
		require.Len(t, p.Copies, 1)
		assert.EqualValues(t, 0x20000+r*1024, p.Copies[0].Dst)
		assert.EqualValues(t, 0x10000+r*1024, p.Copies[0].Src)
		require.Len(t, p.Launches, 1)
		assert.Len(t, p.Launches[0].Works, 3, "one work per distance")
	}
}

func allToAllTasks(c *Comm, send, recv cuda.DevicePtr, count int, dt DataType) []enqueue.Task {
	bs := cuda.DevicePtr(count * dt.Size())
	var ts []enqueue.Task
	for p := range c.nRanks {
		ts = append(ts, p2pTask(true, send+cuda.DevicePtr(p)*bs, count, dt, p), p2pTask(false, recv+cuda.DevicePtr(p)*bs, count, dt, p))
	}
	return ts
}

// A group's calls go back to the pool cleared, and a later group with
// fewer communicators reuses them (release panicked on entries past the
// later group's).
func TestGroupCallsReuse(t *testing.T) {
	s := cuda.WrapStream(nil, 0x100)
	gc := new(groupCalls)
	for _, n := range []int{8, 1, 3} {
		g := NewGroup()
		g.calls = gc // the pool's object, made sure of
		for r := range n {
			c := fakeComm(t, r, 8)
			require.NoError(t, g.add("AllReduce", c, s, collTask(kspace.AllReduce, 0x1000, 0x2000, 2, Float32, devOp{op: kspace.Sum}, 0)))
			require.NoError(t, g.add("AllReduce", c, s, collTask(kspace.AllReduce, 0x3000, 0x4000, 2, Float32, devOp{op: kspace.Sum}, 0)))
		}
		require.Len(t, gc.entries, n)
		for _, e := range gc.entries {
			require.Len(t, e.tasks, 2)
			assert.EqualValues(t, 0x3000, e.tasks[1].Send)
		}
		g.Discard()
		assert.Nil(t, g.calls)
		assert.Empty(t, gc.entries)
		for _, e := range gc.entries[:cap(gc.entries)] {
			assert.Nil(t, e.comm, "a released entry keeps no communicator")
			assert.Empty(t, e.tasks)
		}
	}
}
