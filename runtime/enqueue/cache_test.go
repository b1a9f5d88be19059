package enqueue

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/config"
	"github.com/ncclgo/ncclgo/runtime/kernels"
	"github.com/ncclgo/ncclgo/runtime/tune"
)

// countingChooser counts the calls it passes on.
type countingChooser struct {
	c Chooser
	n int
}

func (c *countingChooser) Choose(coll kspace.Coll, op kspace.RedOp, ty kspace.Type, n int64) (tune.Choice, error) {
	c.n++
	return c.c.Choose(coll, op, ty, n)
}

func cacheTuner(t *testing.T, tp tune.Topology, env map[string]string) *tune.Tuner {
	t.Helper()
	cfg, err := config.FromEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	require.NoError(t, err)
	tn, err := tune.New(tp, cfg, kernels.Available)
	require.NoError(t, err)
	return tn
}

// planArgs is the kernel arguments of each launch of p, as the launch
// passes them.
func planArgs(p *Plan) [][]byte {
	var out [][]byte
	for i := range p.Launches {
		l := &p.Launches[i]
		var a generated.KernelArgs
		l.PutArgs(&a, 0xc0ffee, 0xbeef)
		out = append(out, bytes.Clone(argBytes(&a, l.ArgsSize())))
	}
	return out
}

// A cached plan with the call's buffers is the plan Build makes of the
// call, byte for byte, kernel arguments included: over random shapes on
// several topologies and settings, out of place and in place, with and
// without windows, each shape planned first with other buffers.
func TestPlanCacheEqualsBuild(t *testing.T) {
	type setup struct {
		name string
		tn   *tune.Tuner
		win  *tune.Tuner
		c    Comm
	}
	var setups []setup
	topos := []tune.Topology{
		{NRanks: 1, RanksPerGPU: 1, SMCount: 132, BlocksPerSM: 1, IntraBW: 20, NChannels: 32},
		{NRanks: 2, RanksPerGPU: 1, SMCount: 132, BlocksPerSM: 1, IntraBW: 20, NChannels: 32},
		{NRanks: 2, NNodes: 1, NGPUs: 1, RanksPerGPU: 2, SMCount: 132, BlocksPerSM: 1, IntraBW: 20, NChannels: 32, Direct: true},
		{NRanks: 8, RanksPerGPU: 8, SMCount: 132, BlocksPerSM: 1, IntraBW: 20, Direct: true},
		{NRanks: 8, RanksPerGPU: 1, SMCount: 132, BlocksPerSM: 2, IntraBW: 20, NChannels: 32},
		{NRanks: 16, NNodes: 2, RanksPerGPU: 1, SMCount: 132, BlocksPerSM: 1, IntraBW: 20, InterBW: 12, NChannels: 32},
	}
	envs := []map[string]string{{}, {"NCCL_PROTO": "SIMPLE"}, {"NCCL_ALGO": "tree"}}
	for _, tp := range topos {
		for ei, env := range envs {
			tn := cacheTuner(t, tp, env)
			wtp := tp
			wtp.Direct = true
			win := cacheTuner(t, wtp, env)
			for _, rank := range []int{0, tp.NRanks - 1} {
				setups = append(setups, setup{
					name: fmt.Sprintf("%dr/%dpg/env%d/rank%d", tp.NRanks, tp.RanksPerGPU, ei, rank),
					tn:   tn, win: win,
					c: Comm{Rank: rank, NRanks: tp.NRanks, NChannels: min(tn.MaxChannels(), generated.MaxChannels), P2PChannelsPerPeer: 2},
				})
			}
		}
	}
	colls := []kspace.Coll{kspace.AllReduce, kspace.Broadcast, kspace.Reduce, kspace.AllGather, kspace.ReduceScatter}
	ops := []kspace.RedOp{kspace.Sum, kspace.Prod, kspace.MinMax, kspace.PreMulSum, kspace.SumPostDiv}
	rng := rand.New(rand.NewPCG(26, 4))
	addr := func() uint64 { return 0x7f00_0000_0000 + rng.Uint64N(1<<36)&^0xff }
	hits := 0
	for _, s := range setups {
		var pc PlanCache
		var into Plan // BuildInto's, reused by every call of the setup
		for i := range 150 {
			t0 := Task{Coll: colls[rng.IntN(len(colls))], Type: kspace.Type(rng.IntN(int(kspace.NumTypes)))}
			if t0.Coll.HasRedOp() {
				t0.Op = ops[rng.IntN(len(ops))]
				if t0.Op == kspace.SumPostDiv && !t0.Type.IsInteger() {
					t0.Op = kspace.Sum
				}
				t0.OpArg = rng.Uint64N(4)
				t0.OpArgPtr = t0.Op == kspace.PreMulSum && rng.IntN(2) == 0
			}
			count := uint64(1) << rng.IntN(28)
			if rng.IntN(3) == 0 {
				count += rng.Uint64N(count)
			}
			if rng.IntN(20) == 0 {
				count = 0
			}
			t0.Bytes = count * uint64(t0.Type.Size())
			t0.Root = rng.IntN(s.c.NRanks)
			// Each call of the shape may differ from the first in the
			// parts of the shape that are cheapest to get wrong: in place
			// or not, the window rows.
			call := func() []Task {
				t := t0
				t.Send, t.Recv = addr(), addr()
				if rng.IntN(3) == 0 {
					t.Recv = t.Send
				}
				if rng.IntN(3) == 0 {
					t.SendWin, t.RecvWin, t.Choose = int32(1+rng.IntN(2)), int32(1+rng.IntN(2)), s.win
				}
				return []Task{t}
			}
			first := call()
			want0, err0 := Build(s.c, first, s.tn, GeneratedLookup)
			got0, err := pc.Build(s.c, first, s.tn, GeneratedLookup)
			require.Equal(t, err0, err, "%s #%d", s.name, i)
			if err0 != nil {
				continue
			}
			require.Equal(t, want0, got0)
			for range 6 {
				again := call()
				want, err := Build(s.c, again, s.tn, GeneratedLookup)
				require.NoError(t, err)
				got, err := pc.Build(s.c, again, s.tn, GeneratedLookup)
				require.NoError(t, err)
				require.Equal(t, want, got, "%s #%d: %+v", s.name, i, again[0])
				require.Equal(t, planArgs(&want), planArgs(&got), "%s #%d: kernel arguments", s.name, i)
				require.NoError(t, pc.BuildInto(&into, s.c, again, s.tn, GeneratedLookup))
				require.Equal(t, want, withNils(into), "%s #%d: BuildInto: %+v", s.name, i, again[0])
				require.Equal(t, planArgs(&want), planArgs(&into), "%s #%d: BuildInto's kernel arguments", s.name, i)
				hits++
			}
		}
	}
	require.Greater(t, hits, 10000)
}

// withNils is p with its empty slices nil, as Build leaves them.
func withNils(p Plan) Plan {
	if len(p.Copies) == 0 {
		p.Copies = nil
	}
	if len(p.Launches) == 0 {
		p.Launches = nil
	}
	return p
}

// BuildInto reuses the plan it is given: a repeated shape allocates
// nothing, and the cache's plan is not the caller's.
func TestPlanCacheBuildIntoReuses(t *testing.T) {
	tn := cacheTuner(t, tune.Topology{NRanks: 2, RanksPerGPU: 1, SMCount: 132, BlocksPerSM: 1, IntraBW: 20, NChannels: 32}, nil)
	c := Comm{Rank: 0, NRanks: 2, NChannels: 32, P2PChannelsPerPeer: 2}
	var pc PlanCache
	var p Plan
	for _, tk := range []Task{
		{Coll: kspace.AllReduce, Send: 0x1000, Recv: 0x2000, Bytes: 8, Type: kspace.F32, Op: kspace.Sum},
		{Coll: kspace.AllGather, Send: 0x1000, Recv: 0x2000, Bytes: 1 << 20, Type: kspace.F32},
	} {
		tasks := []Task{tk}
		require.NoError(t, pc.BuildInto(&p, c, tasks, tn, GeneratedLookup)) // a miss
		allocs := testing.AllocsPerRun(100, func() {
			tasks[0].Send += 0x100
			if err := pc.BuildInto(&p, c, tasks, tn, GeneratedLookup); err != nil {
				t.Fatal(err)
			}
		})
		require.Zero(t, allocs, "%v", tk.Coll)
		require.Equal(t, tasks[0].Send, p.Launches[0].Works[0].Sendbuff)
		p.Launches[0].Works[0].Count = 99
		q, err := pc.Build(c, tasks, tn, GeneratedLookup)
		require.NoError(t, err)
		require.NotEqual(t, uint64(99), q.Launches[0].Works[0].Count, "the cache's plan changed with the caller's")
	}
}

// A repeated shape is not planned again (the Chooser is not asked), a new
// shape, Chooser or Comm is, and Reset forgets.
func TestPlanCacheHits(t *testing.T) {
	tn := cacheTuner(t, tune.Topology{NRanks: 2, RanksPerGPU: 1, SMCount: 132, BlocksPerSM: 1, IntraBW: 20, NChannels: 32}, nil)
	ch := &countingChooser{c: tn}
	c := Comm{Rank: 0, NRanks: 2, NChannels: 32, P2PChannelsPerPeer: 2}
	task := func(send, recv, bytes uint64) []Task {
		return []Task{{Coll: kspace.AllReduce, Send: send, Recv: recv, Bytes: bytes, Type: kspace.F32, Op: kspace.Sum}}
	}
	var pc PlanCache
	plan := func(c Comm, ts []Task, choose Chooser) Plan {
		t.Helper()
		p, err := pc.Build(c, ts, choose, GeneratedLookup)
		require.NoError(t, err)
		return p
	}
	plan(c, task(0x1000, 0x2000, 8), ch)
	require.Equal(t, 1, ch.n)
	p := plan(c, task(0x3000, 0x4000, 8), ch)
	require.Equal(t, 1, ch.n, "a repeated shape asks the tuner again")
	require.Equal(t, uint64(0x3000), p.Launches[0].Works[0].Sendbuff)
	require.Equal(t, uint64(0x4000), p.Launches[0].Works[0].Recvbuff)
	plan(c, task(0x3000, 0x3000, 8), ch) // in place: another shape
	require.Equal(t, 2, ch.n)
	plan(c, task(0x3000, 0x4000, 16), ch)
	require.Equal(t, 3, ch.n)
	c2 := c
	c2.NChannels = 4
	plan(c2, task(0x3000, 0x4000, 8), ch)
	require.Equal(t, 4, ch.n)
	ch2 := &countingChooser{c: tn}
	plan(c, task(0x3000, 0x4000, 8), ch2)
	require.Equal(t, 1, ch2.n, "another Chooser's plan comes from the cache")
	pc.Reset()
	plan(c, task(0x3000, 0x4000, 8), ch)
	require.Equal(t, 5, ch.n, "Reset keeps a plan")
	// Changing a returned plan leaves the cache's alone.
	p = plan(c, task(0x5000, 0x6000, 8), ch)
	p.Launches[0].Works[0].Count = 99
	p = plan(c, task(0x5000, 0x6000, 8), ch)
	require.Equal(t, uint64(2), p.Launches[0].Works[0].Count)
	require.Equal(t, 5, ch.n)
}

func BenchmarkSmallAllReduceCached(b *testing.B) {
	c := Comm{Rank: 0, NRanks: 2, NChannels: 32, P2PChannelsPerPeer: 2}
	tasks := []Task{{Coll: kspace.AllReduce, Send: 1 << 20, Recv: 2 << 20, Bytes: 2 * 4, Type: kspace.F32, Op: kspace.Sum}}
	ch := fixedChooser{algo: kspace.Ring, proto: kspace.LL, nc: 1, nt: 128}
	var pc PlanCache
	var args generated.KernelArgs
	b.ReportAllocs()
	for b.Loop() {
		p, err := pc.Build(c, tasks, ch, GeneratedLookup)
		if err != nil {
			b.Fatal(err)
		}
		p.Launches[0].PutArgs(&args, 0x1000, 0)
	}
}
