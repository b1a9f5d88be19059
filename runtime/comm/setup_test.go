package comm

import (
	"fmt"
	"log/slog"
	"sync"
	"testing"

	"github.com/ncclgo/ncclgo/runtime/config"
	"github.com/ncclgo/ncclgo/runtime/enqueue"
	"github.com/ncclgo/ncclgo/runtime/graph"
	"github.com/ncclgo/ncclgo/runtime/topo"
	"github.com/ncclgo/ncclgo/runtime/transport"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCheckSharedGPUs(t *testing.T) {
	p := func(pid, dev int, bus string) transport.Peer {
		return transport.Peer{PID: pid, Host: "h", Device: dev, BusID: bus}
	}
	// One process, one GPU: fine.
	assert.NoError(t, checkSharedGPUs([]transport.Peer{p(1, 0, "a"), p(1, 0, "a")}, false))
	// Two processes, two GPUs: fine.
	assert.NoError(t, checkSharedGPUs([]transport.Peer{p(1, 0, "a"), p(2, 1, "b")}, false))
	// Two processes, one GPU (different ordinals, same bus id): MPS needed.
	err := checkSharedGPUs([]transport.Peer{p(1, 0, "a"), p(2, 1, "b"), p(3, 0, "a")}, false)
	require.ErrorIs(t, err, ErrSharedGPUNeedsMPS)
	assert.Contains(t, err.Error(), "rank 0 (pid 1) and rank 2 (pid 3)")
	assert.Contains(t, err.Error(), "MPS")
	assert.NoError(t, checkSharedGPUs([]transport.Peer{p(1, 0, "a"), p(3, 0, "a")}, true))
}

func TestLinkFunc(t *testing.T) {
	l := topo.NewLayout([]int{0, 1, 2, 0})
	require.NoError(t, l.ProbePeers(func(a, b int) (bool, error) { return a+b != 3, nil })) // 1<->2 has no peer access
	peers := []transport.Peer{{PID: 1, Host: "h", Device: 0}, {PID: 1, Host: "h", Device: 1}, {PID: 2, Host: "h", Device: 2}, {PID: 3, Host: "h", Device: 0}}
	link := linkFunc(l, 0, peers)
	assert.Equal(t, transport.Link{Path: transport.PathLOC, PeerAccess: true}, link(3))
	assert.Equal(t, transport.Link{Path: transport.PathPXB, PeerAccess: true}, link(1))
	assert.Equal(t, transport.Link{Path: transport.PathSYS}, linkFunc(l, 1, peers)(2))
	l.NVLinks = [][]int{{0, 4, 0}, {4, 0, 0}, {0, 0, 0}}
	assert.Equal(t, transport.PathNVL, linkFunc(l, 0, peers)(1).Path)
	assert.Equal(t, transport.PathPXB, linkFunc(l, 0, peers)(2).Path)
}

// TestEnablePeersPerProcess: with two processes of ranks on GPUs 0, 1, 2
// (process A: ranks 0 and 1 on GPUs 0 and 1; process B: ranks 2 and 3 on
// GPUs 0 and 2), each process enables access only between its own GPUs,
// from its own first rank on each.
func TestEnablePeersPerProcess(t *testing.T) {
	devs := []int{0, 1, 0, 2}
	proc := []int{1, 1, 2, 2}
	l := topo.NewLayout(devs)
	require.NoError(t, l.ProbePeers(allPeers))
	for _, pid := range []int{1, 2} {
		var mu sync.Mutex
		var calls [][2]int
		local := func(r int) bool { return proc[r] == pid }
		for r := range devs {
			if local(r) {
				require.NoError(t, enablePeers(l, r, local, fakePeers{dev: devs[r], mu: &mu, log: &calls}))
			}
		}
		want := map[int][][2]int{1: {{0, 1}, {1, 0}}, 2: {{0, 2}, {2, 0}}}[pid]
		assert.ElementsMatch(t, want, calls, "process %d", pid)
	}
}

func TestPeerLost(t *testing.T) {
	c := &Engine{rank: 0, log: slog.New(slog.DiscardHandler)}
	require.Nil(t, c.Lost())
	c.peerLost(&PeerLost{Rank: 3, PID: 42, Host: "h"})
	c.peerLost(&PeerLost{Rank: 2, PID: 41, Host: "h"}) // the first one stays
	require.Equal(t, &PeerLost{Rank: 3, PID: 42, Host: "h"}, c.Lost())
	assert.True(t, c.Aborted())
}

// Every connection one rank expects is expected by its peer too.
func TestEdgesAgree(t *testing.T) {
	for _, devs := range [][]int{{0, 0}, {0, 0, 0, 0}, {0, 1, 0, 1, 2}, {0, 0, 0, 0, 0, 0, 0, 0}} {
		n := len(devs)
		for _, nch := range []int{1, 3, 16} {
			t.Run(fmt.Sprintf("%v/%dch", devs, nch), func(t *testing.T) {
				l := topo.NewLayout(devs)
				rings := graph.Rings(l, nch)
				trees := graph.Trees(n, nch)
				set := map[transport.Edge]int{}
				for r := range n {
					for _, e := range edges(enqueue.Comm{Rank: r, NRanks: n, NChannels: nch, P2PChannelsPerPeer: 2}, rings, trees) {
						set[e]++
						assert.True(t, e.From == r || e.To == r)
					}
				}
				for e, k := range set {
					assert.Equal(t, 2, k, "edge %v is known to both ends", e)
				}
				// Every ring, tree and p2p neighbour is connected.
				for r := range n {
					for ch := range nch {
						_, next, _, _ := graph.RingView(rings[ch], r)
						if next != r {
							assert.Contains(t, set, transport.Edge{Channel: ch, From: r, To: next})
						}
						if up := trees[ch].Up[r]; up >= 0 {
							assert.Contains(t, set, transport.Edge{Channel: ch, From: up, To: r})
							assert.Contains(t, set, transport.Edge{Channel: ch, From: r, To: up})
						}
					}
					for d := 1; d < n; d++ {
						pc := enqueue.Comm{Rank: r, NRanks: n, NChannels: nch, P2PChannelsPerPeer: 2}
						for j := range 4 {
							assert.Contains(t, set, transport.Edge{Channel: enqueue.P2PChannel(pc, d, j), From: r, To: (r + d) % n})
						}
					}
				}
			})
		}
	}
}

func TestIgnoredSettings(t *testing.T) {
	assert.Empty(t, ignoredSettings(config.Default()))
	cfg, err := config.FromEnv(func(k string) (string, bool) {
		v, ok := map[string]string{"NCCL_LAUNCH_MODE": "group", "NCCL_IB_DISABLE": "1"}[k]
		return v, ok
	})
	require.NoError(t, err)
	got := ignoredSettings(cfg)
	require.Len(t, got, 2)
	assert.Contains(t, got[0], "NCCL_LAUNCH_MODE=GROUP has no effect")
	assert.Contains(t, got[1], "NCCL_IB_DISABLE=1 has no effect")
}
