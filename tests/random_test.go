package tests

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo"
	"github.com/ncclgo/ncclgo/internal/pattern"
	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// EnvRandomBudget sets how long TestRandom draws groups (a Go duration).
const EnvRandomBudget = "NCCLGO_RANDOM_BUDGET"

// randomBudget is NCCLGO_RANDOM_BUDGET, or 30 s (10 s with -test.short).
func randomBudget(t *testing.T) time.Duration {
	if s := os.Getenv(EnvRandomBudget); s != "" {
		d, err := time.ParseDuration(s)
		require.NoError(t, err, "%s=%q: want a Go duration such as 30s or 10m", EnvRandomBudget, s)
		return d
	}
	if testing.Short() {
		return 10 * time.Second
	}
	return 30 * time.Second
}

// allDevices is NCCLGO_TEST_DEVICES when set, else every device present.
func allDevices(t *testing.T) []int {
	if os.Getenv("NCCLGO_TEST_DEVICES") != "" {
		return testDevices(t)
	}
	n, err := cuda.DeviceCount()
	require.NoError(t, err)
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// setting is one forced algorithm/protocol (empty: the tuner's choice).
type setting struct{ algo, proto string }

var randomSettings = []setting{
	{"", ""}, {"", "SIMPLE"}, {"ring", "LL"}, {"ring", "LL128"}, {"ring", "SIMPLE"},
	{"allreduce:tree", "LL"}, {"allreduce:tree", "LL128"}, {"allreduce:tree", "SIMPLE"},
}

// randomArena bounds the bytes one call's buffers take in a rank's arena.
const randomArena = 8 << 20

// drawPlacement puts 2..8 ranks on devs, uniformly per rank (so uneven
// placements are common when there are several devices).
func drawPlacement(rng *rand.Rand, devs []int) []int {
	p := make([]int, 2+rng.IntN(7))
	for r := range p {
		p[r] = devs[rng.IntN(len(devs))]
	}
	return p
}

// drawCount draws 0, a tiny, an odd, a medium or a large count.
func drawCount(rng *rand.Rand) int {
	switch x := rng.IntN(100); {
	case x < 10:
		return 0
	case x < 40:
		return 1 + rng.IntN(8)
	case x < 75:
		return 2*rng.IntN(2500) + 1
	case x < 90:
		return rng.IntN(100000)
	default:
		return 1<<20 + rng.IntN(4096) - 2048
	}
}

// drawCall draws one call for n ranks under st that the kernel set can run.
func drawCall(rng *rand.Rand, n int, st setting, seed uint64) call {
	for {
		c := call{ty: kspace.Type(rng.IntN(int(kspace.NumTypes))), o: ops[rng.IntN(len(ops))], count: drawCount(rng),
			root: rng.IntN(n), shift: 1 + rng.IntN(n-1), mis: rng.IntN(10) < 3, seed: seed}
		kinds := []int{kindColl, kindColl, kindColl, kindColl, kindColl}
		if !strings.Contains(st.proto, "LL128") { // SendRecv runs LL or SIMPLE only
			kinds = append(kinds, kindSendRecv, kindAllToAll, kindGather, kindScatter)
		}
		c.kind = kinds[rng.IntN(len(kinds))]
		var mult int // buffers' size in counts
		switch c.kind {
		case kindColl:
			colls := []kspace.Coll{kspace.AllReduce, kspace.AllReduce, kspace.ReduceScatter, kspace.Reduce, kspace.AllGather, kspace.Broadcast}
			c.coll = colls[rng.IntN(len(colls))]
			c.inPlace = rng.IntN(2) == 0
			if !c.coll.HasRedOp() {
				c.o = ops[0]
			}
			algo := kspace.Ring
			if c.coll == kspace.AllReduce && strings.Contains(st.algo, "tree") {
				algo = kspace.Tree
			}
			proto := kspace.Simple
			if st.proto != "" {
				proto, _ = kspace.ParseProto(st.proto)
			}
			if !built(c.coll, c.o, c.ty, algo, proto) {
				continue
			}
			if pop, _ := patternOp(c.o); c.coll.HasRedOp() && !pattern.Checkable(c.ty, pop, n) {
				continue // never with at most 8 ranks; kept for larger placements
			}
			mult = 2
			if c.coll == kspace.AllGather || c.coll == kspace.ReduceScatter {
				mult = n + 1
			}
		case kindSendRecv:
			mult = 2
		default:
			mult = 2 * n
		}
		if c.count*c.ty.Size()*mult > randomArena {
			c.count = randomArena / (c.ty.Size() * mult)
		}
		return c
	}
}

// TestRandom draws, from the run's seed, placements of 2..8 ranks over the
// GPUs present, a forced algorithm/protocol per communicator, and groups
// of 1..6 calls mixing collectives, types, ops, counts (0, tiny, odd,
// large), in place and out of place, misaligned or not, ended as one group
// for every rank or one group per rank; runs each with a bounded wait and
// checks every byte of every rank's buffer; and repeats until
// NCCLGO_RANDOM_BUDGET has passed. NCCLGO_TEST_SEED replays a run.
func TestRandom(t *testing.T) {
	gpu(t)
	seed := suiteSeed(t)
	budget := randomBudget(t)
	devs := allDevices(t)
	rng := rand.New(rand.NewPCG(seed, 0x15))
	start := time.Now()
	groups, calls, placements := 0, 0, 0
	defer func() {
		line := fmt.Sprintf("random: seed=%d groups=%d calls=%d placements=%d devices=%v elapsed=%v",
			seed, groups, calls, placements, devs, time.Since(start).Round(time.Millisecond))
		fmt.Println(line)
		t.Log(line)
	}()
	for time.Since(start) < budget && !t.Failed() {
		place := drawPlacement(rng, devs)
		st := randomSettings[rng.IntN(len(randomSettings))]
		n := len(place)
		opts := &ncclgo.Options{}
		if st.algo != "" {
			opts.Overrides.Algo = &st.algo
		}
		if st.proto != "" {
			opts.Overrides.Proto = &st.proto
		}
		w, err := newWorldOn(t, place, opts, 6*(randomArena+1024))
		require.NoError(t, err, "seed %d: placement %v algo=%q proto=%q", seed, place, st.algo, st.proto)
		placements++
		for range 3 + rng.IntN(10) {
			if time.Since(start) >= budget {
				break
			}
			var cs []call
			for ci := range 1 + rng.IntN(6) {
				cs = append(cs, drawCall(rng, n, st, pattern.Mix(seed, uint64(groups), uint64(ci))))
			}
			perRank := rng.IntN(2) == 0
			g, err := planGroup(cs, n, pattern.Mix(seed, uint64(groups)))
			require.NoError(t, err)
			errs := g.run(w, perRank)
			groups++
			calls += len(cs)
			if len(errs) > 0 {
				for _, e := range errs[:min(len(errs), 8)] {
					t.Errorf("%v", e)
				}
				t.Errorf("seed %d (replay: %s=%d -test.run 'TestRandom$'), group %d on placement %v, algo=%q proto=%q, one group per rank: %v:%s",
					seed, pattern.EnvSeed, seed, groups-1, place, st.algo, st.proto, perRank, describe(cs))
				break
			}
		}
		w.close()
	}
}

// TestRandomPlansOnCPU draws groups as TestRandom does and checks, without
// a GPU, that the runner lays them out and expects them consistently: the
// expected arena passes its own check.
func TestRandomPlansOnCPU(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 100 {
		n := 2 + rng.IntN(7)
		st := randomSettings[rng.IntN(len(randomSettings))]
		var cs []call
		for ci := range 1 + rng.IntN(6) {
			c := drawCall(rng, n, st, pattern.Mix(3, uint64(i), uint64(ci)))
			c.count = min(c.count, 5000) // keep the CPU test quick
			cs = append(cs, c)
		}
		g, err := planGroup(cs, n, uint64(i))
		require.NoError(t, err)
		for r := range n {
			require.Empty(t, g.check(r, g.after[r]), "group %d rank %d:%s", i, r, describe(cs))
			require.LessOrEqual(t, len(g.after[r]), 6*(randomArena+1024))
		}
	}
}

// TestGroupedUnevenPlacement is issue #15's case: ranks on devices
// [0, 0, 1] and [1, 0, 1, 0, 0, 1], NCCL_PROTO=SIMPLE, one group per rank
// holding an AllReduce of 3 int32 then a ReduceScatter of 1 int32. It hung
// (Wait ran into its deadline) while each call alone completed.
func TestGroupedUnevenPlacement(t *testing.T) {
	gpu(t)
	devs := allDevices(t)
	if len(devs) < 2 {
		t.Skipf("needs 2 GPUs, found %d (devices %v)", len(devs), devs)
	}
	seed := suiteSeed(t)
	for _, place := range [][]int{{0, 0, 1}, {1, 0, 1, 0, 0, 1}} {
		for _, proto := range []string{"SIMPLE", ""} {
			devOf := make([]int, len(place))
			for r, d := range place {
				devOf[r] = devs[d]
			}
			t.Run(fmt.Sprintf("%v/proto=%q", devOf, proto), func(t *testing.T) {
				opts := &ncclgo.Options{}
				if proto != "" {
					opts.Overrides.Proto = &proto
				}
				w, err := newWorldOn(t, devOf, opts, 1<<20)
				require.NoError(t, err)
				for i := range 20 {
					s := pattern.Mix(seed, 15, uint64(i))
					cs := []call{
						{kind: kindColl, coll: kspace.AllReduce, ty: kspace.I32, o: ops[0], count: 3, seed: s},
						{kind: kindColl, coll: kspace.ReduceScatter, ty: kspace.I32, o: ops[0], count: 1, seed: s},
					}
					runCalls(t, w, cs, i%2 == 0)
				}
			})
		}
	}
}
