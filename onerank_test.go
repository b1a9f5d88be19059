package ncclgo

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/internal/benchguard"
	"github.com/ncclgo/ncclgo/runtime/comm"
	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// oneRankCalls are a one-rank communicator's collectives that are a copy
// (out of place) or nothing (in place): every one but a scaling one.
func oneRankCalls(c *Comm, s *cuda.Stream, send, recv cuda.DevicePtr) map[string]func() error {
	return map[string]func() error{
		"AllReduce Sum":  func() error { return c.AllReduce(send, recv, 2, Float32, Sum, s) },
		"AllReduce Prod": func() error { return c.AllReduce(send, recv, 2, Float32, Prod, s) },
		"AllReduce Min":  func() error { return c.AllReduce(send, recv, 2, Int32, Min, s) },
		"AllReduce Max":  func() error { return c.AllReduce(send, recv, 2, Float64, Max, s) },
		"AllReduce Avg":  func() error { return c.AllReduce(send, recv, 2, Int32, Avg, s) }, // integer: divided by 1
		"Reduce":         func() error { return c.Reduce(send, recv, 2, Float32, Sum, 0, s) },
		"ReduceScatter":  func() error { return c.ReduceScatter(send, recv, 2, Float32, Sum, s) },
		"AllGather":      func() error { return c.AllGather(send, recv, 2, Float32, s) },
		"Broadcast":      func() error { return c.Broadcast(send, recv, 2, Float32, 0, s) },
		"one-call Group": func() error {
			return c.Group(func(g *Group) error { return g.AllReduce(c, send, recv, 2, Float32, Sum, s) })
		},
	}
}

// TestOneRankCallsAllocateNothing: a one-rank collective outside a group
// that is a copy (out of place, under UntrackedOneRankCopies, as the C
// ABI's communicators have it) or nothing (in place) is not planned
// (Engine.RunOneRankCopy) and allocates nothing. It planned into a fresh
// plan before, whose copy was one allocation.
func TestOneRankCallsAllocateNothing(t *testing.T) {
	if benchguard.RaceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, untracked := range []bool{true, false} {
		c := newComm(comm.NewHostOnly(nil, 0, 1, 0, comm.Settings{UntrackedOneRankCopies: untracked}, hostTuner(t, 1)))
		s := cuda.WrapStream(new(cuda.Context), 0x100)
		for _, inPlace := range []bool{true, false} {
			if !inPlace && !untracked {
				continue // a tracked copy is planned: run records its completion
			}
			recv := cuda.DevicePtr(0x2000)
			if inPlace {
				recv = 0x1000
			}
			for name, call := range oneRankCalls(c, s, 0x1000, recv) {
				require.NoError(t, call(), name)
				want := 0.0
				if name == "one-call Group" {
					want = 1 // the group itself
				}
				assert.Equal(t, want, testing.AllocsPerRun(100, func() { _ = call() }), "%s (in place %v, untracked %v)", name, inPlace, untracked)
			}
		}
	}
}
