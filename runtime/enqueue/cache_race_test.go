package enqueue

import (
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/tune"
)

// Goroutines plan into plans of their own through one PlanCache (one
// communicator's, say, called from several goroutines) and through caches
// of their own (several communicators): more shapes than the cache holds,
// so that hits, misses and replacements interleave, a Reset among them.
// Every plan is Build's, byte for byte, while other goroutines patch
// theirs, and writing into a plan BuildInto filled never changes what
// the cache hands out (run it with -race).
func TestPlanCacheConcurrent(t *testing.T) {
	tn := cacheTuner(t, tune.Topology{NRanks: 8, RanksPerGPU: 1, SMCount: 132, BlocksPerSM: 2, IntraBW: 20, NChannels: 32}, nil)
	c := Comm{Rank: 3, NRanks: 8, NChannels: 32, P2PChannelsPerPeer: 2}
	colls := []kspace.Coll{kspace.AllReduce, kspace.Broadcast, kspace.AllGather, kspace.ReduceScatter}
	sizes := []uint64{8, 4096, 1 << 20, 64 << 20}
	var shared PlanCache
	var wg sync.WaitGroup
	for g := range 6 {
		own := new(PlanCache)
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 11))
			var into [2]Plan // alternated: each keeps another shape's memory
			for i := range 300 {
				pc := own
				if g%2 == 0 {
					pc = &shared
				}
				if g == 0 && i%97 == 96 {
					pc.Reset()
				}
				tk := Task{Coll: colls[rng.IntN(len(colls))], Type: kspace.F32, Bytes: sizes[rng.IntN(len(sizes))] * 8}
				if tk.Coll == kspace.AllReduce {
					tk.Op = kspace.Sum
				}
				tk.Send = 0x1000_0000 + rng.Uint64N(1<<20)<<8
				tk.Recv = tk.Send
				if rng.IntN(2) == 0 {
					tk.Recv = 0x9000_0000 + rng.Uint64N(1<<20)<<8
				}
				tasks := []Task{tk}
				want, err := Build(c, tasks, tn, GeneratedLookup)
				if !assert.NoError(t, err) {
					return
				}
				dst := &into[i%2]
				if !assert.NoError(t, pc.BuildInto(dst, c, tasks, tn, GeneratedLookup)) {
					return
				}
				if !assert.Equal(t, want, withNils(*dst), "goroutine %d call %d: %+v", g, i, tk) ||
					!assert.Equal(t, planArgs(&want), planArgs(dst), "goroutine %d call %d: kernel arguments", g, i) {
					return
				}
				// The caller's plan is its own: scribbling on it changes
				// nobody else's.
				for j := range dst.Launches {
					for k := range dst.Launches[j].Works {
						dst.Launches[j].Works[k].Sendbuff = 0xdead
					}
				}
				for j := range dst.Copies {
					dst.Copies[j].Src = 0xdead
				}
			}
		})
	}
	wg.Wait()
	require.False(t, t.Failed())
}
