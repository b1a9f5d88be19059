package tune

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/config"
)

// BenchmarkChoose8B is the tuner's share of an 8-byte AllReduce's host
// cost, with a build that lacks some functions (so availability matters).
func BenchmarkChoose8B(b *testing.B) {
	avail := func(f kspace.Func) bool { return f.Type != kspace.F8E4M3 }
	tu, err := New(h200(2), config.Config{}, avail)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tu.Choose(kspace.AllReduce, kspace.Sum, kspace.F32, 8); err != nil {
			b.Fatal(err)
		}
	}
}

// TestChannelsClosedForm checks channels against the step-by-step rule it
// replaces: drop a channel while each thread gets less than its threshold
// (down to minCh), then halve the threads.
func TestChannelsClosedForm(t *testing.T) {
	for _, topo := range []Topology{h200(2), h200(8), {NRanks: 8, NGPUs: 8, RanksPerGPU: 1, SMCount: 132, BlocksPerSM: 1, IntraBW: 20}} {
		for _, cfg := range []config.Config{{}, {MinNChannels: 4}, {NChannels: 3}, {NThreads: 256}} {
			tu, err := New(topo, cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range []kspace.Algo{kspace.Ring, kspace.Tree} {
				for p := kspace.Proto(0); p < kspace.NumProtos; p++ {
					for nBytes := int64(0); nBytes < 1<<28; nBytes = nBytes*3/2 + 1 {
						nc, nt := tu.maxCh, tu.nThreads[p]
						thr := threadThreshold[p]
						if a == kspace.Ring && p == kspace.LL {
							thr *= int64(tu.topo.NRanks)
						}
						for nBytes < int64(nc)*int64(nt)*thr {
							if nc > tu.minCh {
								nc--
							} else if nt%128 == 0 && nt > 2*config.WarpSize {
								nt /= 2
							} else {
								break
							}
						}
						gc, gt := tu.channels(a, p, nBytes)
						if gc != nc || gt != nt {
							t.Fatalf("%+v %+v %s/%s %d B: channels = %d, %d; want %d, %d", topo, cfg, a, p, nBytes, gc, gt, nc, nt)
						}
					}
				}
			}
		}
	}
}

// A call of the shape and size of the one before takes the choice made
// then; any other size is worked out again, so the answers are the
// model's whatever the order of the calls.
func TestChooseRemembersTheLastChoice(t *testing.T) {
	memo, err := New(h200Direct(8), config.Config{}, nil)
	require.NoError(t, err)
	_, err = memo.Choose(kspace.AllReduce, kspace.Sum, kspace.F32, 8)
	require.NoError(t, err)
	m := memo.last[kspace.AllReduce][kspace.Sum][kspace.F32].Load()
	require.NotNil(t, m, "the choice is remembered")
	assert.Equal(t, int64(8), m.nBytes)
	rng := rand.New(rand.NewPCG(1, 2))
	colls := []kspace.Coll{kspace.AllReduce, kspace.AllGather, kspace.ReduceScatter, kspace.Broadcast, kspace.SendRecv}
	for range 2000 {
		c := colls[rng.IntN(len(colls))]
		ty := []kspace.Type{kspace.F32, kspace.BF16}[rng.IntN(2)]
		n := []int64{8, 8, 4096, 1 << 20, int64(rng.IntN(1 << 24))}[rng.IntN(5)]
		fresh, err := New(h200Direct(8), config.Config{}, nil)
		require.NoError(t, err)
		want, err := fresh.Choose(c, kspace.Sum, ty, n)
		require.NoError(t, err)
		got, err := memo.Choose(c, kspace.Sum, ty, n)
		require.NoError(t, err)
		require.Equal(t, want, got, "%s %s %d bytes", c, ty, n)
	}
}
