package comm

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/config"
	"github.com/ncclgo/ncclgo/runtime/enqueue"
	"github.com/ncclgo/ncclgo/runtime/graph"
	"github.com/ncclgo/ncclgo/runtime/kernels"
	"github.com/ncclgo/ncclgo/runtime/topo"
	"github.com/ncclgo/ncclgo/runtime/tune"
)

// connKey is one direction of a connection on one channel.
type connKey struct{ ch, from, to int }

// connLog records, per connection, the elements-bytes of every step its
// sender posted and of every step its receiver consumed, in order.
type connLog struct {
	send, recv map[connKey][]int
}

// stepModel replays, on the host, the step loops of devicesrc (ring
// AllReduce, ReduceScatter, AllGather, Broadcast, Reduce; tree AllReduce)
// for the works one rank's plan puts on each channel, and logs every
// step on every connection. The loops mirror the device code: a change
// there must be made here too.
type stepModel struct {
	rank, nRanks int
	rings        [][]int
	trees        []graph.Tree
	slot         [kspace.NumProtos]int // bytes a step carries, per protocol
	log          connLog
}

func (m *stepModel) stepElems(p kspace.Proto, es int) int {
	b := m.slot[p] &^ 15
	return max(b, 16) / es
}

// step logs one step: sends on to and receives on from (-1: none).
func (m *stepModel) step(ch int, from []int, to []int, n int) {
	for _, f := range from {
		k := connKey{ch, f, m.rank}
		m.log.recv[k] = append(m.log.recv[k], n)
	}
	for _, t := range to {
		k := connKey{ch, m.rank, t}
		m.log.send[k] = append(m.log.send[k], n)
	}
}

func (m *stepModel) run(ch int, w generated.DevWork) error {
	fn := generated.Funcs[w.FuncId].Func
	if fn.Coll == kspace.SendRecv {
		return nil // point-to-point pairing has its own simulation (runtime/enqueue)
	}
	es := 1
	if fn.Type != kspace.Unset {
		es = fn.Type.Size()
	}
	N := m.nRanks
	total := int64(w.ChanCount)
	capE := int64(m.stepElems(fn.Proto, es))
	ring := m.rings[ch]
	prev, next, idx, _ := graph.RingView(ring, m.rank)
	P, X := []int{prev}, []int{next}
	none := []int(nil)
	pick := func(b bool, v []int) []int {
		if b {
			return v
		}
		return none
	}
	switch {
	case fn.Coll == kspace.AllReduce && fn.Algo == kspace.Ring:
		gran := int64(max(16/es, 1))
		for off := int64(0); off < total; {
			rem := total - off
			chunk := min(capE, ((rem+int64(N)-1)/int64(N)+gran-1)/gran*gran)
			for j := 0; j <= 2*N-2; j++ {
				c := ((idx-1-j)%N + N) % N
				s := off + int64(c)*chunk
				n := 0
				if s < total {
					n = int(min(chunk, total-s))
				}
				m.step(ch, pick(j > 0, P), pick(j < 2*N-2, X), n)
			}
			off += chunk * int64(N)
		}
	case fn.Coll == kspace.AllReduce && fn.Algo == kspace.Tree:
		t := m.trees[ch]
		up, down := t.Up[m.rank], t.Children(m.rank)
		if up < 0 && len(down) == 0 {
			return nil
		}
		nChunks := (total + capE - 1) / capE
		size := func(k int64) int { return int(min(capE, total-k*capE)) }
		if up < 0 {
			for k := range nChunks {
				m.step(ch, down, down, size(k))
			}
			return nil
		}
		lag := int64(generated.Steps / 2)
		for k := int64(0); k < nChunks+lag; k++ {
			if k < nChunks {
				m.step(ch, down, []int{up}, size(k))
			}
			if k >= lag {
				m.step(ch, []int{up}, down, size(k-lag))
			}
		}
	case fn.Coll == kspace.ReduceScatter:
		for off := int64(0); off < total; off += capE {
			n := int(min(capE, total-off))
			for j := range N {
				m.step(ch, pick(j > 0, P), pick(j < N-1, X), n)
			}
		}
	case fn.Coll == kspace.AllGather:
		for off := int64(0); off < total; off += capE {
			n := int(min(capE, total-off))
			for j := range N {
				m.step(ch, pick(j > 0, P), pick(j < N-1, X), n)
			}
		}
	case fn.Coll == kspace.Broadcast:
		root := int(w.Root)
		for off := int64(0); off < total; off += capE {
			n := int(min(capE, total-off))
			m.step(ch, pick(m.rank != root, P), pick(next != root, X), n)
		}
	case fn.Coll == kspace.Reduce:
		root := int(w.Root)
		for off := int64(0); off < total; off += capE {
			n := int(min(capE, total-off))
			m.step(ch, pick(m.rank == root || prev != root, P), pick(m.rank != root, X), n)
		}
	default:
		return fmt.Errorf("no step model for %s", fn)
	}
	return nil
}

// planGroup plans tasks(r) on every rank of a communicator over devs, with
// the real tuner under env, and returns each rank's plan and the
// connection log of all of them.
func planGroup(t *testing.T, devs []int, env map[string]string, tasks func(r int) []enqueue.Task) ([]enqueue.Plan, connLog) {
	t.Helper()
	cfg, err := config.FromEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	require.NoError(t, err)
	l := topo.NewLayout(devs)
	n := len(devs)
	log := connLog{send: map[connKey][]int{}, recv: map[connKey][]int{}}
	plans := make([]enqueue.Plan, n)
	for r := range n {
		// Each rank builds its own tuner and graphs, as initRank does.
		tu, err := tune.New(tuneTopology(l, h200GPU, 1, cfg), cfg, kernels.Available)
		require.NoError(t, err)
		nch := min(tu.MaxChannels(), generated.MaxChannels)
		rings, trees := buildGraphs(l, nil, nch)
		p, err := enqueue.Build(enqueue.Comm{Rank: r, NRanks: n, NChannels: nch, P2PChannelsPerPeer: 2}, tasks(r), tu, nil)
		require.NoError(t, err, "rank %d", r)
		plans[r] = p
		m := &stepModel{rank: r, nRanks: n, rings: rings, trees: trees, log: log}
		m.slot = [kspace.NumProtos]int{}
		m.slot[kspace.LL] = cfg.LLBuffSize / generated.Steps / 16 * 8
		m.slot[kspace.LL128] = cfg.LL128BuffSize / generated.Steps / 128 * 120
		m.slot[kspace.Simple] = cfg.BuffSize / generated.Steps
		for _, ln := range p.Launches {
			for ch := range generated.MaxChannels {
				for _, w := range ln.Works[ln.ChanWorkStart[ch]:ln.ChanWorkStart[ch+1]] {
					require.NoError(t, m.run(ch, w), "rank %d channel %d", r, ch)
				}
			}
		}
	}
	return plans, log
}

// checkConns fails when the sender and the receiver of some connection
// disagree on its steps.
func checkConns(t *testing.T, what string, log connLog) {
	t.Helper()
	for _, e := range connErrors(log) {
		t.Errorf("%s: %s", what, e)
	}
}

// connErrors lists the connections whose sender and receiver disagree.
func connErrors(log connLog) []string {
	var errs []string
	keys := map[connKey]bool{}
	for k := range log.send {
		keys[k] = true
	}
	for k := range log.recv {
		keys[k] = true
	}
	for k := range keys {
		s, r := log.send[k], log.recv[k]
		if !slices.Equal(s, r) {
			errs = append(errs, fmt.Sprintf("channel %d, %d->%d: the sender posts %d steps %v, the receiver consumes %d steps %v",
				k.ch, k.from, k.to, len(s), head(s), len(r), head(r)))
		}
	}
	slices.Sort(errs)
	return errs
}

func head(s []int) []int {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

// TestGroupedStepsAgree plans the group of issue #15 (AllReduce of 3 int32
// then ReduceScatter of 1 int32, one group per rank) on every rank of
// uneven placements, and random groups of collectives under every forced
// algorithm and protocol, and checks that on every connection the sender
// posts exactly the steps (and sizes) its receiver consumes, and that every
// rank launches the same sequence of functions on every channel.
func TestGroupedStepsAgree(t *testing.T) {
	placements := [][]int{{0, 0, 1}, {1, 0, 1, 0, 0, 1}, {0, 1}, {0, 0, 0, 1}, {0, 1, 1, 1, 0, 0, 1, 0}, {0, 0, 0, 0}}
	envs := []map[string]string{
		{"NCCL_PROTO": "SIMPLE"}, {"NCCL_PROTO": "LL"}, {"NCCL_PROTO": "LL128"}, {},
		{"NCCL_ALGO": "allreduce:tree", "NCCL_PROTO": "SIMPLE"}, {"NCCL_ALGO": "ring", "NCCL_PROTO": "SIMPLE"},
	}
	issue := func(r int) []enqueue.Task {
		return []enqueue.Task{
			{Coll: kspace.AllReduce, Send: 0x1000, Recv: 0x2000, Bytes: 3 * 4, Type: kspace.I32, Op: kspace.Sum},
			{Coll: kspace.ReduceScatter, Send: 0x3000, Recv: 0x4000, Bytes: 1 * 4, Type: kspace.I32, Op: kspace.Sum},
		}
	}
	for _, devs := range placements {
		for _, env := range envs {
			what := fmt.Sprintf("%v %v", devs, env)
			plans, log := planGroup(t, devs, env, issue)
			checkConns(t, what, log)
			checkSameFuncs(t, what, plans)
			for r, p := range plans {
				if len(p.Launches) != 1 {
					t.Errorf("%s: rank %d: %d launches, want one per group", what, r, len(p.Launches))
				}
			}
		}
	}
	rng := rand.New(rand.NewPCG(15, 15))
	colls := []kspace.Coll{kspace.AllReduce, kspace.ReduceScatter, kspace.AllGather, kspace.Broadcast, kspace.Reduce}
	types := []kspace.Type{kspace.I8, kspace.I32, kspace.F16, kspace.BF16, kspace.F32, kspace.F64, kspace.U64}
	for range 300 {
		devs := placements[rng.IntN(len(placements))]
		env := envs[rng.IntN(len(envs))]
		n := len(devs)
		var group []enqueue.Task
		for i := range 1 + rng.IntN(6) {
			c := colls[rng.IntN(len(colls))]
			ty := types[rng.IntN(len(types))]
			counts := []uint64{0, 1, 3, 1023, 4097, 1<<20 + 5, 3 << 20}
			group = append(group, enqueue.Task{Coll: c, Send: uint64(0x1000000 * (2*i + 1)), Recv: uint64(0x1000000 * (2*i + 2)),
				Bytes: counts[rng.IntN(len(counts))] * uint64(ty.Size()), Type: ty, Op: kspace.Sum, Root: rng.IntN(n)})
		}
		what := fmt.Sprintf("%v %v %d calls", devs, env, len(group))
		plans, log := planGroup(t, devs, env, func(int) []enqueue.Task { return group })
		checkConns(t, what, log)
		checkSameFuncs(t, what, plans)
	}
}

// checkSameFuncs fails when two ranks run different functions, or
// different channel shares, in some position of some channel.
func checkSameFuncs(t *testing.T, what string, plans []enqueue.Plan) {
	t.Helper()
	type item struct {
		fn         uint16
		off, count uint64
		root       int
	}
	seq := func(p enqueue.Plan) map[int][]item {
		out := map[int][]item{}
		for _, ln := range p.Launches {
			for ch := range generated.MaxChannels {
				for _, w := range ln.Works[ln.ChanWorkStart[ch]:ln.ChanWorkStart[ch+1]] {
					out[ch] = append(out[ch], item{w.FuncId, w.ChanOffset, w.ChanCount, int(w.Root)})
				}
			}
		}
		return out
	}
	want := seq(plans[0])
	for r := 1; r < len(plans); r++ {
		got := seq(plans[r])
		for ch := range generated.MaxChannels {
			if !slices.Equal(want[ch], got[ch]) {
				t.Errorf("%s: channel %d: rank 0 runs %v, rank %d runs %v", what, ch, want[ch], r, got[ch])
			}
		}
	}
}

// TestStepModelCatchesDisagreement: ranks whose groups differ (here one
// rank's AllReduce is larger) must show up as a connection whose sender and
// receiver disagree, or the check above proves nothing.
func TestStepModelCatchesDisagreement(t *testing.T) {
	_, log := planGroup(t, []int{0, 0, 1}, map[string]string{"NCCL_PROTO": "SIMPLE"}, func(r int) []enqueue.Task {
		n := uint64(3)
		if r == 2 {
			n = 1 << 20
		}
		return []enqueue.Task{{Coll: kspace.AllReduce, Send: 0x1000, Recv: 0x2000, Bytes: n * 4, Type: kspace.I32, Op: kspace.Sum}}
	})
	errs := connErrors(log)
	require.NotEmpty(t, errs, "a rank with a different AllReduce size must be caught")
	t.Logf("caught: %s", errs[0])
}
