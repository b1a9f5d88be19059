package ncclgo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	goruntime "runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/runtime/bootstrap"
	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/ncclgo/ncclgo/runtime/residency"
)

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

func TestCheckExclude(t *testing.T) {
	got, err := checkExclude([]int{5, 1, 3}, 0, 6)
	require.NoError(t, err)
	assert.Equal(t, []int{1, 3, 5}, got)
	assert.Equal(t, []int{0, 2, 4}, survivorsOf(6, got))
	got, err = checkExclude(nil, 0, 2)
	require.NoError(t, err)
	assert.Equal(t, []int{0, 1}, survivorsOf(2, got))
	for _, tc := range []struct {
		excl []int
		want string
	}{
		{[]int{6}, "0..5 (rank 6"},
		{[]int{-1}, "rank -1"},
		{[]int{2, 2}, "rank 2 repeats"},
		{[]int{1, 0}, "other than this one (0)"},
	} {
		_, err := checkExclude(tc.excl, 0, 6)
		require.ErrorIs(t, err, ErrInvalidArgument, "%v", tc.excl)
		assert.Contains(t, err.Error(), tc.want)
	}
}

func TestViewTags(t *testing.T) {
	a := viewID(0, 'S', 1)
	assert.NotEqual(t, a, viewID(0, 'S', 2))
	assert.NotEqual(t, a, viewID(0, 's', 1))
	assert.NotEqual(t, a, viewID(a, 'S', 1))
	tag := viewTag(a, false, 7)
	assert.Positive(t, tag)
	assert.NotEqual(t, tag, viewTag(a, true, 7))
	assert.NotEqual(t, tag, viewTag(a^1, false, 7))
	assert.GreaterOrEqual(t, tag, viewSpace, "views never use the small tags of root networks")
}

// onEveryRank runs fn for ranks 0..n-1 at once and returns the results.
func onEveryRank[T any](n int, fn func(r int) (T, error)) ([]T, []error) {
	out, errs := make([]T, n), make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() { out[r], errs[r] = fn(r) })
	}
	wg.Wait()
	return out, errs
}

func gatherInts(t *testing.T, nets []bootstrap.Network, val func(r int) int) [][]int {
	t.Helper()
	out, errs := onEveryRank(len(nets), func(r int) ([]int, error) {
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
	root := bootstrap.NewInProcess(8)
	// Two interleaved views, and one of a view, all busy with the root's
	// own collectives at the same time.
	even, odd := []int{6, 0, 2, 4}, []int{1, 3, 5, 7}
	views := make([]bootstrap.Network, 8)
	for i, r := range even {
		views[r] = newSubNet(root[r], even, i, viewID(0, 'S', 1), 10*time.Second)
	}
	for i, r := range odd {
		views[r] = newSubNet(root[r], odd, i, viewID(0, 'S', 1), 10*time.Second)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for range 20 {
			got := gatherInts(t, root, func(r int) int { return 100 + r })
			assert.Equal(t, []int{100, 101, 102, 103, 104, 105, 106, 107}, got[3])
		}
	})
	for range 20 {
		got := gatherInts(t, views, func(r int) int { return r })
		for r := range 8 {
			if r%2 == 0 {
				assert.Equal(t, even, got[r])
			} else {
				assert.Equal(t, odd, got[r])
			}
		}
	}
	wg.Wait()
	_, errs := onEveryRank(8, func(r int) (struct{}, error) { return struct{}{}, views[r].Barrier(context.Background()) })
	for _, err := range errs {
		require.NoError(t, err)
	}

	// A view of a view: ranks 0 and 4 of the even view (parent ranks 6, 4).
	sub := []bootstrap.Network{
		newSubNet(views[4], []int{3, 0}, 0, viewID(pathID(views[4]), 'S', 1), 10*time.Second),
		newSubNet(views[6], []int{3, 0}, 1, viewID(pathID(views[6]), 'S', 1), 10*time.Second),
	}
	got := gatherInts(t, sub, func(r int) int { return 10 + r })
	assert.Equal(t, []int{10, 11}, got[1])
	assert.Equal(t, []int{4, 6}, sub[0].(*subNet).members, "mapped onto the root's ranks")

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
	require.ErrorContains(t, views[0].Send(ctx, 1, maxViewTag+1, nil), "tag")

	// Abort of a view ends its waits only.
	recvErr := make(chan error, 1)
	go func() { _, err := views[1].Recv(ctx, 2, 9); recvErr <- err }()
	time.Sleep(20 * time.Millisecond)
	views[1].Abort()
	select {
	case err := <-recvErr:
		require.ErrorIs(t, err, bootstrap.ErrAborted)
	case <-time.After(5 * time.Second):
		t.Fatal("Abort did not wake the view's Recv")
	}
	require.ErrorIs(t, views[1].Send(ctx, 0, 1, nil), bootstrap.ErrAborted)
	gatherInts(t, root, func(r int) int { return r })

	// The root network closes when its owner and every view have closed.
	for _, v := range sub {
		require.NoError(t, closeNet(v))
	}
	for r := range 8 {
		require.NoError(t, closeNet(root[r]))
	}
	require.NoError(t, root[2].Send(ctx, 0, 1, nil), "views of rank 2 still open")
	evens := []bootstrap.Network{views[6], views[0], views[2], views[4]}
	assert.Equal(t, []int{0, 1, 4, 9}, gatherInts(t, evens, func(r int) int { return r * r })[0], "the views still work")
	for r := range 8 {
		require.NoError(t, closeNet(views[r]))
		if r != 1 {
			require.ErrorIs(t, views[r].Barrier(ctx), bootstrap.ErrClosed)
		}
	}
	require.ErrorIs(t, root[2].Send(ctx, 0, 1, nil), bootstrap.ErrClosed)
	shared.Lock()
	assert.Empty(t, shared.refs, "every root forgotten")
	shared.Unlock()
}

// A collective that fails on one rank fails on the others at once (the
// abandon travels around the ring), and is final.
func TestSubNetAbandon(t *testing.T) {
	root := bootstrap.NewInProcess(3)
	members := []int{0, 1, 2}
	views := make([]bootstrap.Network, 3)
	for r := range 3 {
		views[r] = newSubNet(root[r], members, r, 42, 30*time.Second)
	}
	t.Cleanup(func() {
		for r := range 3 {
			_ = closeNet(views[r])
			_ = closeNet(root[r])
		}
	})
	gatherInts(t, views, func(r int) int { return r })
	start := time.Now()
	_, errs := onEveryRank(3, func(r int) ([][]byte, error) {
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
		require.ErrorIs(t, err, bootstrap.ErrCollectiveBroken, "rank %d", r)
	}
	_, err := views[1].AllGather(context.Background(), nil)
	require.ErrorIs(t, err, bootstrap.ErrCollectiveBroken, "final")
}

// fakeChildren makes Split and Shrink build communicators with no device:
// the child is just its rank, size and bootstrap network.
func fakeChildren(t *testing.T) {
	t.Helper()
	old := initChildRank
	initChildRank = func(ctx context.Context, net bootstrap.Network, device int, s settings) (*Comm, error) {
		if err := net.Barrier(ctx); err != nil {
			return nil, err
		}
		return &Comm{rank: net.Rank(), nRanks: net.Size(), device: device, s: s, net: net,
			log: slog.New(slog.DiscardHandler), events: map[uintptr]*cuda.Event{}}, nil
	}
	t.Cleanup(func() { initChildRank = old })
}

// fakeParents returns n device-less ranks on an in-process or TCP
// bootstrap.
func fakeParents(t *testing.T, n int, tcp bool) []*Comm {
	t.Helper()
	nets := make([]bootstrap.Network, n)
	opts := bootstrap.Options{Timeout: 20 * time.Second}
	if tcp {
		root, id, err := bootstrap.NewRoot(context.Background(), opts)
		require.NoError(t, err)
		defer root.Close()
		conns, errs := onEveryRank(n, func(r int) (*bootstrap.Conn, error) {
			return bootstrap.Init(context.Background(), id, r, n, opts)
		})
		for r := range n {
			require.NoError(t, errs[r])
			nets[r] = conns[r]
		}
	} else {
		var err error
		nets, err = bootstrap.NewInProcessOptions(n, opts)
		require.NoError(t, err)
	}
	comms := make([]*Comm, n)
	for r := range n {
		comms[r] = fakeComm(t, r, n)
		comms[r].net = nets[r]
		comms[r].s.bootstrap = opts
	}
	return comms
}

func destroyAll(t *testing.T, comms ...*Comm) {
	t.Helper()
	for _, c := range comms {
		if c != nil {
			require.NoError(t, c.Destroy())
		}
	}
}

// childRanks gathers, over each child's own bootstrap, the parent rank of
// every member.
func childRanks(t *testing.T, parents, children []*Comm) map[int][]int {
	t.Helper()
	out, errs := onEveryRank(len(children), func(i int) ([]int, error) {
		c := children[i]
		if c == nil {
			return nil, nil
		}
		all, err := c.net.AllGather(context.Background(), fmt.Append(nil, parents[i].Rank()))
		if err != nil {
			return nil, err
		}
		v := make([]int, len(all))
		for j, b := range all {
			fmt.Sscan(string(b), &v[j])
		}
		return v, nil
	})
	m := map[int][]int{}
	for i, err := range errs {
		require.NoError(t, err, "rank %d", i)
		if children[i] != nil {
			m[parents[i].Rank()] = out[i]
		}
	}
	return m
}

func TestSplitFake(t *testing.T) {
	for _, tcp := range []bool{false, true} {
		t.Run(map[bool]string{false: "inprocess", true: "tcp"}[tcp], func(t *testing.T) {
			fakeChildren(t)
			before := goruntime.NumGoroutine()
			parents := fakeParents(t, 8, tcp)
			// Colors: rank 0 alone, 1-2, 3-6 (reversed by key), 7 none.
			color := []int{0, 1, 1, 2, 2, 2, 2, SplitNoColor}
			key := []int{0, 0, 0, 9, 8, 7, 6, 0}
			kids, errs := onEveryRank(8, func(r int) (*Comm, error) {
				return parents[r].Split(context.Background(), color[r], key[r], nil)
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
			grand, errs := onEveryRank(4, func(i int) (*Comm, error) {
				return kids[3+i].Split(context.Background(), kids[3+i].Rank()%2, 0, nil)
			})
			for _, err := range errs {
				require.NoError(t, err)
			}
			g := childRanks(t, kids[3:7], grand)
			assert.Equal(t, map[int][]int{0: {0, 2}, 2: {0, 2}, 1: {1, 3}, 3: {1, 3}}, g, "by the child's rank (parent ranks 6 and 4, 5 and 3)")

			// The parent is untouched, and its second Split works.
			again, errs := onEveryRank(8, func(r int) (*Comm, error) {
				return parents[r].Split(context.Background(), 0, -r, nil)
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
			shared.Lock()
			assert.Empty(t, shared.refs)
			shared.Unlock()
			waitGoroutines(t, before)
		})
	}
}

func waitGoroutines(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for goruntime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if g := goruntime.NumGoroutine(); g > before {
		buf := make([]byte, 1<<16)
		t.Fatalf("%d goroutines before, %d after:\n%s", before, g, buf[:goruntime.Stack(buf, true)])
	}
}

func TestSplitBadColor(t *testing.T) {
	fakeChildren(t)
	parents := fakeParents(t, 3, false)
	defer destroyAll(t, parents...)
	_, errs := onEveryRank(3, func(r int) (*Comm, error) {
		return parents[r].Split(context.Background(), []int{0, -2, 0}[r], 0, nil)
	})
	var ae *ArgError
	require.ErrorAs(t, errs[1], &ae)
	assert.Equal(t, "color", ae.Arg)
	for _, r := range []int{0, 2} {
		require.ErrorIs(t, errs[r], ErrInvalidArgument)
		assert.Contains(t, errs[r].Error(), "rank 1: color=-2")
	}
	var nilComm *Comm
	_, err := nilComm.Split(context.Background(), 0, 0, nil)
	require.Error(t, err)
}

func TestShrinkFake(t *testing.T) {
	for _, abort := range []bool{false, true} {
		t.Run(map[bool]string{false: "default", true: "abort"}[abort], func(t *testing.T) {
			fakeChildren(t)
			before := goruntime.NumGoroutine()
			parents := fakeParents(t, 5, false)
			if abort {
				// Rank 1 is dead: its bootstrap is gone.
				parents[1].net.Abort()
			}
			kids, errs := onEveryRank(5, func(r int) (*Comm, error) {
				if r == 1 || r == 3 {
					return nil, nil // excluded ranks do not call Shrink
				}
				return parents[r].Shrink(context.Background(), []int{3, 1}, nil, abort)
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
				require.ErrorIs(t, parents[0].Err(), ErrAborted)
			} else {
				require.NoError(t, parents[0].Err())
				assert.IsType(t, &subNet{}, kids[0].net)
			}
			destroyAll(t, kids...)
			destroyAll(t, parents...)
			waitGoroutines(t, before)
		})
	}
}

func TestShrinkDisagree(t *testing.T) {
	fakeChildren(t)
	parents := fakeParents(t, 4, false)
	defer destroyAll(t, parents...)
	excl := [][]int{{3}, {3}, {1}, nil}
	start := time.Now()
	_, errs := onEveryRank(4, func(r int) (*Comm, error) {
		if r == 3 {
			return nil, nil
		}
		return parents[r].Shrink(context.Background(), excl[r], nil, false)
	})
	assert.Less(t, time.Since(start), 10*time.Second, "a disagreement is no timeout")
	for r := range 3 {
		require.ErrorIs(t, errs[r], ErrInvalidUsage, "rank %d", r)
	}
	assert.Contains(t, errs[0].Error(), "rank 2 excludes [1]")
	assert.Contains(t, errs[1].Error(), "rank 2 excludes [1]")
	assert.Contains(t, errs[2].Error(), "rank 0 excludes [3]")

	// A bad list on one rank fails the others at once too.
	_, errs = onEveryRank(3, func(r int) (*Comm, error) {
		return parents[r].Shrink(context.Background(), [][]int{{3}, {3}, {3, 3}}[r], nil, false)
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

// A rank that aborts its view between collectives does not leave the
// others waiting for it until their timeout.
func TestSubNetAbortReleasesPeers(t *testing.T) {
	root := bootstrap.NewInProcess(4)
	views := make([]bootstrap.Network, 4)
	for r := range 4 {
		views[r] = newSubNet(root[r], []int{0, 1, 2, 3}, r, 43, time.Minute)
	}
	t.Cleanup(func() {
		for r := range 4 {
			_ = closeNet(views[r])
			_ = closeNet(root[r])
		}
	})
	gatherInts(t, views, func(r int) int { return r })
	start := time.Now()
	_, errs := onEveryRank(4, func(r int) ([][]byte, error) {
		if r == 2 {
			time.Sleep(20 * time.Millisecond)
			views[2].Abort()
			return nil, nil
		}
		return views[r].AllGather(context.Background(), nil)
	})
	assert.Less(t, time.Since(start), 10*time.Second)
	for _, r := range []int{0, 1, 3} {
		require.ErrorIs(t, errs[r], bootstrap.ErrCollectiveBroken, "rank %d", r)
	}
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
	fakeChildren(t)
	c := fakeParents(t, 1, false)[0]
	var destroyErr error
	c.net = &hookNet{Network: c.net, after: func() { destroyErr = c.Destroy() }}
	child, err := c.Split(context.Background(), 0, 0, nil)
	require.NoError(t, destroyErr)
	if child != nil {
		_ = child.Destroy()
	}
	require.ErrorIs(t, err, ErrDestroyed)
	assert.Nil(t, child)
	shared.Lock()
	assert.Empty(t, shared.refs)
	shared.Unlock()
}

// TestDestroyAbortKeepsChildren: when a Destroy times out it aborts the
// communicator's ranks in this process; that used to abort their bootstrap
// network too, which their Split children's bootstrap travels over, so the
// children (other communicators) could no longer Split or Shrink.
func TestDestroyAbortKeepsChildren(t *testing.T) {
	fakeChildren(t)
	parents := fakeParents(t, 2, false)
	l := residency.New()
	for _, p := range parents {
		var err error
		p.res.lease, err = l.Join("parents", "0", 100, map[string]int{"0": 2}, 8)
		require.NoError(t, err)
		p.addColocated()
	}
	kids, errs := onEveryRank(2, func(r int) (*Comm, error) {
		return parents[r].Split(context.Background(), 0, 0, nil)
	})
	require.NoError(t, errors.Join(errs...))
	parents[0].abortColocated() // what Destroy does when the launches time out
	for _, p := range parents {
		require.ErrorIs(t, p.Err(), ErrAborted)
	}
	grand, errs := onEveryRank(2, func(r int) (*Comm, error) {
		return kids[r].Split(context.Background(), 0, 0, nil)
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
				_, err := parents[0].Split(ctx, 0, 0, nil)
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
			require.ErrorIs(t, parents[0].Err(), ErrAborted)

			t1 := time.Now()
			_, errs := onEveryRank(n-1, func(i int) (*Comm, error) { return parents[i+1].Split(ctx, 0, 0, nil) })
			for i, err := range errs {
				require.ErrorIs(t, err, bootstrap.ErrCollectiveBroken, "rank %d", i+1)
			}
			require.Less(t, time.Since(t1), 5*time.Second, "the peers heard of the abort instead of timing out")

			grand, errs := onEveryRank(n, func(r int) (*Comm, error) { return kids[r].Split(ctx, 0, 0, nil) })
			require.NoError(t, errors.Join(errs...), "the children's bootstrap still works")
			destroyAll(t, grand...)
			destroyAll(t, kids...)
			destroyAll(t, parents...)
		})
	}
}
