package comm

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/ncclgo/ncclgo/runtime/enqueue"
)

// A Send whose whole message lies in a window with a row gets that row + 1
// in SendWin and keeps the communicator's tuner (Choose nil); a Recv, a
// Send past its window, an empty Send and a Send outside every window get
// nothing. Planned, the Send's works carry WorkP2pSendWin and the row.
func TestMarkWindowsSendRecv(t *testing.T) {
	es, _ := windowEngines(t, 2, []int{1, 2})
	defer destroyAll(t, es...)
	// Row 0: an unrelated window; row 1: the buffers.
	_, errs := register(es, func(r int) cuda.DevicePtr { return fakeBase(r) + 0x100 }, func(int) uint64 { return 256 })
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	base := func(r int) cuda.DevicePtr { return fakeBase(r) + 0x10000 }
	_, errs = register(es, base, func(int) uint64 { return 1 << 16 })
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	b := uint64(base(0))
	tasks := []enqueue.Task{
		{Coll: kspace.SendRecv, Send: b + 64, Bytes: 4096, Type: kspace.U8, Peer: 1, IsSend: true},
		{Coll: kspace.SendRecv, Recv: b, Bytes: 4096, Type: kspace.U8, Peer: 1},
		{Coll: kspace.SendRecv, Send: b + (1 << 16) - 64, Bytes: 65, Type: kspace.U8, Peer: 1, IsSend: true},
		{Coll: kspace.SendRecv, Send: b, Bytes: 0, Type: kspace.U8, Peer: 1, IsSend: true},
		{Coll: kspace.SendRecv, Send: 0x1000, Bytes: 64, Type: kspace.U8, Peer: 1, IsSend: true},
	}
	marked := es[0].markWindows(tasks)
	assert.Zero(t, tasks[0].SendWin, "the caller's tasks stay as they are")
	assert.Equal(t, int32(2), marked[0].SendWin, "row 1")
	assert.Nil(t, marked[0].Choose, "a Send keeps the communicator's tuner")
	assert.Zero(t, marked[1].SendWin+marked[1].RecvWin, "a Recv needs no window")
	assert.Zero(t, marked[2].SendWin, "past the window's end")
	assert.Zero(t, marked[3].SendWin, "empty")
	assert.Zero(t, marked[4].SendWin, "in no window")

	p, err := es[0].Plan(tasks[:2])
	require.NoError(t, err)
	require.Len(t, p.Launches, 1)
	for i, w := range p.Launches[0].Works {
		require.GreaterOrEqual(t, w.SendPeer, int32(0), "work %d", i)
		assert.Equal(t, uint8(generated.WorkP2pSendWin), w.Flags&generated.WorkP2pSendWin, "work %d", i)
		assert.Equal(t, int32(1), w.Root, "work %d: the row", i)
	}
}
