package comm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/bootstrap"
	"github.com/ncclgo/ncclgo/runtime/config"
	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/ncclgo/ncclgo/runtime/enqueue"
	"github.com/ncclgo/ncclgo/runtime/graph"
	"github.com/ncclgo/ncclgo/runtime/topo"
	"github.com/ncclgo/ncclgo/runtime/transport"
	"github.com/ncclgo/ncclgo/runtime/tune"
)

// multiLayouts are the rank→device assignments InitAll sees for several GPUs.
var multiLayouts = [][]int{
	{0, 1}, {0, 1, 2, 3}, {0, 1, 2, 3, 4, 5, 6, 7},
	{0, 0, 1, 1}, // 2 GPUs × 2 ranks each
	{0, 1, 0, 1}, // the same, ranks interleaved
	{3, 5},       // sparse ordinals (CUDA_VISIBLE_DEVICES subsets renumber, but -devices may not)
}

// fakePeers records the peer-access calls of one rank.
type fakePeers struct {
	dev  int
	mu   *sync.Mutex
	log  *[][2]int
	fail map[[2]int]error
}

func (f fakePeers) Enable(dev int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	*f.log = append(*f.log, [2]int{f.dev, dev})
	return f.fail[[2]int{f.dev, dev}]
}

func allPeers(int, int) (bool, error) { return true, nil }

func TestEnablePeersOncePerPairBothWays(t *testing.T) {
	for _, devs := range multiLayouts {
		t.Run(fmt.Sprint(devs), func(t *testing.T) {
			l := topo.NewLayout(devs)
			require.NoError(t, l.ProbePeers(allPeers))
			var mu sync.Mutex
			var calls [][2]int
			var wg sync.WaitGroup
			for r := range devs {
				wg.Go(func() {
					assert.NoError(t, enablePeers(l, r, nil, fakePeers{dev: devs[r], mu: &mu, log: &calls}))
				})
			}
			wg.Wait()
			var want [][2]int
			for _, a := range l.Ordinals {
				for _, b := range l.Ordinals {
					if a != b {
						want = append(want, [2]int{a, b})
					}
				}
			}
			slices.SortFunc(calls, func(x, y [2]int) int { return slices.Compare(x[:], y[:]) })
			assert.Equal(t, want, calls, "every ordered pair of distinct devices exactly once, never a device to itself")
		})
	}
}

func TestEnablePeersOneGPUAndUnreachable(t *testing.T) {
	var mu sync.Mutex
	var calls [][2]int
	l := topo.NewLayout([]int{0, 0, 0, 0})
	for r := range 4 {
		require.NoError(t, enablePeers(l, r, nil, fakePeers{dev: 0, mu: &mu, log: &calls}))
	}
	assert.Empty(t, calls, "ranks sharing one GPU need no peer access")

	// 0 and 1 reach each other; 2 reaches nobody and nobody reaches 2.
	l = topo.NewLayout([]int{0, 1, 2})
	require.NoError(t, l.ProbePeers(func(a, b int) (bool, error) { return a != 2 && b != 2, nil }))
	for r := range 3 {
		require.NoError(t, enablePeers(l, r, nil, fakePeers{dev: r, mu: &mu, log: &calls}))
	}
	assert.ElementsMatch(t, [][2]int{{0, 1}, {1, 0}}, calls)
	can0 := peerAccessFunc(l, 0)
	assert.True(t, can0(1))
	assert.True(t, can0(0))
	assert.False(t, can0(2))
	assert.False(t, can0(7), "a device outside the layout")

	boom := errors.New("boom")
	l = topo.NewLayout([]int{0, 1})
	require.NoError(t, l.ProbePeers(allPeers))
	err := enablePeers(l, 1, nil, fakePeers{dev: 1, mu: &mu, log: &calls, fail: map[[2]int]error{{1, 0}: boom}})
	assert.ErrorIs(t, err, boom)
	assert.Contains(t, err.Error(), "from device 1 to device 0")
}

func TestIntraLink(t *testing.T) {
	bus := []string{"0000:01:00.0", "0000:02:00.0"}
	l := topo.NewLayout([]int{0, 1})
	assert.Equal(t, tune.LinkNVLink, intraLink(l), "unknown counts: NVLink")
	links := func(m map[string][]string) topo.NVLinkFunc {
		return func(b string) ([]string, error) { return m[b], nil }
	}
	require.NoError(t, l.ProbeNVLinks(bus, links(map[string][]string{
		"0000:01:00.0": {"00000000:C0:00.0", "00000000:C1:00.0"}, "0000:02:00.0": {"00000000:C0:00.0"}})))
	assert.Equal(t, tune.LinkNVLink, intraLink(l), "NVSwitch")
	require.NoError(t, l.ProbeNVLinks(bus, links(map[string][]string{
		"0000:01:00.0": {"00000000:02:00.0"}, "0000:02:00.0": {"00000000:01:00.0"}})))
	assert.Equal(t, tune.LinkNVLink, intraLink(l), "direct NVLink")
	require.NoError(t, l.ProbeNVLinks(bus, links(map[string][]string{})))
	assert.Equal(t, tune.LinkPCI, intraLink(l), "no NVLink at all")
	assert.Equal(t, tune.LinkNVLink, intraLink(topo.NewLayout([]int{0, 0})))
}

// h200GPU is an H200 as topo.Describe reports it.
var h200GPU = topo.GPU{SMCount: 132, CCMajor: 9, MaxThreadsPerSM: 2048, MaxSharedPerSM: 233472}

func TestChannelsForSeveralGPUs(t *testing.T) {
	cases := []struct {
		devs []int
		env  map[string]string
		want int
	}{
		{[]int{0, 1}, nil, 32},
		{[]int{0, 1, 2, 3}, nil, 32},
		{[]int{0, 1, 2, 3, 4, 5, 6, 7}, nil, 32},
		{[]int{0, 0, 1, 1}, nil, 32},             // cap 132/2 = 66 per GPU
		{[]int{0, 0, 0, 0, 1, 1, 1, 1}, nil, 32}, // cap 33 per GPU, not 132/8
		{[]int{0, 0, 0, 0, 0, 0, 0, 0}, nil, 16}, // one GPU: 132/8
		{[]int{0, 1, 2, 3, 4, 5, 6, 7}, map[string]string{"NCCL_MAX_NCHANNELS": "64"}, 64},
		{[]int{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1}, map[string]string{"NCCL_MAX_NCHANNELS": "64"}, 16},
		{[]int{0, 1, 2, 3}, map[string]string{"NCCL_NCHANNELS": "24"}, 24},
	}
	for _, c := range cases {
		t.Run(fmt.Sprint(c.devs, c.env), func(t *testing.T) {
			cfg, err := config.FromEnv(func(k string) (string, bool) { v, ok := c.env[k]; return v, ok })
			require.NoError(t, err)
			l := topo.NewLayout(c.devs)
			tp := tuneTopology(l, h200GPU, 1, cfg)
			assert.Equal(t, l.RanksPerGPU, tp.RanksPerGPU, "the residency cap counts ranks per GPU")
			assert.Equal(t, l.NGPUs, tp.NGPUs)
			assert.Equal(t, tune.LinkNVLink, tp.IntraLink)
			tu, err := tune.New(tp, cfg, nil)
			require.NoError(t, err)
			assert.Equal(t, c.want, min(tu.MaxChannels(), generated.MaxChannels))
			// Large calls use every channel, and the model's bandwidth
			// grows with them (NVLink: 20 GB/s per channel).
			ch, err := tu.Choose(kspace.AllReduce, kspace.Sum, kspace.F32, 1<<30)
			require.NoError(t, err)
			assert.Equal(t, c.want, ch.NChannels, "%v", ch)
			assert.LessOrEqual(t, ch.NChannels*l.RanksPerGPU, h200GPU.SMCount, "every co-located rank stays resident")
		})
	}
}

// fakeDevMem is one rank's device memory: addresses carry the device
// ordinal in bits 40 and up, so a test can tell whose memory a pointer is.
type fakeDevMem struct {
	dev  int
	mu   sync.Mutex
	next uint64
	live map[cuda.DevicePtr]uint64
}

func (m *fakeDevMem) MemAlloc(n uint64) (cuda.DevicePtr, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := cuda.DevicePtr(uint64(m.dev+1)<<40 + m.next)
	m.next += (n + 0xfffff) &^ 0xfffff
	m.live[p] = n
	return p, nil
}

func (m *fakeDevMem) MemFree(p cuda.DevicePtr) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.live[p]; !ok {
		return fmt.Errorf("free of %#x, not allocated on device %d", uint64(p), m.dev)
	}
	delete(m.live, p)
	return nil
}

func (m *fakeDevMem) MemsetD8(cuda.DevicePtr, byte, uint64) error { return nil }

func devOf(p uint64) int { return int(p>>40) - 1 }

// TestSetupOverSeveralGPUs runs, for every rank of each layout, what
// initRank derives on the CPU (graphs, edges, connections), with a fake
// device memory per rank, and checks the connections across GPUs.
func TestSetupOverSeveralGPUs(t *testing.T) {
	for _, devs := range multiLayouts {
		t.Run(fmt.Sprint(devs), func(t *testing.T) {
			n := len(devs)
			l := topo.NewLayout(devs)
			require.NoError(t, l.ProbePeers(allPeers))
			tu, err := tune.New(tuneTopology(l, h200GPU, 1, config.Default()), config.Default(), nil)
			require.NoError(t, err)
			nch := min(tu.MaxChannels(), generated.MaxChannels)
			rings, trees := buildGraphs(l, nil, nch)
			require.Len(t, rings, nch)
			require.Len(t, trees, nch)
			for ch := range nch {
				require.NoError(t, graph.CheckRing(rings[ch], n))
				require.NoError(t, graph.CheckTree(trees[ch], n))
				// A ring crosses between GPUs once per GPU.
				crossings := 0
				for i, r := range rings[ch] {
					if devs[r] != devs[rings[ch][(i+1)%n]] {
						crossings++
					}
				}
				if l.NGPUs > 1 {
					assert.Equal(t, l.NGPUs, crossings, "channel %d ring %v", ch, rings[ch])
				}
			}
			pids := make([]transport.Peer, n)
			mems := make([]*fakeDevMem, n)
			for r := range n {
				pids[r] = transport.Peer{PID: 1, Host: "h", Device: devs[r]}
				mems[r] = &fakeDevMem{dev: devs[r], live: map[cuda.DevicePtr]uint64{}}
			}
			nets := bootstrap.NewInProcess(n)
			sets := make([]*transport.Set, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for r := range n {
				wg.Go(func() {
					plan := enqueue.Comm{Rank: r, NRanks: n, NChannels: nch, P2PChannelsPerPeer: 2}
					sets[r], errs[r] = transport.Connect(context.Background(), nets[r], mems[r], r, pids, edges(plan, rings, trees),
						transport.Sizes{1 << 16, 1 << 17, 1 << 20}, transport.Options{Link: linkFunc(l, r, pids)})
					if errs[r] != nil {
						nets[r].Abort()
					}
				})
			}
			wg.Wait()
			for r := range n {
				require.NoError(t, errs[r])
				require.NoError(t, nets[r].Close())
			}
			for r := range n {
				for k, s := range sets[r].Send {
					to := k.Peer
					for p := range 3 {
						assert.Equal(t, devs[to], devOf(s.Buffs[p]), "rank %d → %d: FIFOs on the receiver's device", r, to)
					}
					assert.Equal(t, devs[to], devOf(s.Head))
					assert.Equal(t, devs[to], devOf(s.Tail))
					assert.Equal(t, devs[r], devOf(s.Step), "the sender's step word is its own")
					rv := sets[to].Recv[transport.Key{Channel: k.Channel, Peer: r}]
					assert.Equal(t, rv.Buffs, s.Buffs)
					assert.Equal(t, devs[to], devOf(rv.Step))
					same := devs[r] == devs[to]
					for _, f := range []uint32{s.Flags, rv.Flags} {
						assert.NotZero(t, f&generated.ConnDirect, "direct across GPUs too")
						assert.Equal(t, same, f&generated.ConnSameGpu != 0,
							"NG_CONN_SAME_GPU only on one GPU (the device fences at system scope otherwise)")
					}
				}
				// Every ring and tree neighbour is connected.
				for ch := range nch {
					_, next, _, _ := graph.RingView(rings[ch], r)
					assert.Contains(t, sets[r].Send, transport.Key{Channel: ch, Peer: next})
					for _, d := range trees[ch].Children(r) {
						assert.Contains(t, sets[r].Send, transport.Key{Channel: ch, Peer: d})
						assert.Contains(t, sets[r].Recv, transport.Key{Channel: ch, Peer: d})
					}
				}
			}
			for r := range n {
				require.NoError(t, sets[r].Close())
				assert.Empty(t, mems[r].live, "every buffer freed in its own device's context")
			}
		})
	}
}

// TestWithNodes: distinct hosts are nodes, and a topology of several nodes
// gets a positive bandwidth between them, which the tuner requires.
func TestWithNodes(t *testing.T) {
	peers := []transport.Peer{{Host: "a"}, {Host: "a"}, {Host: "b"}}
	tp := withNodes(tune.Topology{NRanks: 3}, peers)
	assert.Equal(t, 2, tp.NNodes)
	assert.Positive(t, tp.InterBW)
	tp = withNodes(tune.Topology{NRanks: 2}, peers[:2])
	assert.Equal(t, 1, tp.NNodes)
	assert.Zero(t, tp.InterBW)
	tp = withNodes(tuneTopology(topo.NewLayout([]int{0, 0}), h200GPU, 1, config.Default()), []transport.Peer{{Host: "a"}, {Host: "b"}})
	_, err := tune.New(tp, config.Default(), nil)
	assert.NoError(t, err, "a two-host topology must tune")
}
