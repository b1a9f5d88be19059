package ncclgo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"testing"

	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/config"
	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/ncclgo/ncclgo/runtime/enqueue"
	"github.com/ncclgo/ncclgo/runtime/graph"
	"github.com/ncclgo/ncclgo/runtime/topo"
	"github.com/ncclgo/ncclgo/runtime/transport"
	"github.com/ncclgo/ncclgo/runtime/tune"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestInitAllWithoutDriver(t *testing.T) {
	if cuda.Init() == nil {
		t.Skip("a CUDA driver is present: this test covers machines without one")
	}
	_, err := InitAll(context.Background(), []int{0, 0}, nil)
	require.Error(t, err)
	assert.True(t, errors.Is(err, cuda.ErrNoDriver), "%v", err)
	_, err = InitRank(context.Background(), 2, UniqueID{}, 0, 0, nil)
	assert.True(t, errors.Is(err, cuda.ErrNoDriver), "%v", err)
}

func TestInitArgs(t *testing.T) {
	_, err := InitAll(context.Background(), nil, nil)
	assert.ErrorIs(t, err, ErrInvalidArgument)
	_, err = InitRank(context.Background(), 0, UniqueID{}, 0, 0, nil)
	var ae *ArgError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, "nRanks", ae.Arg)
	_, err = InitRank(context.Background(), 4, UniqueID{}, 4, 0, nil)
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, "rank", ae.Arg)
	assert.Contains(t, err.Error(), "rank=4: want 0..3")
	_, err = InitRank(context.Background(), 4, UniqueID{}, 1, -1, nil)
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, "device", ae.Arg)
	_, err = InitAll(context.Background(), []int{0}, &Options{P2PChannelsPerPeer: -1})
	if cuda.Init() == nil {
		assert.ErrorIs(t, err, ErrInvalidArgument)
	}
}

func TestOptionsOverrideEnv(t *testing.T) {
	t.Setenv("NCCL_NCHANNELS", "4")
	t.Setenv("NCCL_DEBUG", "INFO")
	s, err := (&Options{Overrides: config.Overrides{NChannels: new(2)}, Logger: slog.New(slog.DiscardHandler)}).resolve()
	require.NoError(t, err)
	assert.Equal(t, 2, s.cfg.NChannels)
	assert.Equal(t, config.DebugInfo, s.cfg.Debug)
	assert.Equal(t, 2, s.p2pPerPeer)
	s, err = (*Options)(nil).resolve()
	require.NoError(t, err)
	assert.Equal(t, 4, s.cfg.NChannels)
	_, err = (&Options{Overrides: config.Overrides{Algo: new("NOPE")}}).resolve()
	assert.ErrorIs(t, err, config.ErrInvalid)
}

func TestScalarBits(t *testing.T) {
	cases := []struct {
		v    float64
		t    DataType
		want uint64
	}{
		{1, Float16, 0x3c00}, {0.25, Float16, 0x3400}, {-2, Float16, 0xc000}, {65504, Float16, 0x7bff},
		{1e6, Float16, 0x7c00}, {math.Ldexp(1, -24), Float16, 0x0001}, {1.0 / 3, Float16, 0x3555},
		{0.5, Float16, 0x3800}, {0, Float16, 0}, {math.Ldexp(1, -14), Float16, 0x0400},
		{1, Bfloat16, 0x3f80}, {1.0 / 3, Bfloat16, 0x3eab}, {-1, Bfloat16, 0xbf80},
		{1, Float8e4m3, 0x38}, {448, Float8e4m3, 0x7e}, {1000, Float8e4m3, 0x7e}, {0.5, Float8e4m3, 0x30},
		{math.Ldexp(1, -9), Float8e4m3, 0x01}, {-1, Float8e4m3, 0xb8},
		{1, Float8e5m2, 0x3c}, {57344, Float8e5m2, 0x7b}, {1e6, Float8e5m2, 0x7b}, {-1e6, Float16, 0xfc00}, {math.Inf(1), Float8e4m3, 0x7e}, {0.25, Float8e5m2, 0x34},
		{0.125, Float32, uint64(math.Float32bits(0.125))}, {0.1, Float64, math.Float64bits(0.1)},
		{3, Int32, 3}, {-1, Int8, 0xff}, {7, Uint64, 7},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, scalarBits(c.v, c.t), "%v as %s", c.v, c.t)
	}
}

func TestDataTypes(t *testing.T) {
	assert.Equal(t, 4, Float32.Size())
	assert.Equal(t, 2, Bfloat16.Size())
	assert.Equal(t, 1, Float8e5m2.Size())
	assert.Equal(t, 0, DataType(12).Size())
	assert.Equal(t, "Float32", Float.String())
	assert.Equal(t, 11, int(Float8e5m2))
	assert.Equal(t, 4, int(Avg))
	assert.Equal(t, "PreMulSum#0", NumRedOps.String())
}

// fakeComm is a communicator with no device, for validation and planning.
func fakeComm(t *testing.T, rank, n int) *Comm {
	t.Helper()
	tn, err := tune.New(tune.Topology{NRanks: n, RanksPerGPU: n, SMCount: 132, BlocksPerSM: 1, IntraBW: 20, NChannels: 8}, config.Default(), nil)
	require.NoError(t, err)
	c := &Comm{rank: rank, nRanks: n, device: 0, tuner: tn, nChannels: tn.MaxChannels(),
		events: map[uintptr]*cuda.Event{}, userOps: map[RedOp]devOp{}, userTypes: map[RedOp]DataType{}, nextOp: NumRedOps,
		log: slog.New(slog.DiscardHandler)}
	c.plan = enqueue.Comm{Rank: rank, NRanks: n, NChannels: c.nChannels, P2PChannelsPerPeer: 2}
	return c
}

func TestArgumentValidation(t *testing.T) {
	c := fakeComm(t, 1, 4)
	noCtx := cuda.WrapStream(nil, 0)
	g := NewGroup()
	check := func(err error, arg, want string) {
		t.Helper()
		var ae *ArgError
		require.ErrorAs(t, err, &ae)
		assert.ErrorIs(t, err, ErrInvalidArgument)
		assert.Equal(t, arg, ae.Arg, "%v", err)
		assert.Contains(t, err.Error(), want)
	}
	check(g.AllReduce(c, 1, 2, -1, Float32, Sum, noCtx), "count", "count=-1: want a count >= 0")
	check(g.AllReduce(c, 1, 2, 10, DataType(42), Sum, noCtx), "datatype", "datatype=42")
	check(g.AllReduce(c, 0, 2, 10, Float32, Sum, noCtx), "sendbuff", "null")
	check(g.AllReduce(c, 1, 0, 10, Float32, Sum, noCtx), "recvbuff", "null")
	check(g.AllReduce(c, 1, 2, 10, Float32, RedOp(9), noCtx), "op", "PreMulSum")
	check(g.AllReduce(c, 1, 2, 10, Float32, Sum, nil), "stream", "stream=nil")
	check(g.AllReduce(c, 1, 2, 10, Float32, Sum, noCtx), "stream", "without context")
	check(g.AllReduce(c, 1, 2, math.MaxInt64/2, Float32, Sum, noCtx), "count", "fit in int64")
	check(g.Reduce(c, 1, 0, 10, Float32, Max, 7, noCtx), "root", "root=7: want a rank in 0..3")
	check(g.Broadcast(c, 0, 2, 10, Int8, -1, noCtx), "root", "root=-1")
	check(g.Send(c, 1, 10, Float32, 4, noCtx), "peer", "peer=4")
	check(g.Recv(c, 0, 10, Float32, 0, noCtx), "buff", "null")
	check(g.AllGather(c, 1, 2, -5, Float32, noCtx), "sendcount", "sendcount=-5")
	check(g.ReduceScatter(c, 1, 2, math.MaxInt64/8, Float64, Sum, noCtx), "count", "fit in int64")
	check(g.Gather(c, 1, 0, 10, Float32, 9, noCtx), "root", "root=9")
	check(g.Scatter(c, 0, 1, 10, Float32, 1, noCtx), "sendbuff", "null") // rank 1 is the root
	check(g.AllToAll(c, 1, 0, 10, Float32, noCtx), "recvbuff", "null")
	// Null buffers are fine with count 0, and a non-root Reduce needs no recvbuff.
	check(g.AllReduce(c, 0, 0, 0, Float32, Sum, noCtx), "stream", "without context")
	check(g.Reduce(c, 1, 0, 10, Float32, Sum, 0, noCtx), "stream", "without context")

	_, err := c.NewPreMulSum("x", Float32)
	check(err, "scalar", "string")
	op, err := c.NewPreMulSum(0.5, Float16)
	require.NoError(t, err)
	assert.Equal(t, NumRedOps, op)
	check(g.AllReduce(c, 1, 2, 10, Float32, op, noCtx), "op", "made for Float16")
	require.NoError(t, c.DestroyRedOp(op))
	check(c.DestroyRedOp(op), "op", "PreMulSum")
	check(g.AllReduce(c, 1, 2, 10, Float16, op, noCtx), "op", "PreMulSum")

	var nilComm *Comm
	check(g.AllReduce(nilComm, 1, 2, 10, Float32, Sum, noCtx), "comm", "nil")
}

func TestRedOpMapping(t *testing.T) {
	c := fakeComm(t, 0, 4)
	k := &checker{op: "x", c: c}
	assert.Equal(t, devOp{op: kspace.Sum}, k.redOp(Sum, Float32))
	assert.Equal(t, devOp{op: kspace.MinMax, arg: 1 << 63}, k.redOp(Max, Int32))
	assert.Equal(t, devOp{op: kspace.MinMax, arg: 1<<63 | 1}, k.redOp(Min, Int64))
	assert.Equal(t, devOp{op: kspace.MinMax, arg: 1}, k.redOp(Min, Uint32))
	assert.Equal(t, devOp{op: kspace.MinMax, arg: 0}, k.redOp(Max, Float16))
	assert.Equal(t, devOp{op: kspace.PreMulSum, arg: uint64(math.Float32bits(0.25))}, k.redOp(Avg, Float32))
	assert.Equal(t, devOp{op: kspace.PreMulSum, arg: 0x3400}, k.redOp(Avg, Float16))
	assert.Equal(t, devOp{op: kspace.SumPostDiv, arg: 1<<63 | 4}, k.redOp(Avg, Int64))
	assert.Equal(t, devOp{op: kspace.SumPostDiv, arg: 4}, k.redOp(Avg, Uint8))
	op, err := c.NewPreMulSum(cuda.DevicePtr(0x1234), Float64)
	require.NoError(t, err)
	assert.Equal(t, devOp{op: kspace.PreMulSum, arg: 0x1234, isPtr: true}, k.redOp(op, Float64))
	require.NoError(t, k.err)
	task := collTask(kspace.AllReduce, 1, 2, 3, Float64, k.redOp(op, Float64), 0)
	assert.True(t, task.OpArgPtr)
}

func TestGroupMisuse(t *testing.T) {
	c := fakeComm(t, 0, 2)
	s := cuda.WrapStream(nil, 0x100)
	task := collTask(kspace.AllReduce, 1, 2, 1024, Float32, devOp{op: kspace.Sum}, 0)

	g := NewGroup()
	require.NoError(t, g.Start())
	require.NoError(t, g.add("AllReduce", c, s, task))
	require.NoError(t, g.End(), "an inner End launches nothing")
	assert.Len(t, g.entries, 1)
	// A second stream for one comm in one group is refused.
	err := g.add("AllReduce", c, cuda.WrapStream(nil, 0x200), task)
	var ae *ArgError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, "stream", ae.Arg)
	// The outermost End launches: the comm is destroyed, so it fails, and
	// nothing was launched.
	c.destroyed = true
	assert.ErrorIs(t, g.End(), ErrDestroyed)
	assert.ErrorIs(t, g.End(), ErrInvalidUsage, "End twice")
	assert.ErrorIs(t, g.Start(), ErrInvalidUsage)
	assert.ErrorIs(t, g.add("AllReduce", c, s, task), ErrInvalidUsage, "using an ended group")

	c.destroyed = false
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
	c.aborted.Store(true)
	assert.ErrorIs(t, NewGroup().AllReduce(c, 1, 2, 3, Float32, Sum, s), ErrAborted)
	assert.ErrorIs(t, c.Err(), ErrAborted)
	c.aborted.Store(false)
	c.destroyed = true
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
		p, err := enqueue.Build(c.plan, g.entries[0].tasks, c.tuner, enqueue.GeneratedLookup)
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

// Every connection one rank expects is expected by its peer too.
func TestEdgesAgree(t *testing.T) {
	for _, devs := range [][]int{{0, 0}, {0, 0, 0, 0}, {0, 1, 0, 1, 2}, {0, 0, 0, 0, 0, 0, 0, 0}} {
		n := len(devs)
		for _, nch := range []int{1, 3, 16} {
			t.Run(fmt.Sprintf("%v/%dch", devs, nch), func(t *testing.T) {
				l := topo.NewLayout(devs)
				rings := graph.Rings(l, nch)
				trees := graph.Trees(n, nch)
				set := map[transport.Edge]int{}
				for r := range n {
					for _, e := range edges(enqueue.Comm{Rank: r, NRanks: n, NChannels: nch, P2PChannelsPerPeer: 2}, rings, trees) {
						set[e]++
						assert.True(t, e.From == r || e.To == r)
					}
				}
				for e, k := range set {
					assert.Equal(t, 2, k, "edge %v is known to both ends", e)
				}
				// Every ring, tree and p2p neighbour is connected.
				for r := range n {
					for ch := range nch {
						_, next, _, _ := graph.RingView(rings[ch], r)
						if next != r {
							assert.Contains(t, set, transport.Edge{Channel: ch, From: r, To: next})
						}
						if up := trees[ch].Up[r]; up >= 0 {
							assert.Contains(t, set, transport.Edge{Channel: ch, From: up, To: r})
							assert.Contains(t, set, transport.Edge{Channel: ch, From: r, To: up})
						}
					}
					for d := 1; d < n; d++ {
						pc := enqueue.Comm{Rank: r, NRanks: n, NChannels: nch, P2PChannelsPerPeer: 2}
						for j := range 4 {
							assert.Contains(t, set, transport.Edge{Channel: enqueue.P2PChannel(pc, d, j), From: r, To: (r + d) % n})
						}
					}
				}
			})
		}
	}
}

func TestDeviceErrors(t *testing.T) {
	e := &DeviceError{Rank: 3, Code: 1}
	assert.ErrorIs(t, e, ErrUnsupported)
	assert.Contains(t, e.Error(), "rank 3")
	assert.ErrorIs(t, &DeviceError{Code: 2}, ErrAborted)
	assert.ErrorIs(t, &DeviceError{Code: 3}, ErrDevice)
}

// TestAvgByteTypesManyRanks: the device divides in the element type, so
// Avg of 1-byte integers over more ranks than the type holds is refused.
func TestAvgByteTypesManyRanks(t *testing.T) {
	for _, c := range []struct {
		n  int
		dt DataType
		ok bool
	}{{127, Int8, true}, {128, Int8, false}, {255, Uint8, true}, {256, Uint8, false}, {1000, Int32, true}} {
		k := &checker{op: "AllReduce", c: &Comm{nRanks: c.n}}
		k.redOp(Avg, c.dt)
		if c.ok {
			assert.NoError(t, k.err, "%d ranks %s", c.n, c.dt)
			continue
		}
		require.Error(t, k.err, "%d ranks %s", c.n, c.dt)
		assert.ErrorIs(t, k.err, ErrInvalidArgument)
		assert.Contains(t, k.err.Error(), "Avg")
	}
}

// blockTasks gives the per-peer blocks that AllToAll, Gather and Scatter
// queue: block p of the buffer goes to (or comes from) rank p.
func TestBlockTasks(t *testing.T) {
	c := &Comm{nRanks: 4}
	sends, recvs := blockTasks(true, 0x10000, 256, Float32, 4), blockTasks(false, 0x20000, 256, Float32, 4)
	var interleaved []enqueue.Task
	for p := range 4 {
		interleaved = append(interleaved, sends[p], recvs[p])
	}
	assert.Equal(t, allToAllTasks(c, 0x10000, 0x20000, 256, Float32), interleaved)
	assert.Equal(t, uint64(0x10000+3*1024), sends[3].Send)
	assert.Equal(t, 3, recvs[3].Peer)
}

// TestRootedBuffers: Gather's recvbuff and Scatter's sendbuff are checked
// on the root only; the other buffer on every rank; a bad root comes first.
// AllGather and AllToAll check both buffers on every rank.
func TestRootedBuffers(t *testing.T) {
	c := fakeComm(t, 1, 4)
	s := cuda.WrapStream(nil, 0)
	argOf := func(err error) string {
		var ae *ArgError
		if errors.As(err, &ae) {
			return ae.Arg
		}
		return fmt.Sprint(err)
	}
	for _, tc := range []struct {
		gather     bool
		send, recv cuda.DevicePtr
		root       int
		want       string
	}{
		{true, 0, 0, 0, "sendbuff"}, {true, 1, 0, 0, "stream"}, {true, 1, 0, 1, "recvbuff"}, {true, 1, 0, 7, "root"},
		{false, 0, 0, 0, "recvbuff"}, {false, 0, 1, 0, "stream"}, {false, 0, 1, 1, "sendbuff"}, {false, 0, 0, 1, "sendbuff"},
		{false, 0, 0, -1, "root"},
	} {
		g := NewGroup()
		var err error
		if tc.gather {
			err = g.Gather(c, tc.send, tc.recv, 8, Float32, tc.root, s)
		} else {
			err = g.Scatter(c, tc.send, tc.recv, 8, Float32, tc.root, s)
		}
		assert.Equal(t, tc.want, argOf(err), "%+v", tc)
	}
	g := NewGroup()
	assert.Equal(t, "sendcount", argOf(g.AllGather(c, 0, 0, -1, Float32, s)))
	assert.Equal(t, "recvbuff", argOf(g.AllGather(c, 1, 0, 8, Float32, s)))
	assert.Equal(t, "stream", argOf(g.AllGather(c, 1, 1, 8, Float32, s)))
	assert.Equal(t, "count", argOf(g.AllToAll(c, 0, 0, -1, Float32, s)))
	assert.Equal(t, "sendbuff", argOf(g.AllToAll(c, 0, 0, 8, Float32, s)))
	assert.Equal(t, "datatype", argOf(g.AllToAll(c, 0, 0, 8, DataType(99), s)))
}
