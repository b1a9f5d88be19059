package bootstrap

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// countingRank counts the messages a rank sends.
type countingRank struct {
	*inProcRank
	sends *atomic.Int64
}

func (c countingRank) sendMsg(ctx context.Context, peer int, class byte, tag int64, data []byte) error {
	c.sends.Add(1)
	return c.inProcRank.sendMsg(ctx, peer, class, tag, data)
}

func (c countingRank) replyMsg(ctx context.Context, peer int, class byte, tag int64, data []byte) error {
	c.sends.Add(1)
	return c.inProcRank.replyMsg(ctx, peer, class, tag, data)
}

// TestCollectiveRounds checks that Barrier sends one message up the
// gather tree and one to each child on the way down, and a small
// AllGather the same, and that one large block sends everybody
// round the ring, with the right result everywhere.
func TestCollectiveRounds(t *testing.T) {
	ctx := context.Background()
	for _, n := range []int{1, 2, 3, 5, 8, 13, 64, 100} {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			nets := NewInProcess(n)
			defer func() {
				for _, nw := range nets {
					nw.Close()
				}
			}()
			limit := treeBlockLimit(n, DefaultMaxMessageSize)
			run := func(name string, want func(r int) int64, fn func(tr transport) error) {
				t.Helper()
				counts := make([]atomic.Int64, n)
				errs := make([]error, n)
				var wg sync.WaitGroup
				for r := range n {
					wg.Go(func() { errs[r] = fn(countingRank{nets[r].(*inProcRank), &counts[r]}) })
				}
				wg.Wait()
				for r := range n {
					require.NoError(t, errs[r], "%s: rank %d", name, r)
					assert.Equal(t, want(r), counts[r].Load(), "%s: messages sent by rank %d", name, r)
				}
			}
			blk := func(r, size int) []byte {
				b := make([]byte, size)
				for i := range b {
					b[i] = byte(r*7 + i)
				}
				return b
			}
			check := func(tr transport, sizes func(int) int) error {
				all, err := allGather(ctx, tr, blk(tr.Rank(), sizes(tr.Rank())))
				if err != nil {
					return err
				}
				for p := range n {
					if !bytes.Equal(all[p], blk(p, sizes(p))) {
						return fmt.Errorf("block of rank %d: %d bytes, want %d", p, len(all[p]), sizes(p))
					}
				}
				return nil
			}
			tree := func(r int) int64 { return int64(min(r, 1) + len(gatherChildren(n, r))) }
			run("barrier", tree, func(tr transport) error { return barrier(ctx, tr) })
			run("small allgather", tree, func(tr transport) error {
				return check(tr, func(r int) int { return (r * 5) % 70 })
			})
			run("allgather at the limit", tree, func(tr transport) error {
				return check(tr, func(r int) int { return limit - r%2 })
			})
			// One rank's block over the limit: every rank falls back.
			large := n / 2
			run("allgather with one large block", func(r int) int64 { return tree(r) + int64(n-1) }, func(tr transport) error {
				return check(tr, func(r int) int {
					if r == large {
						return limit + 1
					}
					return r % 3
				})
			})
		})
	}
}

// TestFingersOnly checks item 3 of the scale issue over TCP: a rank knows
// only its fingers' addresses after Init, learns others on demand, and
// after collectives holds at most ⌈log2 n⌉ connections each way.
func TestFingersOnly(t *testing.T) {
	const n = 16
	nets := initTCP(t, n, loopbackOpts(20*time.Second))
	ctx := context.Background()
	c0 := nets[0].(*Conn)
	for p := range n {
		isFinger := p == 1 || p == 2 || p == 4 || p == 8
		assert.Equal(t, isFinger || p == 0, c0.PeerAddr(p) != "", "rank 0 knows rank %d's address", p)
	}
	onAll(t, nets, func(nw Network) error {
		if err := nw.Barrier(ctx); err != nil {
			return err
		}
		_, err := nw.AllGather(ctx, []byte{byte(nw.Rank())})
		return err
	})
	for r, nw := range nets {
		c := nw.(*Conn)
		c.mu.Lock()
		out, in := len(c.out), len(c.inPeers)
		c.mu.Unlock()
		assert.LessOrEqual(t, out, rounds(n), "rank %d: outgoing connections", r)
		assert.LessOrEqual(t, in, rounds(n), "rank %d: incoming connections", r)
	}
	// A lookup: rank 3 is no finger of rank 0 (distance 3).
	errc := make(chan error, 1)
	go func() { errc <- nets[0].Send(ctx, 3, 9, []byte("hi")) }()
	got, err := nets[3].Recv(ctx, 0, 9)
	require.NoError(t, err)
	require.NoError(t, <-errc)
	assert.Equal(t, "hi", string(got))
	assert.Equal(t, nets[3].(*Conn).self, c0.PeerAddr(3))
	assert.Equal(t, c0.self, nets[3].(*Conn).PeerAddr(0), "the target learns the origin's address")
}

func TestRootSlices(t *testing.T) {
	for n := 1; n <= 40; n++ {
		for k := 1; k <= min(n, MaxRoots); k++ {
			next := 0
			for i := range k {
				lo, hi := RootSlice(i, k, n)
				require.Equal(t, next, lo, "n=%d k=%d root %d", n, k, i)
				require.Greater(t, hi, lo, "n=%d k=%d root %d: empty slice", n, k, i)
				for r := lo; r < hi; r++ {
					require.Equal(t, i, RootOfRank(r, k, n), "n=%d k=%d rank %d", n, k, r)
				}
				next = hi
			}
			require.Equal(t, n, next)
		}
	}
}

// startRoots starts k roots and returns them with their ids.
func startRoots(t *testing.T, k int, opts Options) ([]*Root, []UniqueID) {
	t.Helper()
	roots := make([]*Root, k)
	ids := make([]UniqueID, k)
	for i := range k {
		r, id, err := NewRoot(context.Background(), opts)
		require.NoError(t, err)
		t.Cleanup(func() { r.Close() })
		roots[i], ids[i] = r, id
	}
	return roots, ids
}

func TestJoinScalable(t *testing.T) {
	for _, c := range []struct{ n, k int }{{10, 3}, {3, 3}, {17, 4}} {
		t.Run(fmt.Sprintf("ranks=%d,roots=%d", c.n, c.k), func(t *testing.T) {
			opts := loopbackOpts(20 * time.Second)
			ctx := context.Background()
			roots, ids := startRoots(t, c.k, opts)
			nets := make([]Network, c.n)
			errs := make([]error, c.n)
			var wg sync.WaitGroup
			for r := range c.n {
				wg.Go(func() {
					conn, err := JoinScalable(ctx, ids, r, c.n, opts)
					errs[r] = err
					if err == nil {
						nets[r] = conn
					}
				})
			}
			wg.Wait()
			for r := range c.n {
				require.NoError(t, errs[r], "rank %d", r)
			}
			t.Cleanup(func() {
				for _, nw := range nets {
					nw.Close()
				}
			})
			for i, root := range roots {
				require.NoError(t, root.Wait(ctx), "root %d", i)
			}
			exercise(t, nets)
		})
	}
}

func TestJoinScalableArgs(t *testing.T) {
	ctx := context.Background()
	opts := loopbackOpts(2 * time.Second)
	_, ids := startRoots(t, 3, opts)
	_, err := JoinScalable(ctx, ids, 0, 2, opts)
	require.ErrorContains(t, err, "3 root ids for 2 ranks: want 1..2")
	_, err = JoinScalable(ctx, nil, 0, 2, opts)
	require.ErrorContains(t, err, "0 root ids for 2 ranks")
	_, err = JoinScalable(ctx, []UniqueID{ids[0], ids[1], ids[0]}, 0, 4, opts)
	require.ErrorIs(t, err, ErrInvalidID)
	require.ErrorContains(t, err, "root ids 0 and 2 are the same root")
	_, err = JoinScalable(ctx, []UniqueID{ids[0], {}}, 0, 4, opts)
	require.ErrorIs(t, err, ErrInvalidID)
	require.ErrorContains(t, err, "root id 1")
}

// TestScalableRootRejects checks that a root refuses ranks that disagree
// on the roots or on which of them serves them.
func TestScalableRootRejects(t *testing.T) {
	ctx := context.Background()
	opts := loopbackOpts(5 * time.Second)
	_, ids := startRoots(t, 3, opts)
	magic, _, err := ids[0].decode()
	require.NoError(t, err)
	refs := make([]rootRef, 3)
	for i, id := range ids {
		m, ap, err := id.decode()
		require.NoError(t, err)
		refs[i] = rootRef{magic: m, addr: ap.String()}
	}
	checkIn := func(h hello) string {
		t.Helper()
		c, err := net.Dial("tcp", ids[0].Addr())
		require.NoError(t, err)
		defer c.Close()
		require.NoError(t, writeFrame(c, h.encode()))
		_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		b, err := readFrame(c, 4096)
		if err != nil {
			return "" // no answer yet: accepted
		}
		return string(b)
	}
	// 6 ranks over 3 roots: root 0 serves ranks 0 and 1.
	h := hello{magic: magic, kind: helloCheckInRoots, rank: 0, nRanks: 6, addr: "127.0.0.1:9", rootIndex: 0, roots: refs}
	assert.Equal(t, "", checkIn(h))
	h2 := h
	h2.rank = 4
	assert.Contains(t, checkIn(h2), "rank 4 checked in with root 0, which serves ranks 0..1")
	h3 := h
	h3.rank, h3.roots = 1, []rootRef{refs[0], refs[2], refs[1]}
	assert.Contains(t, checkIn(h3), "rank 1 names 3 roots with this one as root 0, others named 3")
	h4 := h
	h4.rank, h4.kind, h4.roots, h4.rootIndex = 1, helloCheckIn, nil, 0
	assert.Contains(t, checkIn(h4), "rank 1 names 1 roots")
	_ = ctx
}

// TestBarrierTrees checks that the collectives' gather tree spans the ranks
// from rank 0, with depth at most ⌈log2 n⌉, and that every edge goes from
// a rank r to a finger of it, r+2^k.
func TestBarrierTrees(t *testing.T) {
	for n := 1; n <= 300; n++ {
		finger := func(from, to int) bool {
			d := (to - from + n) % n
			return d != 0 && d&(d-1) == 0
		}
		for _, tr := range []struct {
			name     string
			parent   func(r int) int
			children func(r int) []int
		}{
			{"gather", func(r int) int { return gatherParent(n, r) }, func(r int) []int { return gatherChildren(n, r) }},
		} {
			kids := 0
			for r := range n {
				for _, c := range tr.children(r) {
					kids++
					require.Equal(t, r, tr.parent(c), "n %d %s: parent of child %d of %d", n, tr.name, c, r)
				}
				if r == 0 {
					continue
				}
				p, depth := r, 0
				for p != 0 {
					q := tr.parent(p)
					if tr.name == "gather" {
						require.True(t, finger(p, q), "n %d %s: edge %d-%d", n, tr.name, p, q)
					} else {
						require.True(t, finger(q, p), "n %d %s: edge %d-%d", n, tr.name, q, p)
					}
					p, depth = q, depth+1
					require.LessOrEqual(t, depth, rounds(n), "n %d %s: rank %d", n, tr.name, r)
				}
			}
			require.Equal(t, n-1, kids, "n %d %s: edges", n, tr.name)
		}
	}
}
