package comm

import (
	"context"
	"fmt"
	goruntime "runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/runtime/bootstrap"
	"github.com/ncclgo/ncclgo/runtime/config"
	"github.com/ncclgo/ncclgo/runtime/tune"
)

// fakeEngine is an engine with no device, for planning and lifetimes.
func fakeEngine(t *testing.T, rank, n int) *Engine {
	t.Helper()
	tn, err := tune.New(tune.Topology{NRanks: n, RanksPerGPU: n, SMCount: 132, BlocksPerSM: 1, IntraBW: 20, NChannels: 8}, config.Default(), nil)
	require.NoError(t, err)
	return NewHostOnly(nil, rank, n, 0, Settings{}, tn)
}

// fakeParents returns n device-less ranks on an in-process or TCP
// bootstrap.
func fakeParents(t *testing.T, n int, tcp bool) []*Engine {
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
	es := make([]*Engine, n)
	for r := range n {
		es[r] = fakeEngine(t, r, n)
		es[r].net = nets[r]
		es[r].s.Bootstrap = opts
	}
	return es
}

// split is e's Split with e's settings.
func split(ctx context.Context, e *Engine, color, key int) (*Engine, error) {
	return e.Split(ctx, color, key, e.Settings(), nil)
}

// shrink is e's Shrink of exclude (sorted here) with e's settings.
func shrink(ctx context.Context, e *Engine, exclude []int, abortMode bool) (*Engine, error) {
	return e.Shrink(ctx, slices.Sorted(slices.Values(exclude)), e.Settings(), abortMode, nil)
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

func destroyAll(t *testing.T, es ...*Engine) {
	t.Helper()
	for _, e := range es {
		if e != nil {
			require.NoError(t, e.Destroy())
		}
	}
}

// childRanks gathers, over each child's own bootstrap, the parent rank of
// every member.
func childRanks(t *testing.T, parents, children []*Engine) map[int][]int {
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
