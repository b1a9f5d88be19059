package enqueue

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/config"
	"github.com/ncclgo/ncclgo/runtime/tune"
)

// directTuner is a tuner for 2 ranks on one GPU that share memory, with
// NCCL_ALGO=algo.
func directTuner(t *testing.T, algo string) *tune.Tuner {
	t.Helper()
	cfg, err := config.FromEnv(func(k string) (string, bool) {
		if k == "NCCL_ALGO" && algo != "" {
			return algo, true
		}
		return "", false
	})
	require.NoError(t, err)
	tp := tune.Topology{NRanks: 2, NNodes: 1, NGPUs: 1, RanksPerGPU: 2, SMCount: 132, BlocksPerSM: 1, IntraBW: 20, NChannels: 32, Direct: true}
	tn, err := tune.New(tp, cfg, nil)
	require.NoError(t, err)
	return tn
}

// DIRECT AllReduce plans like any collective: one work per channel, with
// the user's own buffers (each rank's kernel finds its peers' through the
// mailboxes, not the plan), every one-shot share within the device's
// NG_DIRECT_ONESHOT_BYTES and, up to 16 KiB, within NG_DIRECT_LL_BYTES
// (the LL one-shot).
func TestPlanDirectAllReduce(t *testing.T) {
	tn := directTuner(t, "allreduce:direct")
	c := Comm{Rank: 1, NRanks: 2, NChannels: 32, P2PChannelsPerPeer: 2}
	lookup := func(f kspace.Func) (int, int, error) { return 7, 0, nil }
	for _, tc := range []struct {
		bytes   uint64
		nc      int
		oneShot bool
	}{{8, 1, true}, {4, 1, true}, {16 << 10, 4, true}, {65536, 8, true}, {256 << 10, 32, true}, {256 << 20, 32, false}} {
		buf := uint64(0x7f00_0000_0000)
		task := Task{Coll: kspace.AllReduce, Send: buf, Recv: buf, Bytes: tc.bytes, Type: kspace.F32, Op: kspace.Sum}
		if tc.bytes%4 != 0 {
			task.Type = kspace.U8
		}
		p, err := Build(c, []Task{task}, tn, lookup)
		require.NoError(t, err)
		require.Len(t, p.Launches, 1, "%d bytes", tc.bytes)
		l := p.Launches[0]
		assert.Equal(t, kspace.Direct, l.Func.Algo, "%d bytes", tc.bytes)
		assert.Equal(t, kspace.Simple, l.Func.Proto)
		assert.Len(t, l.Works, tc.nc, "%d bytes", tc.bytes)
		assert.GreaterOrEqual(t, l.NThreads, 128)
		es := uint64(task.Type.Size())
		var covered uint64
		for _, w := range l.Works {
			assert.Equal(t, buf, w.Sendbuff)
			assert.Equal(t, buf, w.Recvbuff)
			assert.Equal(t, tc.bytes/es, w.Count)
			assert.Equal(t, covered, w.ChanOffset)
			covered += w.ChanCount
			if tc.oneShot {
				assert.LessOrEqual(t, w.ChanCount*es, uint64(generated.DirectOneshotBytes), "%d bytes: a one-shot share", tc.bytes)
			}
			if tc.bytes <= 16<<10 {
				assert.LessOrEqual(t, w.ChanCount*es, uint64(generated.DirectLlBytes), "%d bytes: an LL one-shot share", tc.bytes)
			}
		}
		assert.Equal(t, tc.bytes/es, covered)
	}
}

// DIRECT AllGather, ReduceScatter and Broadcast plan as their rings do:
// every channel handles the same [ChanOffset, +ChanCount) of each rank's
// block (Count units per block), which is what the device's pull loops
// index; in place the buffers are the user's own (recvbuff + rank*count
// for AllGather's input, sendbuff + rank*count for ReduceScatter's
// output), untouched by the plan. Chosen by cost at 256 MiB.
func TestPlanDirectOthers(t *testing.T) {
	const rank = 1
	c := Comm{Rank: rank, NRanks: 2, NChannels: 32, P2PChannelsPerPeer: 2}
	lookup := func(f kspace.Func) (int, int, error) { return 9, 0, nil }
	big := uint64(0x7f00_0000_0000)
	for _, tc := range []struct {
		name  string
		algo  string
		task  Task
		units uint64 // Count per block
		nc    int
	}{
		{"AllGather in place", "", Task{Coll: kspace.AllGather, Send: big + rank*(128<<20), Recv: big, Bytes: 128 << 20}, 128 << 20, 32},
		{"AllGather 8 B forced", "allgather:direct", Task{Coll: kspace.AllGather, Send: big, Recv: big + 4096, Bytes: 8}, 8, 1},
		{"ReduceScatter in place", "", Task{Coll: kspace.ReduceScatter, Send: big, Recv: big + rank*(128<<20), Bytes: 128 << 20, Type: kspace.F32, Op: kspace.Sum}, 32 << 20, 32},
		{"ReduceScatter 1 KiB forced", "reducescatter:direct", Task{Coll: kspace.ReduceScatter, Send: big, Recv: big + 4096, Bytes: 1024, Type: kspace.BF16, Op: kspace.MinMax}, 512, 1},
		{"Broadcast", "", Task{Coll: kspace.Broadcast, Send: big, Recv: big + (1 << 30), Bytes: 256 << 20, Root: 1}, 256 << 20, 32},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Build(c, []Task{tc.task}, directTuner(t, tc.algo), lookup)
			require.NoError(t, err)
			require.Len(t, p.Launches, 1)
			l := p.Launches[0]
			assert.Equal(t, kspace.Direct, l.Func.Algo)
			assert.Equal(t, kspace.Simple, l.Func.Proto)
			assert.Equal(t, tc.task.Coll, l.Func.Coll)
			require.Len(t, l.Works, tc.nc)
			var covered uint64
			for _, w := range l.Works {
				assert.Equal(t, tc.task.Send, w.Sendbuff)
				assert.Equal(t, tc.task.Recv, w.Recvbuff)
				assert.Equal(t, tc.units, w.Count)
				assert.Equal(t, int32(tc.task.Root), w.Root)
				assert.Equal(t, covered, w.ChanOffset)
				covered += w.ChanCount
			}
			assert.Equal(t, tc.units, covered)
		})
	}
}

// A task over windows uses its own Chooser, and its DIRECT works carry
// WorkDirectWin with the window indices; the same task picked by Build's
// chooser (not DIRECT) or without both windows carries neither.
func TestPlanDirectWindows(t *testing.T) {
	ring := fixedChooser{algo: kspace.Ring, proto: kspace.Simple, nc: 2, nt: 256}
	direct := directTuner(t, "")
	c := Comm{Rank: 0, NRanks: 2, NChannels: 32, P2PChannelsPerPeer: 2}
	lookup := func(f kspace.Func) (int, int, error) { return 7, 0, nil }
	buf := uint64(0x7f00_0000_0000)
	task := Task{Coll: kspace.AllReduce, Send: buf, Recv: buf + 1<<20, Bytes: 1 << 20, Type: kspace.F32, Op: kspace.Sum,
		SendWin: 3, RecvWin: 5, Choose: direct}
	p, err := Build(c, []Task{task}, ring, lookup)
	require.NoError(t, err)
	l := p.Launches[0]
	assert.Equal(t, kspace.Direct, l.Func.Algo, "the task's own chooser")
	for _, w := range l.Works {
		assert.Equal(t, uint8(generated.WorkDirectWin), w.Flags&generated.WorkDirectWin)
		assert.Equal(t, int32(2), w.SendPeer, "window index = SendWin-1")
		assert.Equal(t, int32(4), w.RecvPeer)
		assert.Equal(t, buf, w.Sendbuff, "the rank's own pointers stay")
	}

	for _, tc := range []struct {
		name string
		mod  func(*Task)
	}{
		{"Build's chooser", func(t *Task) { t.Choose = nil }},
		{"no recv window", func(t *Task) { t.RecvWin = 0 }},
	} {
		tk := task
		tc.mod(&tk)
		p, err := Build(c, []Task{tk}, ring, lookup)
		require.NoError(t, err, tc.name)
		for _, l := range p.Launches {
			for _, w := range l.Works {
				if l.Func.Algo != kspace.Direct {
					assert.Zero(t, w.Flags&generated.WorkDirectWin, tc.name)
					assert.Equal(t, int32(-1), w.SendPeer, tc.name)
				} else {
					assert.Zero(t, w.Flags&generated.WorkDirectWin, "%s: DIRECT without both windows carries none", tc.name)
				}
			}
		}
	}
}
