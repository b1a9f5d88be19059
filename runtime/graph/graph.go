// Package graph builds the communication graphs: the ring of every channel
// and NCCL's double binary trees, over the GPUs of one host (Rings, Trees)
// or over several hosts (RingsAcrossHosts, TreesAcrossHosts).
//
// Graphs are pure data over rank numbers; they are computed identically on
// every rank, so ranks agree on them without exchanging anything beyond the
// topo.Layout.
package graph

import (
	"fmt"
	"slices"

	"github.com/ncclgo/ncclgo/runtime/topo"
)

// Rings returns, per channel, the ring order of the ranks: a permutation of
// 0..layout.NRanks-1 in which each rank sends to the next and the last to
// the first.
//
// Ranks sharing a GPU are adjacent, so a ring crosses between GPUs once per
// GPU. The GPUs are visited in an order in which consecutive GPUs can access
// each other's memory when the layout's peer matrix allows one (a search
// over at most a few GPUs; ascending ordinals otherwise). Across channels
// the GPU order is reversed on odd channels, so that both directions of
// every link carry traffic, and rotated every two channels, so that the
// ring's first rank (where chunk 0 starts) moves around; the ranks on one
// GPU rotate the same way. Every ring starts with its first GPU's first
// rank, so ring[0] differs between channels.
func Rings(layout topo.Layout, nChannels int) [][]int {
	if nChannels <= 0 || layout.NRanks == 0 {
		return nil
	}
	base := gpuOrder(layout)
	g := len(base)
	rings := make([][]int, nChannels)
	for c := range rings {
		rot := c / 2
		order := make([]int, g)
		for i := range order {
			order[i] = base[(i+rot)%g]
		}
		if c%2 == 1 {
			slices.Reverse(order)
		}
		ring := make([]int, 0, layout.NRanks)
		for _, gi := range order {
			ranks := layout.Ranks[gi]
			k := len(ranks)
			for i := range k {
				j := (i + rot) % k
				if c%2 == 1 {
					j = (k - 1 - i + rot) % k
				}
				ring = append(ring, ranks[j])
			}
		}
		rings[c] = ring
	}
	return rings
}

// maxSearch bounds the GPUs for which gpuOrder searches for a ring of
// peer-connected GPUs.
const maxSearch = 16

// gpuOrder returns the GPU indices in a ring order in which consecutive GPUs
// are connected, if one is found; ascending order otherwise.
func gpuOrder(l topo.Layout) []int {
	n := l.NGPUs
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	if n <= 2 || l.Peer == nil || cycleOK(l, order) || n > maxSearch {
		return order
	}
	// Depth-first search for a Hamiltonian cycle from GPU 0, trying lower
	// indices first so that the result is deterministic.
	used := make([]bool, n)
	path := []int{0}
	used[0] = true
	budget := 1 << 16
	var dfs func() bool
	dfs = func() bool {
		if budget--; budget < 0 {
			return false
		}
		if len(path) == n {
			return l.Connected(path[n-1], path[0])
		}
		last := path[len(path)-1]
		for next := range n {
			if used[next] || !l.Connected(last, next) {
				continue
			}
			used[next] = true
			path = append(path, next)
			if dfs() {
				return true
			}
			path = path[:len(path)-1]
			used[next] = false
		}
		return false
	}
	if dfs() {
		return path
	}
	return order
}

func cycleOK(l topo.Layout, order []int) bool {
	for i := range order {
		if !l.Connected(order[i], order[(i+1)%len(order)]) {
			return false
		}
	}
	return true
}

// RingView is one rank's view of a ring, as generated.DevRing holds it:
// prev is the rank it receives from, next the rank it sends to, index its
// position in ring, and userRanks[i] the rank i steps downstream of it
// (userRanks[0] is rank itself). It panics when rank is not in ring.
func RingView(ring []int, rank int) (prev, next, index int, userRanks []int32) {
	index = slices.Index(ring, rank)
	if index < 0 {
		panic(fmt.Sprintf("graph: rank %d is not in ring %v", rank, ring))
	}
	n := len(ring)
	userRanks = make([]int32, n)
	for i := range n {
		userRanks[i] = int32(ring[(index+i)%n])
	}
	return ring[(index+n-1)%n], ring[(index+1)%n], index, userRanks
}

// CheckRing reports whether ring is a permutation of 0..nRanks-1.
func CheckRing(ring []int, nRanks int) error {
	if len(ring) != nRanks {
		return fmt.Errorf("graph: ring %v has %d ranks, want %d", ring, len(ring), nRanks)
	}
	seen := make([]bool, nRanks)
	for _, r := range ring {
		if r < 0 || r >= nRanks {
			return fmt.Errorf("graph: ring %v holds rank %d, outside 0..%d", ring, r, nRanks-1)
		}
		if seen[r] {
			return fmt.Errorf("graph: ring %v holds rank %d twice", ring, r)
		}
		seen[r] = true
	}
	return nil
}
