package ncclgo

import (
	"log/slog"
	"sync"
	"testing"

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
	c := &Comm{rank: 0, log: slog.New(slog.DiscardHandler)}
	require.NoError(t, c.Err())
	c.peerLost(&PeerLostError{Rank: 3, PID: 42, Host: "h"})
	c.peerLost(&PeerLostError{Rank: 2, PID: 41, Host: "h"}) // the first one stays
	err := c.Err()
	require.ErrorIs(t, err, ErrAborted)
	var pl *PeerLostError
	require.ErrorAs(t, err, &pl)
	assert.Equal(t, 3, pl.Rank)
	assert.True(t, c.aborted.Load())
	err = c.usable("AllReduce")
	require.ErrorIs(t, err, ErrAborted)
	assert.Contains(t, err.Error(), "rank 3 (pid 42 on h) exited without destroying the communicator")
}
