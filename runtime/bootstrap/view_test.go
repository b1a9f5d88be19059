package bootstrap

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The views' tests came with the views from package ncclgo (splitnet.go).

func TestViewTags(t *testing.T) {
	a := ViewID(0, 'S', 1)
	assert.NotEqual(t, a, ViewID(0, 'S', 2))
	assert.NotEqual(t, a, ViewID(0, 's', 1))
	assert.NotEqual(t, a, ViewID(a, 'S', 1))
	tag := ViewTag(a, false, 7)
	assert.Positive(t, tag)
	assert.NotEqual(t, tag, ViewTag(a, true, 7))
	assert.NotEqual(t, tag, ViewTag(a^1, false, 7))
	assert.GreaterOrEqual(t, tag, viewSpace, "views never use the small tags of root networks")
}

// viewOnEveryRank runs fn for ranks 0..n-1 at once and returns the results.
func viewOnEveryRank[T any](n int, fn func(r int) (T, error)) ([]T, []error) {
	out, errs := make([]T, n), make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() { out[r], errs[r] = fn(r) })
	}
	wg.Wait()
	return out, errs
}

func viewGatherInts(t *testing.T, nets []Network, val func(r int) int) [][]int {
	t.Helper()
	out, errs := viewOnEveryRank(len(nets), func(r int) ([]int, error) {
		all, err := nets[r].AllGather(context.Background(), fmt.Append(nil, val(r)))
		if err != nil {
			return nil, err
		}
		v := make([]int, len(all))
		for i, b := range all {
			_, err = fmt.Sscan(string(b), &v[i])
			if err != nil {
				return nil, err
			}
		}
		return v, nil
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	return out
}

func TestSubNetOverInProcess(t *testing.T) {
	root := NewInProcess(8)
	// Two interleaved views, and one of a view, all busy with the root's
	// own collectives at the same time.
	even, odd := []int{6, 0, 2, 4}, []int{1, 3, 5, 7}
	views := make([]Network, 8)
	for i, r := range even {
		views[r] = NewView(root[r], even, i, ViewID(0, 'S', 1), 10*time.Second)
	}
	for i, r := range odd {
		views[r] = NewView(root[r], odd, i, ViewID(0, 'S', 1), 10*time.Second)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for range 20 {
			got := viewGatherInts(t, root, func(r int) int { return 100 + r })
			assert.Equal(t, []int{100, 101, 102, 103, 104, 105, 106, 107}, got[3])
		}
	})
	for range 20 {
		got := viewGatherInts(t, views, func(r int) int { return r })
		for r := range 8 {
			if r%2 == 0 {
				assert.Equal(t, even, got[r])
			} else {
				assert.Equal(t, odd, got[r])
			}
		}
	}
	wg.Wait()
	_, errs := viewOnEveryRank(8, func(r int) (struct{}, error) { return struct{}{}, views[r].Barrier(context.Background()) })
	for _, err := range errs {
		require.NoError(t, err)
	}

	// A view of a view: ranks 0 and 4 of the even view (parent ranks 6, 4).
	sub := []Network{
		NewView(views[4], []int{3, 0}, 0, ViewID(PathID(views[4]), 'S', 1), 10*time.Second),
		NewView(views[6], []int{3, 0}, 1, ViewID(PathID(views[6]), 'S', 1), 10*time.Second),
	}
	got := viewGatherInts(t, sub, func(r int) int { return 10 + r })
	assert.Equal(t, []int{10, 11}, got[1])
	assert.Equal(t, []int{4, 6}, sub[0].(*View).members, "mapped onto the root's ranks")

	// Point to point, in the view's own tag space.
	ctx := context.Background()
	require.NoError(t, views[0].Send(ctx, 3, 5, []byte("view")))
	require.NoError(t, root[0].Send(ctx, 4, 5, []byte("root")))
	b, err := views[4].Recv(ctx, 1, 5)
	require.NoError(t, err)
	assert.Equal(t, "view", string(b))
	b, err = root[4].Recv(ctx, 0, 5)
	require.NoError(t, err)
	assert.Equal(t, "root", string(b))
	require.ErrorContains(t, views[0].Send(ctx, 4, 0, nil), "out of range")
	require.ErrorContains(t, views[0].Send(ctx, 1, MaxViewTag+1, nil), "tag")

	// Abort of a view ends its waits only.
	recvErr := make(chan error, 1)
	go func() { _, err := views[1].Recv(ctx, 2, 9); recvErr <- err }()
	time.Sleep(20 * time.Millisecond)
	views[1].Abort()
	select {
	case err := <-recvErr:
		require.ErrorIs(t, err, ErrAborted)
	case <-time.After(5 * time.Second):
		t.Fatal("Abort did not wake the view's Recv")
	}
	require.ErrorIs(t, views[1].Send(ctx, 0, 1, nil), ErrAborted)
	viewGatherInts(t, root, func(r int) int { return r })

	// The root network closes when its owner and every view have closed.
	for _, v := range sub {
		require.NoError(t, CloseShared(v))
	}
	for r := range 8 {
		require.NoError(t, CloseShared(root[r]))
	}
	require.NoError(t, root[2].Send(ctx, 0, 1, nil), "views of rank 2 still open")
	evens := []Network{views[6], views[0], views[2], views[4]}
	assert.Equal(t, []int{0, 1, 4, 9}, viewGatherInts(t, evens, func(r int) int { return r * r })[0], "the views still work")
	for r := range 8 {
		require.NoError(t, CloseShared(views[r]))
		if r != 1 {
			require.ErrorIs(t, views[r].Barrier(ctx), ErrClosed)
		}
	}
	require.ErrorIs(t, root[2].Send(ctx, 0, 1, nil), ErrClosed)
	assert.Zero(t, SharedNetworks(), "every root forgotten")
}

// A collective that fails on one rank fails on the others at once (the
// abandon travels around the ring), and is final.
func TestSubNetAbandon(t *testing.T) {
	root := NewInProcess(3)
	members := []int{0, 1, 2}
	views := make([]Network, 3)
	for r := range 3 {
		views[r] = NewView(root[r], members, r, 42, 30*time.Second)
	}
	t.Cleanup(func() {
		for r := range 3 {
			_ = CloseShared(views[r])
			_ = CloseShared(root[r])
		}
	})
	viewGatherInts(t, views, func(r int) int { return r })
	start := time.Now()
	_, errs := viewOnEveryRank(3, func(r int) ([][]byte, error) {
		ctx := context.Background()
		if r == 0 {
			c, cancel := context.WithCancel(ctx)
			cancel()
			ctx = c
		}
		return views[r].AllGather(ctx, []byte{byte(r)})
	})
	assert.Less(t, time.Since(start), 5*time.Second)
	for r, err := range errs {
		require.ErrorIs(t, err, ErrCollectiveBroken, "rank %d", r)
	}
	_, err := views[1].AllGather(context.Background(), nil)
	require.ErrorIs(t, err, ErrCollectiveBroken, "final")
}

// A rank that aborts its view between collectives does not leave the
// others waiting for it until their timeout.
func TestSubNetAbortReleasesPeers(t *testing.T) {
	root := NewInProcess(4)
	views := make([]Network, 4)
	for r := range 4 {
		views[r] = NewView(root[r], []int{0, 1, 2, 3}, r, 43, time.Minute)
	}
	t.Cleanup(func() {
		for r := range 4 {
			_ = CloseShared(views[r])
			_ = CloseShared(root[r])
		}
	})
	viewGatherInts(t, views, func(r int) int { return r })
	start := time.Now()
	_, errs := viewOnEveryRank(4, func(r int) ([][]byte, error) {
		if r == 2 {
			time.Sleep(20 * time.Millisecond)
			views[2].Abort()
			return nil, nil
		}
		return views[r].AllGather(context.Background(), nil)
	})
	assert.Less(t, time.Since(start), 10*time.Second)
	for _, r := range []int{0, 1, 3} {
		require.ErrorIs(t, errs[r], ErrCollectiveBroken, "rank %d", r)
	}
}
