package tune

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/kspace"
)

// h200Direct is h200 with the ranks in one process: DIRECT may run.
func h200Direct(nRanks int) Topology {
	tp := h200(nRanks)
	tp.Direct = true
	return tp
}

func TestDirectChosenWhereRanksShareMemory(t *testing.T) {
	for _, n := range []int{2, 4, 8} {
		for _, b := range []int64{8, 1024, 65536, 1 << 20, 256 << 20, 1 << 30} {
			t.Run(fmt.Sprintf("%d ranks %d bytes", n, b), func(t *testing.T) {
				tu := newTuner(t, h200Direct(n), nil, nil)
				ch, err := tu.Choose(kspace.AllReduce, kspace.Sum, kspace.F32, b)
				require.NoError(t, err)
				assert.Equal(t, kspace.Direct, ch.Algo, "%v", ch)
				assert.Equal(t, kspace.Simple, ch.Proto)
				assert.Equal(t, kspace.Func{Coll: kspace.AllReduce, RedOp: kspace.Sum, Type: kspace.F32, Algo: kspace.Direct, Proto: kspace.Simple}, ch.Func)
				// Without shared memory the same call never runs DIRECT.
				ch, err = newTuner(t, h200(n), nil, nil).Choose(kspace.AllReduce, kspace.Sum, kspace.F32, b)
				require.NoError(t, err)
				assert.NotEqual(t, kspace.Direct, ch.Algo)
			})
		}
	}
}

func TestDirectChannels(t *testing.T) {
	tp := h200Direct(2)
	tp.NChannels = 32 // as runtime/comm sets up
	tu := newTuner(t, tp, nil, nil)
	cases := []struct {
		bytes   int64
		nc      int
		oneShot bool
	}{
		{8, 1, true},
		{8192, 1, true},
		{8193, 2, true},
		{65536, 8, true},
		{32 * 8192, 32, true},
		{32*8192 + 1, 5, false}, // 64 KiB or more per two-shot channel
		{256 << 20, 32, false},
	}
	require.Equal(t, 32, tu.MaxChannels())
	for _, c := range cases {
		nc, nt, one := tu.directChannels(c.bytes)
		assert.Equal(t, c.nc, nc, "%d bytes", c.bytes)
		assert.Equal(t, c.oneShot, one, "%d bytes", c.bytes)
		assert.Equal(t, 512, nt)
		if one {
			// Every channel's share fits the device's one-shot.
			assert.LessOrEqual(t, (c.bytes+int64(nc)-1)/int64(nc), int64(directOneShotBytes))
		}
		ch, err := tu.Choose(kspace.AllReduce, kspace.Sum, kspace.F32, c.bytes)
		require.NoError(t, err)
		assert.Equal(t, nc, ch.NChannels)
	}
	// The one-shot keeps its share in 128 threads' registers at least.
	tu = newTuner(t, h200Direct(2), map[string]string{"NCCL_NTHREADS": "64"}, nil)
	_, nt, _ := tu.directChannels(8)
	assert.Equal(t, directMinThreads, nt)
}

func TestDirectForced(t *testing.T) {
	env := map[string]string{"NCCL_ALGO": "allreduce:direct"}
	ch, err := newTuner(t, h200Direct(8), env, nil).Choose(kspace.AllReduce, kspace.MinMax, kspace.BF16, 256<<20)
	require.NoError(t, err)
	assert.Equal(t, kspace.Direct, ch.Algo)

	// Forced where the ranks do not share memory: a clear error, no fallback.
	_, err = newTuner(t, h200(8), env, nil).Choose(kspace.AllReduce, kspace.Sum, kspace.F32, 8)
	require.Error(t, err)
	assert.True(t, errors.Is(err, ErrNoChoice))
	assert.Contains(t, err.Error(), "NCCL_ALGO")
	assert.Contains(t, err.Error(), "available: TREE, RING")

	// PreMulSum never runs DIRECT (its scalar is per rank).
	_, err = newTuner(t, h200Direct(2), env, nil).Choose(kspace.AllReduce, kspace.PreMulSum, kspace.F32, 8)
	require.Error(t, err)

	// DIRECT moves data with SIMPLE only.
	_, err = newTuner(t, h200Direct(2), map[string]string{"NCCL_ALGO": "direct", "NCCL_PROTO": "LL"}, nil).
		Choose(kspace.AllReduce, kspace.Sum, kspace.F32, 8)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "DIRECT/SIMPLE")

	// Other collectives have no DIRECT: with an unprefixed NCCL_ALGO=direct
	// they report what they have.
	_, err = newTuner(t, h200Direct(2), map[string]string{"NCCL_ALGO": "direct"}, nil).Choose(kspace.AllGather, 0, 0, 8)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "available: RING")
}

func TestDirectNotChosenWithoutItsFunctions(t *testing.T) {
	avail := func(f kspace.Func) bool { return f.Algo != kspace.Direct }
	ch, err := newTuner(t, h200Direct(2), nil, avail).Choose(kspace.AllReduce, kspace.Sum, kspace.F32, 8)
	require.NoError(t, err)
	assert.NotEqual(t, kspace.Direct, ch.Algo)
}
