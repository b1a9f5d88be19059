package graph

import (
	"fmt"

	"github.com/ncclgo/ncclgo/generated"
)

// Tree is one channel's tree, seen from every rank: Up[r] is rank r's
// parent (-1 at the root) and Down[r] its children, generated.MaxTreeArity
// entries padded with -1. Depth is the number of edges on the longest path
// from the root to a leaf (0 for a single rank).
type Tree struct {
	Up    []int
	Down  [][]int
	Depth int
}

// Root returns the rank whose Up is -1.
func (t Tree) Root() int {
	for r, u := range t.Up {
		if u == -1 {
			return r
		}
	}
	return -1
}

// Children returns rank r's children without the -1 padding.
func (t Tree) Children(r int) []int {
	var c []int
	for _, d := range t.Down[r] {
		if d >= 0 {
			c = append(c, d)
		}
	}
	return c
}

// Trees returns, per channel, NCCL's double binary tree over ranks
// 0..nRanks-1: channel c uses tree c%2. Tree 0 is the binary tree that
// alternates leaves and interior nodes (ncclGetBtree: odd ranks are leaves,
// rank 0 is the root above the largest power of two); tree 1 is its mirror
// (rank r plays nRanks-1-r) when nRanks is even and its shift by one (rank
// r plays r-1) when it is odd, so that a rank that is a leaf in one tree is
// an interior node in the other wherever the rank count permits. The two
// trees together spread each rank's send and receive work evenly.
func Trees(nRanks, nChannels int) []Tree {
	order := make([]int, nRanks)
	for i := range order {
		order[i] = i
	}
	return TreesOver(order, nChannels)
}

// TreesOver is Trees over positions of order: the tree node at position p
// is rank order[p]. Passing a channel's ring (Rings) keeps ranks that share
// a GPU next to each other in the tree as they are in the ring.
func TreesOver(order []int, nChannels int) []Tree {
	n := len(order)
	if n == 0 || nChannels <= 0 {
		return nil
	}
	var dt [2]Tree
	for k := range dt {
		dt[k] = Tree{Up: make([]int, n), Down: make([][]int, n)}
	}
	rank := func(p int) int {
		if p < 0 {
			return -1
		}
		return order[p]
	}
	for p := range n {
		u0, c00, c01, u1, c10, c11 := dtree(n, p)
		r := order[p]
		dt[0].Up[r] = rank(u0)
		dt[0].Down[r] = padded(rank(c00), rank(c01))
		dt[1].Up[r] = rank(u1)
		dt[1].Down[r] = padded(rank(c10), rank(c11))
	}
	for k := range dt {
		dt[k].Depth = depth(dt[k])
	}
	trees := make([]Tree, nChannels)
	for c := range trees {
		trees[c] = dt[c%2]
	}
	return trees
}

func padded(children ...int) []int {
	d := make([]int, generated.MaxTreeArity)
	for i := range d {
		d[i] = -1
	}
	i := 0
	for _, c := range children {
		if c >= 0 {
			d[i] = c
			i++
		}
	}
	return d
}

func depth(t Tree) int {
	root := t.Root()
	if root < 0 {
		return 0
	}
	var walk func(r, d int) int
	walk = func(r, d int) int {
		best := d
		for _, c := range t.Down[r] {
			if c >= 0 {
				best = max(best, walk(c, d+1))
			}
		}
		return best
	}
	return walk(root, 0)
}

// btree is NCCL's ncclGetBtree: the parent and two children of rank in a
// binary tree over nRanks rooted at 0, in which leaves and interior nodes
// alternate.
//
//	0---------------8
//	         ______/ \______
//	        4               12
//	      /   \            /  \
//	    2       6       10     \
//	   / \     / \     /  \     \
//	  1   3   5   7   9   11    13
func btree(nRanks, rank int) (up, down0, down1 int) {
	bit := 1
	for ; bit < nRanks; bit <<= 1 {
		if bit&rank != 0 {
			break
		}
	}
	if rank == 0 {
		if nRanks > 1 {
			return -1, -1, bit >> 1
		}
		return -1, -1, -1
	}
	up = (rank ^ bit) | (bit << 1)
	if up >= nRanks {
		up = rank ^ bit
	}
	lowbit := bit >> 1
	if lowbit == 0 {
		return up, -1, -1
	}
	down0 = rank - lowbit
	down1 = rank + lowbit
	for down1 >= nRanks {
		lowbit >>= 1
		if lowbit == 0 {
			down1 = -1
			break
		}
		down1 = rank + lowbit
	}
	return up, down0, down1
}

// dtree is NCCL's ncclGetDtree: rank's place in both trees of the double
// binary tree.
func dtree(nRanks, rank int) (u0, d00, d01, u1, d10, d11 int) {
	u0, d00, d01 = btree(nRanks, rank)
	var m func(int) int
	var s int
	if nRanks%2 == 1 {
		s = (rank - 1 + nRanks) % nRanks
		m = func(x int) int { return (x + 1) % nRanks }
	} else {
		s = nRanks - 1 - rank
		m = func(x int) int { return nRanks - 1 - x }
	}
	u, d0, d1 := btree(nRanks, s)
	f := func(x int) int {
		if x < 0 {
			return -1
		}
		return m(x)
	}
	return u0, d00, d01, f(u), f(d0), f(d1)
}

// CheckTree verifies a tree over nRanks ranks: one root, every other rank
// with exactly one parent that lists it as a child, at most
// generated.MaxTreeArity children, every rank reachable from the root, and
// Depth the longest root-to-leaf path.
func CheckTree(t Tree, nRanks int) error {
	if len(t.Up) != nRanks || len(t.Down) != nRanks {
		return fmt.Errorf("graph: tree has %d parents and %d child lists for %d ranks", len(t.Up), len(t.Down), nRanks)
	}
	roots := 0
	parentOf := make([]int, nRanks)
	for i := range parentOf {
		parentOf[i] = -2
	}
	for r := range nRanks {
		if len(t.Down[r]) != generated.MaxTreeArity {
			return fmt.Errorf("graph: rank %d has %d child slots, want %d", r, len(t.Down[r]), generated.MaxTreeArity)
		}
		for _, c := range t.Down[r] {
			if c == -1 {
				continue
			}
			if c < 0 || c >= nRanks || c == r {
				return fmt.Errorf("graph: rank %d has child %d", r, c)
			}
			if parentOf[c] != -2 {
				return fmt.Errorf("graph: rank %d is a child of both %d and %d", c, parentOf[c], r)
			}
			parentOf[c] = r
		}
	}
	for r := range nRanks {
		u := t.Up[r]
		if u == -1 {
			roots++
			if parentOf[r] != -2 {
				return fmt.Errorf("graph: root %d is a child of %d", r, parentOf[r])
			}
			continue
		}
		if u < 0 || u >= nRanks || u == r {
			return fmt.Errorf("graph: rank %d has parent %d", r, u)
		}
		if parentOf[r] != u {
			return fmt.Errorf("graph: rank %d has parent %d, which does not list it as a child", r, u)
		}
	}
	if roots != 1 {
		return fmt.Errorf("graph: tree has %d roots, want 1", roots)
	}
	seen := 0
	var walk func(r int)
	walk = func(r int) {
		seen++
		for _, c := range t.Children(r) {
			walk(c)
		}
	}
	walk(t.Root()) // parents are unique, so the walk terminates
	if seen != nRanks {
		return fmt.Errorf("graph: %d of %d ranks are reachable from root %d (a cycle)", seen, nRanks, t.Root())
	}
	if d := depth(t); d != t.Depth {
		return fmt.Errorf("graph: tree depth is %d, recorded as %d", d, t.Depth)
	}
	return nil
}

// View returns rank r's view of the tree in the device's layout.
func (t Tree) View(r int) generated.DevTree {
	v := generated.DevTree{Up: int32(t.Up[r]), Depth: int32(t.Depth)}
	for i := range v.Down {
		v.Down[i] = -1
		if i < len(t.Down[r]) {
			v.Down[i] = int32(t.Down[r][i])
		}
	}
	return v
}
