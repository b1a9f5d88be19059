package comm

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/bootstrap"
	"github.com/ncclgo/ncclgo/runtime/config"
	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/ncclgo/ncclgo/runtime/enqueue"
	"github.com/ncclgo/ncclgo/runtime/topo"
	"github.com/ncclgo/ncclgo/runtime/transport"
	"github.com/ncclgo/ncclgo/runtime/tune"
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

// acrossEngines returns n device-less ranks, each in a process of its
// own, whose tuners are what setup.go builds where setupDirect shared the
// mailboxes across processes (across true on every rank), under env.
func acrossEngines(t *testing.T, n int, env map[string]string) []*Engine {
	t.Helper()
	pids := make([]int, n)
	for r := range pids {
		pids[r] = 100 + r
	}
	es, _ := windowEngines(t, n, pids)
	cfg, err := config.FromEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	require.NoError(t, err)
	tp := tune.Topology{NRanks: n, NNodes: 1, NGPUs: 1, RanksPerGPU: n, SMCount: 132, BlocksPerSM: 1, IntraBW: 20, NChannels: 8}
	for _, e := range es {
		ltp := llAcrossTopology(tp, true)
		require.True(t, ltp.DirectLLAcross)
		e.tuner, err = tune.New(ltp, cfg, nil)
		require.NoError(t, err)
		wtp := ltp
		wtp.Direct = true
		e.winTuner, err = tune.New(wtp, cfg, nil)
		require.NoError(t, err)
	}
	return es
}

// Across processes a small AllReduce on buffers in no window runs DIRECT
// (its LL one-shot) with works that carry no window: every rank plans the
// same functions, channels and threads whatever its buffers (addresses of
// its own; one rank's in a window, whose works alone name it); above the
// LL one-shot's sizes such a call runs another algorithm.
func TestDirectLLAcrossPlan(t *testing.T) {
	const n = 3
	es := acrossEngines(t, n, nil)
	t.Cleanup(func() { destroyAll(t, es...) })
	// Rank 1's buffer at 0x80000 of its allocation is a window.
	ws, errs := register(es, func(r int) cuda.DevicePtr { return fakeBase(r) + 0x80000 }, func(int) uint64 { return 0x10000 })
	for r := range n {
		require.NoError(t, errs[r])
		require.Equal(t, 0, ws[r].Row())
	}
	lim := es[0].tuner.DirectLLLimit()
	require.Equal(t, int64(4*generated.DirectLlBytes), lim)
	for _, b := range []uint64{8, 64, generated.DirectLlBytes, generated.DirectLlBytes + 8, uint64(lim)} {
		plans := make([]enqueue.Plan, n)
		for r, e := range es {
			buf := uint64(fakeBase(r)) + 0x1000*uint64(r+1) // in no window
			if r == 1 {
				buf = uint64(fakeBase(r)) + 0x80000
			}
			var err error
			plans[r], err = e.Plan([]enqueue.Task{{Coll: kspace.AllReduce, Send: buf, Recv: buf, Bytes: b, Type: kspace.F32, Op: kspace.Sum}})
			require.NoError(t, err, "rank %d, %d bytes", r, b)
		}
		for r, p := range plans {
			require.Len(t, p.Decisions, 1)
			ch := p.Decisions[0].Choice
			require.Equal(t, kspace.Direct, ch.Algo, "rank %d, %d bytes: %v", r, b, ch)
			assert.Equal(t, plans[0].Decisions[0], p.Decisions[0], "rank %d, %d bytes: as rank 0", r, b)
			require.Len(t, p.Launches, 1)
			l := p.Launches[0]
			assert.Equal(t, kspace.Direct, l.Func.Algo)
			assert.Equal(t, plans[0].Launches[0].NThreads, l.NThreads, "rank %d, %d bytes", r, b)
			assert.Equal(t, plans[0].Launches[0].ChannelMask, l.ChannelMask, "rank %d, %d bytes", r, b)
			for _, w := range l.Works {
				// Every channel's share is an LL one-shot's.
				assert.LessOrEqual(t, w.ChanCount*4, uint64(generated.DirectLlBytes), "rank %d, %d bytes", r, b)
				if r == 1 {
					assert.NotZero(t, w.Flags&generated.WorkDirectWin, "rank 1's buffers lie in a window")
					continue
				}
				assert.Zero(t, w.Flags&generated.WorkDirectWin, "rank %d, %d bytes: no window", r, b)
				assert.Equal(t, [2]int32{-1, -1}, [2]int32{w.SendPeer, w.RecvPeer})
			}
		}
	}
	for _, b := range []uint64{uint64(lim) + 16, 64 << 10, 1 << 20} {
		p, err := es[0].Plan([]enqueue.Task{{Coll: kspace.AllReduce, Send: 0x1000, Recv: 0x1000, Bytes: b, Type: kspace.F32, Op: kspace.Sum}})
		require.NoError(t, err)
		assert.NotEqual(t, kspace.Direct, p.Decisions[0].Choice.Algo, "%d bytes", b)
	}
	// The other collectives need the peers' buffers: not without windows.
	p, err := es[0].Plan([]enqueue.Task{{Coll: kspace.AllGather, Send: 0x1000, Recv: 0x2000, Bytes: 8, Type: kspace.F32}})
	require.NoError(t, err)
	assert.NotEqual(t, kspace.Direct, p.Decisions[0].Choice.Algo)
}

// NCCL_ALGO=direct across processes without windows: the LL
// one-shot's sizes run; a larger call is an error naming its size and the
// limit, on every rank alike, and one on windows still runs DIRECT.
func TestDirectLLAcrossForcedPlan(t *testing.T) {
	const n = 2
	es := acrossEngines(t, n, map[string]string{"NCCL_ALGO": "direct"})
	t.Cleanup(func() { destroyAll(t, es...) })
	ws, errs := register(es, func(r int) cuda.DevicePtr { return fakeBase(r) + 0x80000 }, func(int) uint64 { return 1 << 19 })
	for r := range n {
		require.NoError(t, errs[r])
		require.Equal(t, 0, ws[r].Row())
	}
	for r, e := range es {
		p, err := e.Plan([]enqueue.Task{{Coll: kspace.AllReduce, Send: 0x1000, Recv: 0x1000, Bytes: 8, Type: kspace.F32, Op: kspace.Sum}})
		require.NoError(t, err)
		assert.Equal(t, kspace.Direct, p.Decisions[0].Choice.Algo)
		_, err = e.Plan([]enqueue.Task{{Coll: kspace.AllReduce, Send: 0x1000, Recv: 0x1000, Bytes: 1 << 20, Type: kspace.F32, Op: kspace.Sum}})
		require.Error(t, err, "rank %d", r)
		assert.ErrorIs(t, err, tune.ErrNoChoice)
		assert.ErrorIs(t, err, tune.ErrDirectLLOnly)
		assert.Contains(t, err.Error(), "AllReduce of 1048576 bytes")
		assert.Contains(t, err.Error(), "up to 16384 bytes")
		assert.Contains(t, err.Error(), fmt.Sprintf("rank %d", r))
		win := uint64(fakeBase(r)) + 0x80000
		p, err = e.Plan([]enqueue.Task{{Coll: kspace.AllReduce, Send: win, Recv: win, Bytes: 1 << 19, Type: kspace.F32, Op: kspace.Sum}})
		require.NoError(t, err, "rank %d: on a window", r)
		assert.Equal(t, kspace.Direct, p.Decisions[0].Choice.Algo)
		assert.NotZero(t, p.Launches[0].Works[0].Flags&generated.WorkDirectWin)
		// Forced for a collective that needs the peers' buffers: the
		// error says where DIRECT runs across processes.
		_, err = e.Plan([]enqueue.Task{{Coll: kspace.AllGather, Send: 0x1000, Recv: 0x2000, Bytes: 8, Type: kspace.F32}})
		require.Error(t, err, "rank %d", r)
		assert.Contains(t, err.Error(), "registered windows")
	}
}

// llAcrossTopology turns the LL one-shot on only where setupDirect shared
// the mailboxes across processes; within one process DIRECT runs whole.
func TestLLAcrossTopology(t *testing.T) {
	tp := tune.Topology{NRanks: 2}
	assert.True(t, llAcrossTopology(tp, true).DirectLLAcross)
	assert.False(t, llAcrossTopology(tp, false).DirectLLAcross)
	tp.Direct = true
	assert.False(t, llAcrossTopology(tp, true).DirectLLAcross, "one process: Direct already allows all")
}
