package comm

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/internal/testutil"
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
	opts := bootstrap.Options{Timeout: 20 * time.Second}
	nets := testutil.Networks(t, n, tcp, opts)
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
	out, errs := testutil.OnEveryRank(len(children), func(i int) ([]int, error) {
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
