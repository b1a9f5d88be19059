package graph

import (
	"fmt"
	"slices"

	"github.com/ncclgo/ncclgo/runtime/topo"
)

// The graphs of ranks on several hosts. hostOf[r] identifies rank r's host
// (any integers; equal means the same host) and devs[r] its device ordinal
// on that host. Hosts are numbered in the order of their lowest rank.
//
// These graphs use no peer matrix: each host probes only its own GPUs, and
// the graphs must come out the same on every rank. Inside a host, GPUs are
// visited in ascending ordinals and ranks sharing a GPU are adjacent.

// groupHosts returns the ranks of each host, ascending, hosts in the
// order of their lowest rank. It panics when devs and hostOf differ in
// length (both come from the same rank descriptions).
func groupHosts(hostOf, devs []int) [][]int {
	if len(hostOf) != len(devs) {
		panic(fmt.Sprintf("graph: %d host ids for %d devices", len(hostOf), len(devs)))
	}
	index := map[int]int{}
	var hosts [][]int
	for r, h := range hostOf {
		i, ok := index[h]
		if !ok {
			i = len(hosts)
			index[h] = i
			hosts = append(hosts, nil)
		}
		hosts[i] = append(hosts[i], r)
	}
	return hosts
}

// hostLayout is the layout of one host's ranks (indices into ranks).
func hostLayout(ranks, devs []int) topo.Layout {
	d := make([]int, len(ranks))
	for i, r := range ranks {
		d[i] = devs[r]
	}
	return topo.NewLayout(d)
}

// RingsAcrossHosts returns, per channel, a ring over all ranks in which
// each host's ranks are contiguous, so that every ring leaves each host
// exactly once (crosses between hosts as many times as there are hosts,
// none with one host). Each host's run is Rings of that host's layout for
// the channel; the hosts follow one another in order, reversed on odd
// channels (each run is too: the whole ring runs the other way) and
// rotated every two channels, as Rings does with GPUs.
func RingsAcrossHosts(hostOf, devs []int, nChannels int) [][]int {
	hosts := groupHosts(hostOf, devs)
	if nChannels <= 0 || len(hosts) == 0 {
		return nil
	}
	runs := make([][][]int, len(hosts)) // per host, per channel
	for h, ranks := range hosts {
		runs[h] = Rings(hostLayout(ranks, devs), nChannels)
		for _, run := range runs[h] {
			for i, local := range run {
				run[i] = ranks[local]
			}
		}
	}
	nh := len(hosts)
	rings := make([][]int, nChannels)
	for c := range rings {
		order := make([]int, nh)
		for i := range order {
			order[i] = (i + c/2) % nh
		}
		if c%2 == 1 {
			slices.Reverse(order)
		}
		ring := make([]int, 0, len(hostOf))
		for _, h := range order {
			ring = append(ring, runs[h][c]...)
		}
		rings[c] = ring
	}
	return rings
}

// TreesAcrossHosts returns, per channel, NCCL's double binary tree over
// hosts with a chain inside each host: channel c uses tree c%2. A host's
// chain is its ranks, GPU by GPU (ascending ordinals, ranks sharing a GPU
// adjacent); each rank's parent is the one before it in the chain. The
// chain's head takes the host's place in the binary tree over hosts
// (Trees' trees over host numbers): its parent is the parent host's head,
// and the child hosts' heads are its children besides the next rank of
// its chain (at most three children). So a tree crosses between hosts
// once per host but the root's, and its depth is, over hosts, the host's
// depth in the host tree plus its chain length less one.
func TreesAcrossHosts(hostOf, devs []int, nChannels int) []Tree {
	hosts := groupHosts(hostOf, devs)
	n, nh := len(hostOf), len(hosts)
	if nChannels <= 0 || nh == 0 {
		return nil
	}
	chains := make([][]int, nh)
	for h, ranks := range hosts {
		for _, gpu := range hostLayout(ranks, devs).Ranks {
			for _, local := range gpu {
				chains[h] = append(chains[h], ranks[local])
			}
		}
	}
	head := func(h int) int {
		if h < 0 {
			return -1
		}
		return chains[h][0]
	}
	var dt [2]Tree
	for k := range dt {
		t := Tree{Up: make([]int, n), Down: make([][]int, n)}
		for _, chain := range chains {
			for i, r := range chain {
				t.Up[r] = -1
				next := -1
				if i > 0 {
					t.Up[r] = chain[i-1]
				}
				if i+1 < len(chain) {
					next = chain[i+1]
				}
				t.Down[r] = padded(next)
			}
		}
		for h := range nh {
			u0, c00, c01, u1, c10, c11 := dtree(nh, h)
			up, c0, c1 := u0, c00, c01
			if k == 1 {
				up, c0, c1 = u1, c10, c11
			}
			r := head(h)
			t.Up[r] = head(up)
			t.Down[r] = padded(t.Down[r][0], head(c0), head(c1))
		}
		t.Depth = depth(t)
		dt[k] = t
	}
	trees := make([]Tree, nChannels)
	for c := range trees {
		trees[c] = dt[c%2]
	}
	return trees
}
