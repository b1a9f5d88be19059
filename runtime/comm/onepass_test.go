package comm

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/kspace"
)

// TestOnePassLaunches checks, on the counting fake driver, which
// multi-rank launches carry generated.ArgsOnePass: a group of every rank
// of the communicator (2 and 8) with an 8 B AllReduce does, with the
// setting on; not with it off, not a group of some of the ranks, and not
// an AllGather.
func TestOnePassLaunches(t *testing.T) {
	inFakeDriver(t, "TestOnePassLaunches", onePassChild)
}

func onePassChild(t *testing.T, lib string) {
	d, ctx, fn := fakeKernel(t, lib)
	flagsAt := generated.Layouts["KernelArgs"].Offsets[6]
	require.Equal(t, 162, flagsAt, "KernelArgs.Flags' offset")
	// launchFlags runs one group of es (some of the communicator's ranks)
	// and returns the launch's argument flags.
	launchFlags := func(es []*Engine, coll kspace.Coll, on bool) int {
		t.Helper()
		for _, e := range es {
			e.launcher.OnePassAllReduce = on
		}
		before := es[0].MultiLaunches()
		require.NoError(t, smallGroup(t, ctx, es, coll)())
		require.Equal(t, before+1, es[0].MultiLaunches(), "one multi-rank launch")
		return d.Peek("last_args_u16@162")
	}
	for _, n := range []int{2, 8} {
		f := launchFlags(countEngines(t, ctx, fn, n, n), kspace.AllReduce, true)
		assert.NotZero(t, f&generated.ArgsOnePass, "%d of %d ranks: flags %#x", n, n, f)
		f = launchFlags(countEngines(t, ctx, fn, n, n), kspace.AllReduce, false)
		assert.Zero(t, f&generated.ArgsOnePass, "%d of %d ranks, off: flags %#x", n, n, f)
	}
	f := launchFlags(countEngines(t, ctx, fn, 2, 4), kspace.AllReduce, true)
	assert.Zero(t, f&generated.ArgsOnePass, "2 of 4 ranks: flags %#x", f)
	f = launchFlags(countEngines(t, ctx, fn, 2, 2), kspace.AllGather, true)
	assert.Zero(t, f&generated.ArgsOnePass, "AllGather: flags %#x", f)
}
