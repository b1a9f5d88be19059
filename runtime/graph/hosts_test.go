package graph

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/generated"
)

// placements returns rank placements over nHosts hosts with perHost ranks
// each: host ids and device ordinals per rank, ranks numbered host by host
// or round-robin over hosts, a GPU per rank or GPUs shared by two ranks.
func placements(nHosts, perHost int) map[string][2][]int {
	m := map[string][2][]int{}
	n := nHosts * perHost
	for _, numbering := range []string{"blocked", "round-robin"} {
		for _, share := range []int{1, 2} {
			hostOf, devs := make([]int, n), make([]int, n)
			for r := range n {
				h, local := r/perHost, r%perHost
				if numbering == "round-robin" {
					h, local = r%nHosts, r/nHosts
				}
				hostOf[r] = 100 + 7*h // any ids
				devs[r] = local / share
			}
			m[fmt.Sprintf("%s, %d ranks per GPU", numbering, share)] = [2][]int{hostOf, devs}
		}
	}
	return m
}

func TestRingsAcrossHostsLeaveEachHostOnce(t *testing.T) {
	for nh := 2; nh <= 16; nh++ {
		for per := 1; per <= 8; per++ {
			for name, p := range placements(nh, per) {
				hostOf, devs := p[0], p[1]
				n := len(hostOf)
				for _, nc := range []int{1, 2, 5, generated.MaxChannels} {
					rings := RingsAcrossHosts(hostOf, devs, nc)
					require.Len(t, rings, nc)
					for c, ring := range rings {
						require.NoError(t, CheckRing(ring, n), "%d hosts × %d, %s, channel %d", nh, per, name, c)
						crossings, gpuChanges := 0, 0
						for i := range ring {
							a, b := ring[i], ring[(i+1)%n]
							if hostOf[a] != hostOf[b] {
								crossings++
							} else if devs[a] != devs[b] {
								gpuChanges++
							}
						}
						require.Equal(t, nh, crossings, "%d hosts × %d, %s, channel %d: ring %v", nh, per, name, c, ring)
						// Inside a host, ranks of one GPU are adjacent: a run
						// over g GPUs changes GPU g-1 times.
						gpus := per
						if strings.HasSuffix(name, "2 ranks per GPU") {
							gpus = (per + 1) / 2
						}
						assert.Equal(t, nh*(gpus-1), gpuChanges, "%d hosts × %d, %s, channel %d: ring %v", nh, per, name, c, ring)
					}
				}
			}
		}
	}
}

func TestRingsAcrossHostsVaryAcrossChannels(t *testing.T) {
	// 3 hosts of 2 ranks, numbered round-robin.
	hostOf := []int{0, 1, 2, 0, 1, 2}
	devs := []int{0, 0, 0, 1, 1, 1}
	rings := RingsAcrossHosts(hostOf, devs, 4)
	assert.Equal(t, []int{0, 3, 1, 4, 2, 5}, rings[0])
	assert.Equal(t, []int{5, 2, 4, 1, 3, 0}, rings[1], "odd channels run the other way")
	assert.Equal(t, []int{4, 1, 5, 2, 3, 0}, rings[2], "rotated by one host, and inside each host")
	// One host: the host's rings.
	assert.Equal(t, [][]int{{0, 1, 2}, {2, 1, 0}}, RingsAcrossHosts([]int{5, 5, 5}, []int{0, 1, 2}, 2))
	assert.Nil(t, RingsAcrossHosts(nil, nil, 2))
	assert.Panics(t, func() { RingsAcrossHosts([]int{0}, []int{0, 1}, 1) })
}

func TestTreesAcrossHosts(t *testing.T) {
	for nh := 2; nh <= 16; nh++ {
		for per := 1; per <= 8; per++ {
			for name, p := range placements(nh, per) {
				hostOf, devs := p[0], p[1]
				n := len(hostOf)
				trees := TreesAcrossHosts(hostOf, devs, 4)
				require.Len(t, trees, 4)
				hosts := groupHosts(hostOf, devs)
				for c, tr := range trees {
					what := fmt.Sprintf("%d hosts × %d, %s, channel %d", nh, per, name, c)
					require.NoError(t, CheckTree(tr, n), what)
					assert.Equal(t, trees[c%2], tr)
					// The tree over hosts: the heads' links between hosts are
					// Trees' tree over host numbers.
					hostTree := Trees(nh, 2)[c%2]
					crossings := 0
					for r := range n {
						if u := tr.Up[r]; u >= 0 && hostOf[u] != hostOf[r] {
							crossings++
						}
					}
					assert.Equal(t, nh-1, crossings, what)
					wantDepth := 0
					for h, ranks := range hosts {
						head := ranks[0]
						for _, r := range ranks {
							if tr.Up[r] < 0 || hostOf[tr.Up[r]] != hostOf[r] {
								head = r
							}
						}
						up := -1
						if hostTree.Up[h] >= 0 {
							up = hostOf[hosts[hostTree.Up[h]][0]]
						}
						if tr.Up[head] >= 0 {
							assert.Equal(t, up, hostOf[tr.Up[head]], "%s: host %d's parent", what, h)
						} else {
							assert.Equal(t, -1, up, "%s: host %d is the root", what, h)
						}
						// The chain: each rank but the head has its parent on
						// its host and at most one child there.
						for _, r := range ranks {
							local := 0
							for _, ch := range tr.Children(r) {
								if hostOf[ch] == hostOf[r] {
									local++
								}
							}
							assert.LessOrEqual(t, local, 1, "%s: rank %d's children on its host", what, r)
						}
						wantDepth = max(wantDepth, hostDepth(hostTree, h)+len(ranks)-1)
					}
					assert.Equal(t, wantDepth, tr.Depth, what)
				}
			}
		}
	}
}

func hostDepth(t Tree, h int) int {
	d := 0
	for ; t.Up[h] >= 0; h = t.Up[h] {
		d++
	}
	return d
}

func TestTreesAcrossHostsExample(t *testing.T) {
	// 4 hosts of 2 ranks: chains 0→1, 2→3, 4→5, 6→7 under the host trees
	// 0→{2}, 2→{1, 3} (tree 0) and 3→{1}, 1→{0, 2} (tree 1, the mirror).
	hostOf := []int{0, 0, 1, 1, 2, 2, 3, 3}
	devs := []int{0, 1, 0, 1, 0, 1, 0, 1}
	trees := TreesAcrossHosts(hostOf, devs, 2)
	t0, t1 := trees[0], trees[1]
	assert.Equal(t, []int{-1, 0, 4, 2, 0, 4, 4, 6}, t0.Up)
	assert.Equal(t, []int{1, 4, -1}, t0.Down[0])
	assert.Equal(t, []int{5, 2, 6}, t0.Down[4])
	assert.Equal(t, 3, t0.Depth, "host 1 at depth 2, plus its chain")
	assert.Equal(t, []int{2, 0, 6, 2, 2, 4, -1, 6}, t1.Up)
	assert.Equal(t, 6, t1.Root())
}
