package comm

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/runtime/bootstrap"
	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/ncclgo/ncclgo/runtime/topo"
	"github.com/ncclgo/ncclgo/runtime/transport"
)

func TestDirectEligible(t *testing.T) {
	proc := func(pid int, devs ...int) []transport.Peer {
		var ps []transport.Peer
		for _, d := range devs {
			ps = append(ps, transport.Peer{PID: pid, Host: "h", Device: d, BusID: string(rune('a' + d))})
		}
		return ps
	}
	layout := func(ps []transport.Peer, link topo.Link) topo.Layout {
		devs := make([]int, len(ps))
		for i, p := range ps {
			devs[i] = p.Device
		}
		l := topo.NewLayout(devs)
		require.NoError(t, l.ProbePeers(func(a, b int) (bool, error) { return link == topo.LinkPeer, nil }))
		return l
	}
	oneGPU := proc(1, 0, 0, 0, 0)
	assert.True(t, directEligible(oneGPU, layout(oneGPU, topo.LinkNone), false), "ranks of one process on one GPU")
	assert.True(t, directEligible(oneGPU, layout(oneGPU, topo.LinkNone), true), "NCCL_P2P_DISABLE leaves one GPU alone")
	twoGPUs := proc(1, 0, 1)
	assert.True(t, directEligible(twoGPUs, layout(twoGPUs, topo.LinkPeer), false), "peer access")
	assert.False(t, directEligible(twoGPUs, layout(twoGPUs, topo.LinkNone), false), "no peer access")
	assert.False(t, directEligible(twoGPUs, layout(twoGPUs, topo.LinkPeer), true), "NCCL_P2P_DISABLE")
	twoProcs := append(proc(1, 0), proc(2, 0)...)
	assert.False(t, directEligible(twoProcs, layout(twoProcs, topo.LinkNone), false), "processes under MPS: no plain pointers")
	one := proc(1, 0)
	assert.False(t, directEligible(one, layout(one, topo.LinkNone), false), "one rank")
	many := proc(1, make([]int, generated.DirectMaxRanks+1)...)
	assert.False(t, directEligible(many, layout(many, topo.LinkNone), false), "more ranks than the kernel keeps pointers for")
	most := proc(1, make([]int, generated.DirectMaxRanks)...)
	assert.True(t, directEligible(most, layout(most, topo.LinkNone), false))

	// Across processes: on windows, where the memory reaches.
	assert.True(t, directAcross(twoProcs, layout(twoProcs, topo.LinkNone), false), "processes under MPS on one GPU")
	assert.True(t, directCandidate(twoProcs))
	assert.False(t, directAcross(oneGPU, layout(oneGPU, topo.LinkNone), false), "one process needs no windows")
	assert.False(t, directCandidate(oneGPU))
	twoProcGPUs := append(proc(1, 0), proc(2, 1)...)
	assert.True(t, directAcross(twoProcGPUs, layout(twoProcGPUs, topo.LinkPeer), false), "NVLink peers")
	assert.False(t, directAcross(twoProcGPUs, layout(twoProcGPUs, topo.LinkNone), false), "no peer access")
	assert.False(t, directAcross(twoProcGPUs, layout(twoProcGPUs, topo.LinkPeer), true), "NCCL_P2P_DISABLE")
}

func TestExchangeDirect(t *testing.T) {
	const n = 3
	nets := bootstrap.NewInProcess(n)
	tables := make([][]uint64, n)
	handles := make([][]cuda.IpcMemHandle, n)
	oks := make([]bool, n)
	errs := make(chan error, n)
	for r := range n {
		go func() {
			var err error
			h := cuda.IpcMemHandle{byte(r + 1)}
			tables[r], handles[r], oks[r], err = exchangeDirect(context.Background(), nets[r], uint64(0x1000*(r+1)), r != 2, h)
			errs <- err
		}()
	}
	for range n {
		require.NoError(t, <-errs)
	}
	for r := range n {
		assert.Equal(t, []uint64{0x1000, 0x2000, 0x3000}, tables[r])
		assert.Equal(t, byte(2), handles[r][1][0], "rank 1's handle")
		assert.False(t, oks[r], "rank 2 said no: every rank sees it")
	}
}

// The mailbox area holds what devicesrc/direct.h addresses: the slots of
// every channel, then per channel two LL buffers of DirectLlBytes/8 lines
// of 16 bytes (ngDirectLLBuf: slots + (channel*2 + parity) * lines * 16).
func TestDirectMailboxLayout(t *testing.T) {
	const slot = 128
	lines := uint64(generated.DirectLlBytes / 8)
	end := func(channel, parity uint64) uint64 {
		return generated.MaxChannels*slot + (channel*2+parity+1)*lines*16
	}
	assert.Equal(t, end(generated.MaxChannels-1, 1), directSlotsBytes, "the last channel's odd buffer ends the area")
	assert.Zero(t, (generated.MaxChannels*slot)%16, "lines are 16-byte aligned")
	assert.LessOrEqual(t, generated.DirectLlBytes, generated.DirectOneshotBytes, "the LL one-shot takes the smallest shares")
	assert.Equal(t, 0, generated.DirectLlBytes%8)
}
