package comm

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/internal/testutil"
	"github.com/ncclgo/ncclgo/runtime/bootstrap"
)

// splitParents makes n device-less parent ranks (TCP or in-process) and
// one Split child of all of them, color 0.
func splitParents(t *testing.T, n int, tcp bool) (parents, kids []*Engine) {
	t.Helper()
	parents = fakeParents(t, n, tcp)
	kids, errs := testutil.OnEveryRank(n, func(r int) (*Engine, error) { return split(context.Background(), parents[r], 0, 0) })
	require.NoError(t, errors.Join(errs...))
	return parents, kids
}

// TestAbortAfterDestroyKeepsChild: Abort of a parent rank that was
// destroyed meanwhile (Abort may run concurrently with Destroy) must not
// abort the root network that a Split child's view still uses.
func TestAbortAfterDestroyKeepsChild(t *testing.T) {
	const n = 2
	ctx := context.Background()
	parents, kids := splitParents(t, n, false)
	destroyAll(t, parents...)
	parents[0].Abort()
	grand, errs := testutil.OnEveryRank(n, func(r int) (*Engine, error) { return split(ctx, kids[r], 0, 0) })
	require.NoError(t, errors.Join(errs...), "the child's bootstrap still works")
	destroyAll(t, grand...)
	destroyAll(t, kids...)
}

// TestAbortWhilePeerSplits: rank 0, which has a Split child, is aborted
// while rank 1 waits in a Split that rank 0 never joins; rank 1's Split
// must fail with ErrCollectiveBroken, whatever the timing.
func TestAbortWhilePeerSplits(t *testing.T) {
	for i := range 30 {
		const n = 2
		ctx := context.Background()
		parents, kids := splitParents(t, n, true)
		done := make(chan error, 1)
		go func() {
			_, err := split(ctx, parents[1], 0, 0)
			done <- err
		}()
		time.Sleep(20 * time.Millisecond)
		parents[0].Abort()
		var err error
		select {
		case err = <-done:
		case <-time.After(5 * time.Second):
			err = errors.New("rank 1's Split was not woken")
		}
		destroyAll(t, kids...)
		destroyAll(t, parents...)
		require.ErrorIs(t, err, bootstrap.ErrCollectiveBroken, "iteration %d", i)
	}
}

// TestAbortRacesDestroy: Abort, twice, concurrently with Destroy of a
// parent rank with a Split child leaves the child's bootstrap working and
// the shared-network count empty once all are destroyed.
func TestAbortRacesDestroy(t *testing.T) {
	for range 50 {
		const n = 2
		ctx := context.Background()
		parents, kids := splitParents(t, n, false)
		_, errs := testutil.OnEveryRank(3, func(i int) (struct{}, error) {
			if i == 0 {
				return struct{}{}, parents[0].Destroy()
			}
			parents[0].Abort()
			return struct{}{}, nil
		})
		require.NoError(t, errors.Join(errs...))
		grand, errs := testutil.OnEveryRank(n, func(r int) (*Engine, error) { return split(ctx, kids[r], 0, 0) })
		require.NoError(t, errors.Join(errs...), "the child's bootstrap still works")
		destroyAll(t, grand...)
		destroyAll(t, kids...)
		destroyAll(t, parents[1])
		require.Zero(t, bootstrap.SharedNetworks(), "shared networks left")
	}
}
