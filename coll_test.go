package ncclgo

import (
	"errors"
	"fmt"
	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/ncclgo/ncclgo/runtime/enqueue"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"math"
	"testing"
)

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
