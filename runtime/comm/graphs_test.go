package comm

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/runtime/graph"
	"github.com/ncclgo/ncclgo/runtime/topo"
	"github.com/ncclgo/ncclgo/runtime/transport"
)

// TestBuildGraphsAcrossHosts: with ranks on several hosts, every ring
// leaves each host once and every tree crosses between hosts once per
// host but one; on one host the graphs are the layout's.
func TestBuildGraphsAcrossHosts(t *testing.T) {
	// 3 hosts × 2 GPUs, ranks numbered round-robin over the hosts: device
	// 0 on "a" and device 0 on "b" are different GPUs.
	var peers []transport.Peer
	for r := range 6 {
		peers = append(peers, transport.Peer{PID: 1 + r, Host: fmt.Sprintf("host-%c", 'a'+r%3), Device: r / 3})
	}
	devs := []int{0, 0, 0, 1, 1, 1}
	l := topo.NewLayout(devs) // what setup builds: the hosts' devices mixed
	rings, trees := buildGraphs(l, peers, 4)
	for ch := range 4 {
		require.NoError(t, graph.CheckRing(rings[ch], 6))
		require.NoError(t, graph.CheckTree(trees[ch], 6))
		ringCross, treeCross := 0, 0
		for i, r := range rings[ch] {
			if peers[r].Host != peers[rings[ch][(i+1)%6]].Host {
				ringCross++
			}
			if u := trees[ch].Up[r]; u >= 0 && peers[u].Host != peers[r].Host {
				treeCross++
			}
		}
		assert.Equal(t, 3, ringCross, "channel %d ring %v", ch, rings[ch])
		assert.Equal(t, 2, treeCross, "channel %d", ch)
	}

	// One host: the single-host graphs over the layout.
	for r := range peers {
		peers[r].Host = "one"
	}
	rings, trees = buildGraphs(l, peers, 4)
	assert.Equal(t, graph.Rings(l, 4), rings)
	assert.Equal(t, graph.Trees(6, 4), trees)
}
