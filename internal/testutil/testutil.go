// Package testutil holds the helpers that tests of several packages share:
// running every rank of a job at once in one process and giving those
// ranks bootstrap networks.
package testutil

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/runtime/bootstrap"
)

// OnEveryRank runs fn for ranks 0..n-1 at once, each on its own
// goroutine, and returns their results by rank once all have returned.
func OnEveryRank[T any](n int, fn func(r int) (T, error)) ([]T, []error) {
	out, errs := make([]T, n), make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() { out[r], errs[r] = fn(r) })
	}
	wg.Wait()
	return out, errs
}

// Networks returns the bootstrap networks of n ranks in this process, all
// with opts: in-process ones, or with tcp, TCP ones that met through a
// root (closed once they have). A failure fails t.
func Networks(t testing.TB, n int, tcp bool, opts bootstrap.Options) []bootstrap.Network {
	t.Helper()
	if !tcp {
		nets, err := bootstrap.NewInProcessOptions(n, opts)
		require.NoError(t, err)
		return nets
	}
	root, id, err := bootstrap.NewRoot(context.Background(), opts)
	require.NoError(t, err)
	defer root.Close()
	nets, errs := OnEveryRank(n, func(r int) (bootstrap.Network, error) {
		return bootstrap.Init(context.Background(), id, r, n, opts)
	})
	for r := range n {
		require.NoError(t, errs[r], "rank %d", r)
	}
	return nets
}
