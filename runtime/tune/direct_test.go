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

// DIRECT wins from 32 MiB up on 2-8 ranks of one GPU for the four
// collectives it runs (from 1 MiB for most); at small sizes the ring's LL
// latency is lower, as measured (8 B AllReduce on 2 ranks: 21.6 µs DIRECT,
// 16.3 µs RING/LL).
func TestDirectChosenWhereRanksShareMemory(t *testing.T) {
	for _, n := range []int{2, 4, 8} {
		for _, c := range []kspace.Coll{kspace.AllReduce, kspace.AllGather, kspace.ReduceScatter, kspace.Broadcast} {
			for _, b := range []int64{8, 1024, 65536, 1 << 20, 32 << 20, 256 << 20, 1 << 30} {
				t.Run(fmt.Sprintf("%s %d ranks %d bytes", c, n, b), func(t *testing.T) {
					tu := newTuner(t, h200Direct(n), nil, nil)
					ch, err := tu.Choose(c, kspace.Sum, kspace.F32, b)
					require.NoError(t, err)
					if b <= 1024 {
						assert.NotEqual(t, kspace.Direct, ch.Algo, "%v", ch)
						return
					}
					if b < 32<<20 {
						return // either, by cost
					}
					assert.Equal(t, kspace.Direct, ch.Algo, "%v", ch)
					assert.Equal(t, kspace.Simple, ch.Proto)
					assert.Equal(t, funcOf(c, kspace.Sum, kspace.F32, kspace.Direct, kspace.Simple), ch.Func)
					// Without shared memory the same call never runs DIRECT.
					ch, err = newTuner(t, h200(n), nil, nil).Choose(c, kspace.Sum, kspace.F32, b)
					require.NoError(t, err)
					assert.NotEqual(t, kspace.Direct, ch.Algo)
				})
			}
		}
	}
}

// The traffic model: what every rank reads and writes, all ranks together,
// in units of the size Choose is given.
func TestDirectTraffic(t *testing.T) {
	for _, c := range []struct {
		coll    kspace.Coll
		n       int
		oneShot bool
		want    float64
	}{
		{kspace.AllReduce, 2, false, 5},     // 2 reduce 1/2 of 2 inputs, write 1/2; gather 1/2 each
		{kspace.AllReduce, 2, true, 6},      // each reads 2, writes 1
		{kspace.AllGather, 2, false, 4},     // each reads and writes the whole output
		{kspace.ReduceScatter, 2, false, 3}, // each reads 2 halves, writes a half
		{kspace.ReduceScatter, 8, false, 9}, // each reads 8 eighths, writes an eighth
		{kspace.Broadcast, 8, false, 16},    // each reads and writes S
	} {
		assert.Equal(t, c.want, directTraffic(c.coll, c.n, c.oneShot), "%s on %d ranks", c.coll, c.n)
	}
	// On 2 ranks of one GPU the model's busbw at 1 GiB is 80% of the
	// out-of-place limits the lead measured copies against (AllGather
	// 490, ReduceScatter 650 GB/s) or above.
	tu := newTuner(t, h200Direct(2), nil, nil)
	for _, c := range []struct {
		coll kspace.Coll
		min  float64
	}{{kspace.AllGather, 0.8 * 490}, {kspace.ReduceScatter, 0.8 * 650}} {
		ch, err := tu.Choose(c.coll, kspace.Sum, kspace.F32, 1<<30)
		require.NoError(t, err)
		require.Equal(t, kspace.Direct, ch.Algo)
		busbw := float64(1<<30) / float64(ch.PredictedTime.Nanoseconds()) * c.coll.BusFactor(2)
		assert.GreaterOrEqual(t, busbw, c.min, "%s", c.coll)
	}
}

func TestDirectChannels(t *testing.T) {
	tp := h200Direct(2)
	tp.NChannels = 32 // as runtime/comm sets up
	tu := newTuner(t, tp, map[string]string{"NCCL_ALGO": "allreduce:direct"}, nil)
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
		nc, nt, one := tu.directChannels(kspace.AllReduce, c.bytes)
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
	_, nt, _ := tu.directChannels(kspace.AllReduce, 8)
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

	// Reduce has no DIRECT: with an unprefixed NCCL_ALGO=direct it reports
	// what it has; the four collectives that have it run it at any size.
	_, err = newTuner(t, h200Direct(2), map[string]string{"NCCL_ALGO": "direct"}, nil).Choose(kspace.Reduce, kspace.Sum, kspace.F32, 8)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "available: RING")
	for _, c := range []kspace.Coll{kspace.AllGather, kspace.ReduceScatter, kspace.Broadcast} {
		ch, err := newTuner(t, h200Direct(2), map[string]string{"NCCL_ALGO": "direct"}, nil).Choose(c, kspace.Sum, kspace.F32, 8)
		require.NoError(t, err, "%s", c)
		assert.Equal(t, kspace.Direct, ch.Algo, "%s", c)
		assert.Equal(t, 1, ch.NChannels, "%s", c)
		_, err = newTuner(t, h200(2), map[string]string{"NCCL_ALGO": "direct"}, nil).Choose(c, kspace.Sum, kspace.F32, 8)
		assert.ErrorIs(t, err, ErrNoChoice, "%s without shared memory", c)
	}
	// ReduceScatter's PreMulSum has no DIRECT either.
	_, err = newTuner(t, h200Direct(2), map[string]string{"NCCL_ALGO": "reducescatter:direct"}, nil).
		Choose(kspace.ReduceScatter, kspace.PreMulSum, kspace.F32, 8)
	assert.ErrorIs(t, err, ErrNoChoice)
}

func TestDirectNotChosenWithoutItsFunctions(t *testing.T) {
	avail := func(f kspace.Func) bool { return f.Algo != kspace.Direct }
	ch, err := newTuner(t, h200Direct(2), nil, avail).Choose(kspace.AllReduce, kspace.Sum, kspace.F32, 8)
	require.NoError(t, err)
	assert.NotEqual(t, kspace.Direct, ch.Algo)
}
