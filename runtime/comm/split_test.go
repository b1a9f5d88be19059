package comm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	goruntime "runtime"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/internal/leakcheck"
	"github.com/ncclgo/ncclgo/internal/testutil"
	"github.com/ncclgo/ncclgo/runtime/bootstrap"
	"github.com/ncclgo/ncclgo/runtime/residency"
)

// Split and Shrink of host-only engines: the exchanges, the views and the
// lifetimes, with no device (package ncclgo tests the API's arguments).

func TestSplitMembers(t *testing.T) {
	colors := []int{0, 1, 0, 1, 0, SplitNoColor, 0}
	keys := []int{5, 0, 5, 1, 0, 9, 5}
	m, r := splitMembers(colors, keys, 0)
	assert.Equal(t, []int{4, 0, 2, 6}, m, "by key, then by parent rank")
	assert.Equal(t, 1, r)
	m, r = splitMembers(colors, keys, 3)
	assert.Equal(t, []int{1, 3}, m)
	assert.Equal(t, 1, r)
}

func TestSplitArgsExchange(t *testing.T) {
	all := [][]byte{encodeSplitArgs(true, 2, -7), encodeSplitArgs(true, SplitNoColor, 0)}
	colors, keys, err := decodeSplitArgs(all)
	require.NoError(t, err)
	assert.Equal(t, []int{2, SplitNoColor}, colors)
	assert.Equal(t, []int{-7, 0}, keys)

	_, _, err = decodeSplitArgs([][]byte{encodeSplitArgs(true, 0, 0), encodeSplitArgs(false, -3, 0)})
	require.ErrorIs(t, err, ErrInvalidArgument)
	assert.Contains(t, err.Error(), "rank 1: color=-3")
	_, _, err = decodeSplitArgs([][]byte{encodeSplitArgs(false, 0, 0), encodeSplitArgs(true, 1, 0)})
	require.ErrorIs(t, err, ErrInvalidUsage)
	assert.Contains(t, err.Error(), "[0] failed")
	_, _, err = decodeSplitArgs([][]byte{{1, 2}})
	require.Error(t, err)
}

func TestSplitFake(t *testing.T) {
	for _, tcp := range []bool{false, true} {
		t.Run(map[bool]string{false: "inprocess", true: "tcp"}[tcp], func(t *testing.T) {
			before := goruntime.NumGoroutine()
			parents := fakeParents(t, 8, tcp)
			// Colors: rank 0 alone, 1-2, 3-6 (reversed by key), 7 none.
			color := []int{0, 1, 1, 2, 2, 2, 2, SplitNoColor}
			key := []int{0, 0, 0, 9, 8, 7, 6, 0}
			kids, errs := testutil.OnEveryRank(8, func(r int) (*Engine, error) {
				return split(context.Background(), parents[r], color[r], key[r])
			})
			for r, err := range errs {
				require.NoError(t, err, "rank %d", r)
			}
			assert.Nil(t, kids[7])
			got := childRanks(t, parents, kids)
			assert.Equal(t, map[int][]int{0: {0}, 1: {1, 2}, 2: {1, 2}, 3: {6, 5, 4, 3}, 4: {6, 5, 4, 3}, 5: {6, 5, 4, 3}, 6: {6, 5, 4, 3}}, got)
			assert.Equal(t, 3, kids[3].Rank())
			assert.Equal(t, 4, kids[3].Size())

			// A split of a child.
			grand, errs := testutil.OnEveryRank(4, func(i int) (*Engine, error) {
				return split(context.Background(), kids[3+i], kids[3+i].Rank()%2, 0)
			})
			for _, err := range errs {
				require.NoError(t, err)
			}
			g := childRanks(t, kids[3:7], grand)
			assert.Equal(t, map[int][]int{0: {0, 2}, 2: {0, 2}, 1: {1, 3}, 3: {1, 3}}, g, "by the child's rank (parent ranks 6 and 4, 5 and 3)")

			// The parent is untouched, and its second Split works.
			again, errs := testutil.OnEveryRank(8, func(r int) (*Engine, error) {
				return split(context.Background(), parents[r], 0, -r)
			})
			for _, err := range errs {
				require.NoError(t, err)
			}
			assert.Equal(t, []int{7, 6, 5, 4, 3, 2, 1, 0}, childRanks(t, parents, again)[0])

			// Parents may go first: the children's bootstrap stays.
			destroyAll(t, parents...)
			assert.Equal(t, []int{0, 2}, childRanks(t, kids[3:7], grand)[0])
			destroyAll(t, kids...)
			destroyAll(t, again...)
			destroyAll(t, grand...)
			assert.Zero(t, bootstrap.SharedNetworks())
			leakcheck.WaitGoroutines(t, before)
		})
	}
}

func TestShrinkFake(t *testing.T) {
	for _, abort := range []bool{false, true} {
		t.Run(map[bool]string{false: "default", true: "abort"}[abort], func(t *testing.T) {
			before := goruntime.NumGoroutine()
			parents := fakeParents(t, 5, false)
			if abort {
				// Rank 1 is dead: its bootstrap is gone.
				parents[1].net.Abort()
			}
			kids, errs := testutil.OnEveryRank(5, func(r int) (*Engine, error) {
				if r == 1 || r == 3 {
					return nil, nil // excluded ranks do not call Shrink
				}
				return shrink(context.Background(), parents[r], []int{3, 1}, abort)
			})
			for r, err := range errs {
				require.NoError(t, err, "rank %d", r)
			}
			got := childRanks(t, parents, kids)
			assert.Equal(t, map[int][]int{0: {0, 2, 4}, 2: {0, 2, 4}, 4: {0, 2, 4}}, got)
			assert.Equal(t, 2, kids[4].Rank())
			assert.Equal(t, 3, kids[4].Size())
			if abort {
				_, isConn := kids[0].net.(*bootstrap.Conn)
				assert.True(t, isConn, "a bootstrap of its own")
				require.True(t, parents[0].Aborted())
			} else {
				require.False(t, parents[0].Aborted())
				assert.IsType(t, &bootstrap.View{}, kids[0].net)
			}
			destroyAll(t, kids...)
			destroyAll(t, parents...)
			leakcheck.WaitGoroutines(t, before)
		})
	}
}

func TestShrinkDisagree(t *testing.T) {
	parents := fakeParents(t, 4, false)
	defer destroyAll(t, parents...)
	excl := [][]int{{3}, {3}, {1}, nil}
	start := time.Now()
	_, errs := testutil.OnEveryRank(4, func(r int) (*Engine, error) {
		if r == 3 {
			return nil, nil
		}
		return shrink(context.Background(), parents[r], excl[r], false)
	})
	assert.Less(t, time.Since(start), 10*time.Second, "a disagreement is no timeout")
	for r := range 3 {
		require.ErrorIs(t, errs[r], ErrInvalidUsage, "rank %d", r)
	}
	assert.Contains(t, errs[0].Error(), "rank 2 excludes [1]")
	assert.Contains(t, errs[1].Error(), "rank 2 excludes [1]")
	assert.Contains(t, errs[2].Error(), "rank 0 excludes [3]")

	// A bad list on one rank (package ncclgo's check fails it locally)
	// fails the others at once too.
	_, errs = testutil.OnEveryRank(3, func(r int) (*Engine, error) {
		var local error
		if r == 2 {
			local = fmt.Errorf("exclude=[3 3]: %w", ErrInvalidArgument)
		}
		return parents[r].Shrink(context.Background(), []int{3}, parents[r].Settings(), false, local)
	})
	require.ErrorIs(t, errs[2], ErrInvalidArgument)
	for r := range 2 {
		require.ErrorIs(t, errs[r], ErrInvalidUsage)
		assert.Contains(t, errs[r].Error(), "rank 2 failed")
	}
}

func TestShrinkAnnounceJSON(t *testing.T) {
	b, err := json.Marshal(shrinkAnnounce{OK: true, Exclude: []int{1}})
	require.NoError(t, err)
	var a shrinkAnnounce
	require.NoError(t, json.Unmarshal(b, &a))
	assert.True(t, slices.Equal(a.Exclude, []int{1}) && a.OK)
}

// hookNet runs after once its AllGather has returned.
type hookNet struct {
	bootstrap.Network
	after func()
}

func (h *hookNet) AllGather(ctx context.Context, mine []byte) ([][]byte, error) {
	all, err := h.Network.AllGather(ctx, mine)
	if h.after != nil {
		h.after()
		h.after = nil
	}
	return all, err
}

// TestSplitDestroyedDuringExchange: a Destroy of the parent between
// Split's exchange and the new view used to close the parent's network and
// then have the view retain it again: the child ran on a closed network,
// and the shared-network count kept an entry for it forever.
func TestSplitDestroyedDuringExchange(t *testing.T) {
	c := fakeParents(t, 1, false)[0]
	var destroyErr error
	c.net = &hookNet{Network: c.net, after: func() { destroyErr = c.Destroy() }}
	child, err := split(context.Background(), c, 0, 0)
	require.NoError(t, destroyErr)
	if child != nil {
		_ = child.Destroy()
	}
	require.ErrorIs(t, err, ErrDestroyed)
	assert.Nil(t, child)
	assert.Zero(t, bootstrap.SharedNetworks())
}

// TestDestroyAbortKeepsChildren: when a Destroy times out it aborts the
// communicator's ranks in this process; that used to abort their bootstrap
// network too, which their Split children's bootstrap travels over, so the
// children (other communicators) could no longer Split or Shrink.
func TestDestroyAbortKeepsChildren(t *testing.T) {
	parents := fakeParents(t, 2, false)
	l := residency.New()
	for _, p := range parents {
		var err error
		p.res.lease, err = l.Join("parents", "0", 100, map[string]int{"0": 2}, 8)
		require.NoError(t, err)
		p.addColocated()
	}
	kids, errs := testutil.OnEveryRank(2, func(r int) (*Engine, error) {
		return split(context.Background(), parents[r], 0, 0)
	})
	require.NoError(t, errors.Join(errs...))
	parents[0].abortColocated() // what Destroy does when the launches time out
	for _, p := range parents {
		require.True(t, p.Aborted())
	}
	grand, errs := testutil.OnEveryRank(2, func(r int) (*Engine, error) {
		return split(context.Background(), kids[r], 0, 0)
	})
	require.NoError(t, errors.Join(errs...), "the children's bootstrap still works")
	destroyAll(t, grand...)
	destroyAll(t, kids...)
	destroyAll(t, parents...)
}

// TestAbortKeepsChildren: Abort of a parent rank, called from another
// goroutine, ends that rank's bootstrap exchange at once, leaves the
// communicators split from the parent working (NCCL's ncclCommAbort does
// not touch them either), and makes the other parent ranks' next exchange
// fail at once with ErrCollectiveBroken instead of at the timeout (20 s).
func TestAbortKeepsChildren(t *testing.T) {
	for _, tcp := range []bool{false, true} {
		t.Run(map[bool]string{false: "in-process", true: "tcp"}[tcp], func(t *testing.T) {
			const n = 3
			ctx := context.Background()
			parents, kids := splitParents(t, n, tcp)

			// Rank 0 starts an exchange no peer joins, and is aborted meanwhile.
			done := make(chan error, 1)
			go func() {
				_, err := split(ctx, parents[0], 0, 0)
				done <- err
			}()
			time.Sleep(50 * time.Millisecond)
			t0 := time.Now()
			parents[0].Abort()
			select {
			case err := <-done:
				require.ErrorIs(t, err, ErrAborted)
				t.Logf("the aborted rank's Split, after %v: %v", time.Since(t0).Round(time.Microsecond), err)
			case <-time.After(5 * time.Second):
				t.Fatal("Abort did not end the rank's Split exchange")
			}
			require.True(t, parents[0].Aborted())

			t1 := time.Now()
			_, errs := testutil.OnEveryRank(n-1, func(i int) (*Engine, error) { return split(ctx, parents[i+1], 0, 0) })
			for i, err := range errs {
				require.ErrorIs(t, err, bootstrap.ErrCollectiveBroken, "rank %d", i+1)
			}
			require.Less(t, time.Since(t1), 5*time.Second, "the peers heard of the abort instead of timing out")

			grand, errs := testutil.OnEveryRank(n, func(r int) (*Engine, error) { return split(ctx, kids[r], 0, 0) })
			require.NoError(t, errors.Join(errs...), "the children's bootstrap still works")
			destroyAll(t, grand...)
			destroyAll(t, kids...)
			destroyAll(t, parents...)
		})
	}
}

func TestSurvivorsOf(t *testing.T) {
	assert.Equal(t, []int{0, 2, 4}, survivorsOf(6, []int{1, 3, 5}))
	assert.Equal(t, []int{0, 1}, survivorsOf(2, []int{}))
}
