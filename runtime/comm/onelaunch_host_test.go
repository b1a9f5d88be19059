package comm

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/internal/benchguard"
	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/config"
	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/ncclgo/ncclgo/runtime/enqueue"
	"github.com/ncclgo/ncclgo/runtime/residency"
	"github.com/ncclgo/ncclgo/runtime/tune"
)

// oneGPU is n ranks of one process on one H200 (132 SMs, one block per
// SM), as ncclperf -g n runs them on a machine with one GPU.
func oneGPU(n int, direct bool) tune.Topology {
	return tune.Topology{NRanks: n, NNodes: 1, NGPUs: 1, RanksPerGPU: n, SMCount: 132, BlocksPerSM: 1,
		IntraBW: 20, NChannels: DefaultNChannels, Direct: direct}
}

// mergeEngines returns n engines of one communicator on one GPU as the
// merge planning sees them (no device: a zero launcher and context), each
// planning with a tuner for topo under the settings env.
func mergeEngines(tb testing.TB, topo tune.Topology, env map[string]string) []*Engine {
	tb.Helper()
	cfg, err := config.FromEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	require.NoError(tb, err)
	tn, err := tune.New(topo, cfg, nil)
	require.NoError(tb, err)
	lease, ctx := new(residency.Lease), new(cuda.Context)
	es := make([]*Engine, topo.NRanks)
	for r := range es {
		nc := tn.MaxChannels()
		es[r] = &Engine{rank: r, nRanks: topo.NRanks, s: Settings{OneLaunch: true}, tuner: tn, cctx: ctx,
			launcher: new(enqueue.Launcher), nChannels: nc, events: map[uintptr]launchEvent{},
			plan: enqueue.Comm{Rank: r, NRanks: topo.NRanks, NChannels: nc, P2PChannelsPerPeer: 2}}
		es[r].res.lease = lease
	}
	return es
}

// groupOf plans one call of every engine, rank r's on stream 0x1000+r:
// the launches of one group's end.
func groupOf(tb testing.TB, es []*Engine, task func(r int) enqueue.Task) []Launch {
	tb.Helper()
	ls := make([]Launch, len(es))
	for r, e := range es {
		tasks := []enqueue.Task{task(r)}
		p, err := e.Plan(tasks)
		require.NoError(tb, err)
		ls[r] = Launch{Engine: e, Plan: &p, Tasks: tasks, Stream: cuda.WrapStream(nil, uintptr(0x1000+r))}
	}
	return ls
}

// A small collective runs on one channel whatever the algorithm, so the
// calls of 2..8 ranks on one GPU fit in one multi-rank launch (64 blocks,
// 58 works): the group launches one kernel, not one per rank or per set.
func TestSmallCallsMergeIntoOneLaunch(t *testing.T) {
	colls := []kspace.Coll{kspace.AllReduce, kspace.AllGather, kspace.ReduceScatter}
	for _, n := range []int{2, 4, 8} {
		for _, algo := range []string{"", "ring", "tree", "direct"} {
			for _, bytes := range []uint64{8, 64, 1024, 4096} {
				for _, coll := range colls {
					if algo == "tree" && coll != kspace.AllReduce {
						continue // TREE runs AllReduce only
					}
					name := fmt.Sprintf("%d ranks %s %s %d B", n, algo, coll, bytes)
					env := map[string]string{}
					if algo != "" {
						env["NCCL_ALGO"] = algo
					}
					if algo == "direct" && coll != kspace.AllReduce {
						env["NCCL_PROTO"] = "simple"
					}
					es := mergeEngines(t, oneGPU(n, true), env)
					count := bytes // AllGather's and ReduceScatter's chunk: the buffer over n
					if coll != kspace.AllReduce {
						count = max(bytes/uint64(n), 4) &^ 3
					}
					ls := groupOf(t, es, func(r int) enqueue.Task {
						return enqueue.Task{Coll: coll, Send: 0x1000_0000 + uint64(r)<<24, Recv: 0x2000_0000 + uint64(r)<<24,
							Bytes: count, Type: kspace.F32, Op: kspace.Sum}
					})
					for r, l := range ls {
						require.Len(t, l.Plan.Launches, 1, name)
						assert.Equal(t, 1, l.Plan.Launches[0].NBlocks(), "%s: rank %d's blocks (%s)", name, r, l.Plan.Decisions[0].Choice)
					}
					m := newMerger(ls, []int{0, 1, 2, 3, 4, 5, 6, 7}[:n])
					require.Len(t, m.sets, 1, "%s: one multi-rank launch", name)
					assert.Len(t, m.sets[0], n, "%s: of every rank", name)
					require.NoError(t, enqueue.CheckMulti(m.parts[0]), name)
				}
			}
		}
	}
}

// nopSync is a streamSync whose calls do nothing: the host cost of the
// joins without the driver's.
type nopSync struct{}

func (nopSync) idle(*cuda.Stream) (bool, error)        { return true, nil }
func (nopSync) record(*cuda.Event, *cuda.Stream) error { return nil }
func (nopSync) wait(*cuda.Stream, *cuda.Event) error   { return nil }

// benchMultiHost is the host path of a group of n ranks' 8-byte AllReduce
// on one GPU with the multi-rank launch on, without the device: each
// rank's plan (the tuner included), the merge planning, the kernel
// arguments of the one launch and the joins' bookkeeping (their driver
// calls excluded: nopSync).
func benchMultiHost(b *testing.B, n int) {
	es := mergeEngines(b, oneGPU(n, true), nil)
	idx := make([]int, n)
	for k := range idx {
		idx[k] = k
	}
	task := func(r int) enqueue.Task {
		return enqueue.Task{Coll: kspace.AllReduce, Send: 0x1000_0000 + uint64(r)<<24, Recv: 0x2000_0000 + uint64(r)<<24,
			Bytes: 8, Type: kspace.F32, Op: kspace.Sum}
	}
	tasks := make([][]enqueue.Task, n)
	for r := range tasks {
		tasks[r] = []enqueue.Task{task(r)}
	}
	streams := make([]*cuda.Stream, n)
	evs := make([]*cuda.Event, n)
	for r := range streams {
		streams[r] = cuda.WrapStream(nil, uintptr(0x1000+r))
		evs[r] = new(cuda.Event)
	}
	// The set's completion event, as its first launch made it (no
	// device here to make one): later launches find it (setEventFor).
	set := &setEvent{members: es, handles: make([]uintptr, n), ev: new(cuda.Event), joined: make([]bool, n)}
	for r := range set.handles {
		set.handles[r] = uintptr(0x1000 + r)
	}
	es[0].sets = []*setEvent{set}
	plans := make([]enqueue.Plan, n)
	ls := make([]Launch, n)
	args := new(generated.KernelArgs)
	b.ReportAllocs()
	for b.Loop() {
		for r, e := range es {
			// Into the previous group's plans, as Group.End plans.
			if err := e.PlanInto(&plans[r], tasks[r]); err != nil {
				b.Fatal(err)
			}
			ls[r] = Launch{Engine: e, Plan: &plans[r], Tasks: tasks[r], Stream: streams[r]}
		}
		m := newMerger(ls, idx)
		if len(m.sets) != 1 || len(m.sets[0]) != n {
			b.Fatalf("%d ranks: multi-rank launches %v, want one of every rank", n, m.sets)
		}
		enqueue.PutMultiArgs(args, m.parts[0])
		// runMulti's bookkeeping, on the merger's scratch.
		rs, done := m.rs[:n], m.evs[:n]
		for r := range rs {
			rs[r] = rankSync{rank: r, stream: streams[r], h: uintptr(0x1000 + r), ev: evs[r], last: set.ev}
		}
		s, err := setEventFor(ls, rs)
		if err != nil || s != set {
			b.Fatalf("the set's event: %v, %v", s, err)
		}
		if err := joinBefore(nopSync{}, rs, s); err != nil {
			b.Fatal(err)
		}
		if errs := joinAfter(nopSync{}, rs, s, done); len(errs) > 0 {
			b.Fatal(errs)
		}
		m.release()
	}
}

func BenchmarkHostMultiAllReduce2(b *testing.B) { benchMultiHost(b, 2) }
func BenchmarkHostMultiAllReduce8(b *testing.B) { benchMultiHost(b, 8) }

// The merge planning of a group allocates nothing once an earlier group's
// merger gave its memory back (it made 13 allocations per group before).
func TestMergeAllocations(t *testing.T) {
	if benchguard.RaceEnabled {
		t.Skip("the race detector's sync.Pool drops what is put back at random")
	}
	for _, n := range []int{2, 8} {
		es := mergeEngines(t, oneGPU(n, true), nil)
		ls := groupOf(t, es, func(r int) enqueue.Task {
			return enqueue.Task{Coll: kspace.AllReduce, Send: 0x1000_0000 + uint64(r)<<24, Recv: 0x2000_0000 + uint64(r)<<24,
				Bytes: 8, Type: kspace.F32, Op: kspace.Sum}
		})
		idx := []int{0, 1, 2, 3, 4, 5, 6, 7}[:n]
		allocs := testing.AllocsPerRun(100, func() {
			m := newMerger(ls, idx)
			if len(m.sets) != 1 {
				t.Fatalf("%d ranks: sets %v", n, m.sets)
			}
			m.release()
		})
		assert.Less(t, allocs, 1.0, "%d ranks (a GC may empty the pool once)", n)
	}
}
