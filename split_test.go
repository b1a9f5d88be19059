package ncclgo

import (
	"context"
	"github.com/ncclgo/ncclgo/internal/testutil"
	"github.com/ncclgo/ncclgo/runtime/bootstrap"
	"github.com/ncclgo/ncclgo/runtime/comm"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"testing"
	"time"
)

func TestCheckExclude(t *testing.T) {
	got, err := checkExclude([]int{5, 1, 3}, 0, 6)
	require.NoError(t, err)
	assert.Equal(t, []int{1, 3, 5}, got)
	got, err = checkExclude(nil, 0, 2)
	require.NoError(t, err)
	assert.Equal(t, []int{}, got)
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

// fakeParents returns n device-less ranks on an in-process or TCP
// bootstrap (their Split and Shrink children are device-less too).
func fakeParents(t *testing.T, n int, tcp bool) []*Comm {
	t.Helper()
	comms, _ := hostOnlyRanks(t, n, tcp)
	return comms
}

// hostOnlyRanks is fakeParents, with the ranks' bootstrap networks.
func hostOnlyRanks(t *testing.T, n int, tcp bool) ([]*Comm, []bootstrap.Network) {
	t.Helper()
	opts := bootstrap.Options{Timeout: 20 * time.Second}
	nets := testutil.Networks(t, n, tcp, opts)
	comms := make([]*Comm, n)
	for r := range n {
		comms[r] = newComm(comm.NewHostOnly(nets[r], r, n, 0, comm.Settings{Bootstrap: opts}, hostTuner(t, n)))
	}
	return comms, nets
}

func destroyAll(t *testing.T, comms ...*Comm) {
	t.Helper()
	for _, c := range comms {
		if c != nil {
			require.NoError(t, c.Destroy())
		}
	}
}

func TestSplitBadColor(t *testing.T) {
	parents := fakeParents(t, 3, false)
	defer destroyAll(t, parents...)
	_, errs := testutil.OnEveryRank(3, func(r int) (*Comm, error) {
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
