package comm

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/runtime/enqueue"
	"github.com/ncclgo/ncclgo/runtime/graph"
	"github.com/ncclgo/ncclgo/runtime/topo"
	"github.com/ncclgo/ncclgo/runtime/transport"
)

// TestPATEdges checks that, with one rank per host, every connection the
// PAT schedules use is set up by both of its ends on every PAT channel,
// and that nothing is added otherwise.
func TestPATEdges(t *testing.T) {
	for n := 1; n <= 17; n++ {
		for _, nch := range []int{1, 3, 8} {
			t.Run(fmt.Sprintf("n=%d/%dch", n, nch), func(t *testing.T) {
				devs := make([]int, n)
				rings := graph.Rings(topo.NewLayout(devs), nch)
				trees := graph.Trees(n, nch)
				set := map[transport.Edge]int{}
				for r := range n {
					plan := enqueue.Comm{Rank: r, NRanks: n, NChannels: nch, P2PChannelsPerPeer: 2}
					base := edges(plan, rings, trees)
					assert.Equal(t, base, withPATEdges(base, plan, false))
					es := withPATEdges(base, plan, true)
					for i := 1; i < len(es); i++ {
						require.NotEqual(t, es[i-1], es[i], "duplicate edge")
					}
					for _, e := range es {
						set[e]++
					}
				}
				for e, k := range set {
					assert.Equal(t, 2, k, "edge %v is known to both ends", e)
				}
				plan := enqueue.Comm{NRanks: n, NChannels: nch}
				for ch := range enqueue.PATChannels(plan) {
					for r := range n {
						for _, s := range append(enqueue.PATAllGather(r, n, enqueue.PATWindow), enqueue.PATReduceScatter(r, n)...) {
							for _, p := range s.Send {
								assert.Contains(t, set, transport.Edge{Channel: ch, From: r, To: p})
							}
							for _, p := range s.Recv {
								assert.Contains(t, set, transport.Edge{Channel: ch, From: p, To: r})
							}
						}
					}
				}
			})
		}
	}
}
