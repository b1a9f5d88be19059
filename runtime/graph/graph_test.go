package graph

import (
	"fmt"
	"math/bits"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/runtime/topo"
)

// layouts returns interesting rank->device assignments for n ranks.
func layouts(n int) map[string][]int {
	m := map[string][]int{}
	one := make([]int, n)
	m["one GPU"] = one
	perRank := make([]int, n)
	for r := range perRank {
		perRank[r] = r
	}
	m["GPU per rank"] = perRank
	for _, g := range []int{2, 3, 4, 8} {
		if g >= n {
			continue
		}
		blocked, cyclic := make([]int, n), make([]int, n)
		for r := range n {
			blocked[r] = r * g / n
			cyclic[r] = (r % g) * 2 // sparse ordinals
		}
		m[fmt.Sprintf("%d GPUs blocked", g)] = blocked
		m[fmt.Sprintf("%d GPUs round-robin", g)] = cyclic
	}
	return m
}

func TestRingsArePermutationsWithCoLocatedRanksAdjacent(t *testing.T) {
	for n := 1; n <= 16; n++ {
		for name, devs := range layouts(n) {
			l := topo.NewLayout(devs)
			for _, nc := range []int{1, 2, 3, 8, generated.MaxChannels} {
				rings := Rings(l, nc)
				require.Len(t, rings, nc)
				for c, ring := range rings {
					require.NoError(t, CheckRing(ring, n), "n=%d %s channel %d", n, name, c)
					// Ranks of one GPU form one contiguous run: the ring
					// changes GPU exactly NGPUs times (once if one GPU).
					changes := 0
					for i := range ring {
						if !l.SameGPU(ring[i], ring[(i+1)%n]) {
							changes++
						}
					}
					want := l.NGPUs
					if l.NGPUs == 1 {
						want = 0
					}
					assert.Equal(t, want, changes, "n=%d %s channel %d ring %v", n, name, c, ring)
				}
			}
		}
	}
}

func TestRingsVaryAcrossChannels(t *testing.T) {
	l := topo.NewLayout([]int{0, 1, 2, 3})
	rings := Rings(l, 4)
	assert.Equal(t, []int{0, 1, 2, 3}, rings[0])
	assert.Equal(t, []int{3, 2, 1, 0}, rings[1], "odd channels run the other way")
	assert.Equal(t, []int{1, 2, 3, 0}, rings[2])
	assert.Equal(t, []int{0, 3, 2, 1}, rings[3])

	// 8 ranks on one GPU: every channel's ring starts elsewhere.
	l = topo.NewLayout(make([]int, 8))
	rings = Rings(l, 4)
	assert.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7}, rings[0])
	assert.Equal(t, []int{7, 6, 5, 4, 3, 2, 1, 0}, rings[1])
	assert.Equal(t, []int{1, 2, 3, 4, 5, 6, 7, 0}, rings[2])

	assert.Nil(t, Rings(l, 0))
	assert.Nil(t, Rings(topo.NewLayout(nil), 2))
}

func TestRingsFollowPeerAccess(t *testing.T) {
	// Peer pairs 0-1, 1-3, 3-2, 2-0: ascending order (0-1-2-3) is not a
	// cycle of peers; the only one is 0-1-3-2.
	peers := map[[2]int]bool{{0, 1}: true, {1, 3}: true, {3, 2}: true, {2, 0}: true}
	l := topo.NewLayout([]int{0, 0, 1, 2, 3})
	require.NoError(t, l.ProbePeers(func(a, b int) (bool, error) {
		return peers[[2]int{a, b}] || peers[[2]int{b, a}], nil
	}))
	for c, ring := range Rings(l, 4) {
		require.NoError(t, CheckRing(ring, 5))
		for i := range ring {
			a, b := l.GPUOf[ring[i]], l.GPUOf[ring[(i+1)%5]]
			assert.True(t, l.Connected(a, b), "channel %d ring %v: GPUs %d and %d are not peers", c, ring, a, b)
		}
	}

	// No cycle exists: fall back to ascending order, still a permutation.
	l = topo.NewLayout([]int{0, 1, 2})
	require.NoError(t, l.ProbePeers(func(a, b int) (bool, error) { return false, nil }))
	assert.Equal(t, []int{0, 1, 2}, Rings(l, 1)[0])
}

func TestRingView(t *testing.T) {
	ring := []int{2, 0, 3, 1}
	prev, next, index, ur := RingView(ring, 3)
	assert.Equal(t, 0, prev)
	assert.Equal(t, 1, next)
	assert.Equal(t, 2, index)
	assert.Equal(t, []int32{3, 1, 2, 0}, ur)

	for n := 1; n <= 16; n++ {
		for _, ring := range Rings(topo.NewLayout(layouts(n)["2 GPUs round-robin"]), 2) {
			for _, r := range ring {
				prev, next, index, ur := RingView(ring, r)
				require.Equal(t, r, ring[index])
				require.Equal(t, int32(r), ur[0])
				require.Equal(t, int32(next), ur[1%n])
				require.Equal(t, int32(prev), ur[n-1])
				// Our next's prev is us.
				p2, _, _, _ := RingView(ring, next)
				require.Equal(t, r, p2)
			}
		}
	}
	assert.Panics(t, func() { RingView([]int{0, 1}, 5) })
}

func TestCheckRingRejects(t *testing.T) {
	assert.Error(t, CheckRing([]int{0, 1}, 3))
	assert.Error(t, CheckRing([]int{0, 0, 1}, 3))
	assert.Error(t, CheckRing([]int{0, 3, 1}, 3))
	assert.NoError(t, CheckRing([]int{2, 0, 1}, 3))
}

func TestTreesInvariants(t *testing.T) {
	for n := 1; n <= 64; n++ {
		trees := Trees(n, 4)
		require.Len(t, trees, 4)
		for k := range 2 {
			tr := trees[k]
			require.NoError(t, CheckTree(tr, n), "n=%d tree %d", n, k)
			// A binary tree over n nodes is at least floor(log2 n) deep; the
			// btree is at most one level deeper than that plus one.
			lo := bits.Len(uint(n)) - 1
			assert.GreaterOrEqual(t, tr.Depth, lo, "n=%d tree %d", n, k)
			assert.LessOrEqual(t, tr.Depth, lo+2, "n=%d tree %d", n, k)
			for r := range n {
				assert.LessOrEqual(t, len(tr.Children(r)), 2, "binary tree")
			}
			assert.Equal(t, trees[k], trees[k+2], "channel c uses tree c%%2")
		}
		if n == 1 {
			assert.Equal(t, -1, trees[0].Up[0])
			assert.Equal(t, []int{-1, -1, -1}, trees[0].Down[0])
			assert.Equal(t, 0, trees[0].Depth)
		}
	}
}

func TestTreesComplementary(t *testing.T) {
	// NCCL's pictures: 12 ranks mirror, 13 ranks shift.
	tr := Trees(12, 2)
	assert.Equal(t, 0, tr[0].Root())
	assert.Equal(t, []int{8, -1, -1}, tr[0].Down[0])
	assert.Equal(t, []int{2, 6, -1}, tr[0].Down[4])
	assert.Equal(t, 11, tr[1].Root())
	assert.Equal(t, []int{3, -1, -1}, tr[1].Down[11])
	assert.Equal(t, []int{7, 1, -1}, tr[1].Down[3])

	tr = Trees(13, 2)
	assert.Equal(t, 1, tr[1].Root())
	assert.Equal(t, []int{9, -1, -1}, tr[1].Down[1])
	assert.Equal(t, []int{5, 0, -1}, tr[1].Down[9])

	// Where n is even, no rank is a leaf in both trees; where it is odd,
	// at most one is (the shift cannot cover the wrap-around).
	for n := 2; n <= 64; n++ {
		tr := Trees(n, 2)
		both := 0
		for r := range n {
			if len(tr[0].Children(r)) == 0 && len(tr[1].Children(r)) == 0 {
				both++
			}
		}
		if n%2 == 0 {
			assert.Zero(t, both, "n=%d", n)
		} else {
			assert.LessOrEqual(t, both, 1, "n=%d", n)
		}
	}
}

func TestTreesOverOrder(t *testing.T) {
	order := []int{3, 1, 0, 2}
	tr := TreesOver(order, 2)
	for k := range tr {
		require.NoError(t, CheckTree(tr[k], 4))
	}
	// Position 0 (rank 3) is tree 0's root; position 2 (rank 0) its child.
	assert.Equal(t, 3, tr[0].Root())
	assert.Equal(t, []int{0, -1, -1}, tr[0].Down[3])
	assert.Nil(t, TreesOver(nil, 2))
	assert.Nil(t, Trees(4, 0))
}

func TestCheckTreeRejects(t *testing.T) {
	good := Trees(4, 1)[0]
	clone := func() Tree {
		c := Tree{Up: append([]int(nil), good.Up...), Depth: good.Depth}
		for _, d := range good.Down {
			c.Down = append(c.Down, append([]int(nil), d...))
		}
		return c
	}
	bad := clone()
	bad.Up[2] = 1 // parent that does not list it
	assert.Error(t, CheckTree(bad, 4))
	bad = clone()
	bad.Depth++
	assert.Error(t, CheckTree(bad, 4))
	bad = clone()
	bad.Up[bad.Root()] = 3
	assert.Error(t, CheckTree(bad, 4))
}

func TestTreeView(t *testing.T) {
	tr := Trees(12, 1)[0]
	v := tr.View(4)
	assert.Equal(t, generated.DevTree{Up: 8, Down: [3]int32{2, 6, -1}, Depth: int32(tr.Depth)}, v)
	assert.Equal(t, int32(-1), tr.View(0).Up)
}
