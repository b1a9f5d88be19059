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
// collectives it runs (from 1 MiB for most). At small sizes AllReduce's LL
// one-shot (one LL hop) beats RING/LL (2(n-1) hops); the other
// collectives' barriers lose to the ring's LL latency, as measured for the
// barrier one-shot AllReduce (8 B on 2 ranks: 21.6 µs DIRECT, 16.3 µs
// RING/LL).
func TestDirectChosenWhereRanksShareMemory(t *testing.T) {
	for _, n := range []int{2, 4, 8} {
		for _, c := range []kspace.Coll{kspace.AllReduce, kspace.AllGather, kspace.ReduceScatter, kspace.Broadcast} {
			for _, b := range []int64{8, 1024, 65536, 1 << 20, 32 << 20, 256 << 20, 1 << 30} {
				t.Run(fmt.Sprintf("%s %d ranks %d bytes", c, n, b), func(t *testing.T) {
					tu := newTuner(t, h200Direct(n), nil, nil)
					ch, err := tu.Choose(c, kspace.Sum, kspace.F32, b)
					require.NoError(t, err)
					if b <= 1024 && c == kspace.AllReduce && n == 2 && ch.Algo == kspace.Ring {
						// 2 ranks: the ring's one-hop LL AllReduce
						// (ringOneHop) is one hop too; either may win.
						assert.Equal(t, kspace.LL, ch.Proto, "%v", ch)
						return
					}
					if b <= 1024 && c == kspace.AllReduce {
						assert.Equal(t, kspace.Direct, ch.Algo, "%v", ch)
						assert.Equal(t, 1, ch.NChannels)
						_, _, mode := tu.directChannels(c, b)
						assert.Equal(t, directLL, mode)
						return
					}
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
		coll kspace.Coll
		n    int
		mode directMode
		want float64
	}{
		{kspace.AllReduce, 2, directTwoShot, 4},     // 2 reduce 1/2 of 2 inputs, write it to 2 outputs
		{kspace.AllReduce, 2, directOneShot, 6},     // each reads 2, writes 1
		{kspace.AllReduce, 2, directLL, 12},         // each reads 1, writes 2 of lines, reads 2 of lines, writes 1
		{kspace.AllGather, 2, directTwoShot, 4},     // each reads and writes the whole output
		{kspace.ReduceScatter, 2, directTwoShot, 3}, // each reads 2 halves, writes a half
		{kspace.ReduceScatter, 8, directTwoShot, 9}, // each reads 8 eighths, writes an eighth
		{kspace.Broadcast, 8, directTwoShot, 16},    // each reads and writes S
	} {
		assert.Equal(t, c.want, directTraffic(c.coll, c.n, c.mode), "%s on %d ranks", c.coll, c.n)
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
		bytes int64
		nc    int
		mode  directMode
		nt    int
	}{
		{8, 1, directLL, 64},     // one line: RING/LL's smallest group
		{4096, 1, directLL, 512}, // 512 lines
		{4097, 2, directLL, 288}, // 2049 → 2064 bytes: 258 lines
		{16384, 4, directLL, 512},
		{16385, 3, directOneShot, 512}, // more than 4 LL channels: 8 KiB shares
		{65536, 8, directOneShot, 512},
		{32 * 8192, 32, directOneShot, 512},
		{32*8192 + 1, 5, directTwoShot, 512}, // 64 KiB or more per two-shot channel
		{256 << 20, 32, directTwoShot, 512},
	}
	require.Equal(t, 32, tu.MaxChannels())
	for _, c := range cases {
		nc, nt, mode := tu.directChannels(kspace.AllReduce, c.bytes)
		assert.Equal(t, c.nc, nc, "%d bytes", c.bytes)
		assert.Equal(t, c.mode, mode, "%d bytes", c.bytes)
		assert.Equal(t, c.nt, nt, "%d bytes", c.bytes)
		// Every channel's share fits the device's path for it, and a
		// one-shot share is not small enough for the LL one (the device
		// picks by the share's size).
		share := (c.bytes + int64(nc) - 1) / int64(nc)
		switch mode {
		case directLL:
			assert.LessOrEqual(t, share, int64(directLLBytes), "%d bytes", c.bytes)
		case directOneShot:
			assert.LessOrEqual(t, share, int64(directOneShotBytes), "%d bytes", c.bytes)
			assert.Greater(t, share, int64(directLLBytes), "%d bytes", c.bytes)
		}
		ch, err := tu.Choose(kspace.AllReduce, kspace.Sum, kspace.F32, c.bytes)
		require.NoError(t, err)
		assert.Equal(t, nc, ch.NChannels)
	}
	// NCCL_MIN_NCHANNELS spreads a one-shot into LL shares: the model
	// follows the device.
	tu = newTuner(t, tp, map[string]string{"NCCL_ALGO": "allreduce:direct", "NCCL_MIN_NCHANNELS": "8"}, nil)
	nc, _, mode := tu.directChannels(kspace.AllReduce, 20000)
	assert.Equal(t, 8, nc)
	assert.Equal(t, directLL, mode)
	// The one-shot keeps its share in 128 threads' registers at least;
	// the LL one-shot follows NCCL_NTHREADS.
	tu = newTuner(t, h200Direct(2), map[string]string{"NCCL_NTHREADS": "64"}, nil)
	_, nt, mode := tu.directChannels(kspace.AllReduce, 16385)
	assert.Equal(t, directOneShot, mode)
	assert.Equal(t, directMinThreads, nt)
	_, nt, _ = tu.directChannels(kspace.AllReduce, 4096)
	assert.Equal(t, 64, nt)
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

// The LL one-shot's model: AllReduce up to 16 KiB takes it on 2-8 ranks of
// one GPU and on NVLink peers, below RING/LL's prediction (one LL hop
// against 2(n-1)); beyond 16 KiB the ring's bandwidth terms decide.
func TestDirectLLChosenForSmallAllReduce(t *testing.T) {
	for _, n := range []int{2, 4, 8} {
		for _, tp := range []Topology{h200Direct(n), func() Topology {
			tp := h200Direct(n)
			tp.NGPUs, tp.RanksPerGPU = n, 1 // one rank per GPU, peer access
			return tp
		}()} {
			tu := newTuner(t, tp, nil, nil)
			ring := newTuner(t, tp, map[string]string{"NCCL_ALGO": "ring", "NCCL_PROTO": "LL"}, nil)
			for _, b := range []int64{4, 8, 4096, 16384} {
				ch, err := tu.Choose(kspace.AllReduce, kspace.Sum, kspace.BF16, b)
				require.NoError(t, err)
				if n == 2 && ch.Algo == kspace.Ring {
					// The ring's one-hop LL AllReduce (ringOneHop) is
					// one hop as well and may be predicted lower.
					assert.Equal(t, kspace.LL, ch.Proto)
					continue
				}
				require.Equal(t, kspace.Direct, ch.Algo, "%d ranks on %d GPUs, %d bytes", n, tp.NGPUs, b)
				_, _, mode := tu.directChannels(kspace.AllReduce, b)
				assert.Equal(t, directLL, mode)
				r, err := ring.Choose(kspace.AllReduce, kspace.Sum, kspace.BF16, b)
				require.NoError(t, err)
				assert.Less(t, ch.PredictedTime, r.PredictedTime, "%d ranks, %d bytes", n, b)
			}
			ch, err := tu.Choose(kspace.AllReduce, kspace.Sum, kspace.BF16, 64<<10)
			require.NoError(t, err)
			_, _, mode := tu.directChannels(kspace.AllReduce, 64<<10)
			assert.False(t, ch.Algo == kspace.Direct && mode == directLL, "64 KiB is not an LL one-shot")
		}
	}
}

// h200Across is h200 with the ranks in several processes that share their
// DIRECT mailboxes but not their user buffers (runtime/comm's setupDirect
// across processes, no windows).
func h200Across(nRanks int) Topology {
	tp := h200(nRanks)
	tp.DirectLLAcross = true
	return tp
}

// Across processes without windows DIRECT runs AllReduce as the LL
// one-shot only: the tuner takes it from 8 B up to directLLBytes on 3-8
// ranks of one GPU (one LL exchange, where RING/LL takes 2(n-1) hops),
// never above DirectLLLimit, and never for the other collectives. On 2
// ranks RING/LL is one hop too (ringOneHop); the one-shot measured faster
// all the same (directLLOneGPUSaving), and takes the smallest calls too,
// only where its model is strictly below the ring's.
func TestDirectLLAcrossProcesses(t *testing.T) {
	two := newTuner(t, h200Across(2), nil, nil)
	twoRing := newTuner(t, h200(2), map[string]string{"NCCL_ALGO": "ring", "NCCL_PROTO": "LL"}, nil)
	for _, b := range []int64{4, 8, 64, 1024, directLLBytes} {
		ch, err := two.Choose(kspace.AllReduce, kspace.Sum, kspace.F32, b)
		require.NoError(t, err)
		if b <= 8 {
			assert.Equal(t, kspace.Direct, ch.Algo, "2 ranks, %d bytes: %v", b, ch)
		}
		if ch.Algo == kspace.Direct {
			r, err := twoRing.Choose(kspace.AllReduce, kspace.Sum, kspace.F32, b)
			require.NoError(t, err)
			assert.Less(t, ch.PredictedTime, r.PredictedTime, "2 ranks, %d bytes", b)
		}
	}
	for _, n := range []int{3, 4, 8} {
		tu := newTuner(t, h200Across(n), nil, nil)
		ring := newTuner(t, h200(n), map[string]string{"NCCL_ALGO": "ring", "NCCL_PROTO": "LL"}, nil)
		for _, b := range []int64{4, 8, 64, 1024, directLLBytes} {
			ch, err := tu.Choose(kspace.AllReduce, kspace.Sum, kspace.F32, b)
			require.NoError(t, err)
			require.Equal(t, kspace.Direct, ch.Algo, "%d ranks, %d bytes: %v", n, b, ch)
			assert.Equal(t, kspace.Simple, ch.Proto)
			assert.Equal(t, funcOf(kspace.AllReduce, kspace.Sum, kspace.F32, kspace.Direct, kspace.Simple), ch.Func)
			nc, nt, mode := tu.directChannels(kspace.AllReduce, b)
			assert.Equal(t, directLL, mode, "%d ranks, %d bytes", n, b)
			assert.Equal(t, nc, ch.NChannels)
			assert.Equal(t, nt, ch.NThreads)
			r, err := ring.Choose(kspace.AllReduce, kspace.Sum, kspace.F32, b)
			require.NoError(t, err)
			assert.Less(t, ch.PredictedTime, r.PredictedTime, "%d ranks, %d bytes: DIRECT below RING/LL", n, b)
		}
		for _, b := range []int64{tu.DirectLLLimit() + 1, tu.DirectLLLimit() + 16, 64 << 10, 1 << 20, 256 << 20} {
			ch, err := tu.Choose(kspace.AllReduce, kspace.Sum, kspace.F32, b)
			require.NoError(t, err)
			assert.NotEqual(t, kspace.Direct, ch.Algo, "%d ranks, %d bytes: above the LL one-shot", n, b)
		}
		for _, c := range []kspace.Coll{kspace.AllGather, kspace.ReduceScatter, kspace.Broadcast} {
			ch, err := tu.Choose(c, kspace.Sum, kspace.F32, 8)
			require.NoError(t, err)
			assert.NotEqual(t, kspace.Direct, ch.Algo, "%s needs the peers' buffers", c)
		}
	}
}

// The choice depends only on what every rank has alike (the agreed
// topology and the call's collective, op, type and size), so tuners built
// from the same topology, as every rank builds its own, choose alike at
// every size, whatever each one chose before (the memo).
func TestDirectLLAcrossSameOnEveryRank(t *testing.T) {
	const n = 4
	tus := make([]*Tuner, n)
	for r := range tus {
		tus[r] = newTuner(t, h200Across(n), nil, nil)
	}
	// Rank r has planned other sizes before: its memo differs.
	for r, tu := range tus {
		_, err := tu.Choose(kspace.AllReduce, kspace.Sum, kspace.F32, int64(1<<(10+r)))
		require.NoError(t, err)
	}
	for b := int64(0); b <= 3*directLLLimitDefault; b += 40 {
		want, err := tus[0].Choose(kspace.AllReduce, kspace.Sum, kspace.F32, b)
		require.NoError(t, err)
		for r := 1; r < n; r++ {
			got, err := tus[r].Choose(kspace.AllReduce, kspace.Sum, kspace.F32, b)
			require.NoError(t, err)
			require.Equal(t, want, got, "rank %d, %d bytes", r, b)
		}
	}
}

// directLLLimitDefault is DirectLLLimit with the default channels.
const directLLLimitDefault = directLLBytes * directLLMaxChannels

// DirectLLLimit is exactly where directChannels stops running the LL
// one-shot, whatever the channel settings.
func TestDirectLLLimit(t *testing.T) {
	for _, env := range []map[string]string{
		nil,
		{"NCCL_MAX_NCHANNELS": "1"},
		{"NCCL_MAX_NCHANNELS": "3"},
		{"NCCL_MIN_NCHANNELS": "8"},
		{"NCCL_NCHANNELS": "2"},
		{"NCCL_NCHANNELS": "16"},
	} {
		tu := newTuner(t, h200Across(2), env, nil)
		lim := tu.DirectLLLimit()
		if env == nil {
			assert.Equal(t, int64(directLLLimitDefault), lim)
		}
		for b := int64(1); b <= lim+3*directLLBytes; b += 7 {
			_, _, mode := tu.directChannels(kspace.AllReduce, b)
			require.Equal(t, b <= lim, mode == directLL, "%v: %d bytes (limit %d)", env, b, lim)
		}
	}
}

// NCCL_ALGO=allreduce:direct across processes without windows runs the LL
// one-shot up to DirectLLLimit and is an error naming the size and the
// limit above it: no other algorithm, no hang.
func TestDirectLLAcrossForced(t *testing.T) {
	env := map[string]string{"NCCL_ALGO": "allreduce:direct"}
	tu := newTuner(t, h200Across(2), env, nil)
	for _, b := range []int64{8, directLLBytes, directLLLimitDefault} {
		ch, err := tu.Choose(kspace.AllReduce, kspace.Sum, kspace.F32, b)
		require.NoError(t, err, "%d bytes", b)
		assert.Equal(t, kspace.Direct, ch.Algo, "%d bytes", b)
	}
	for _, b := range []int64{directLLLimitDefault + 1, 1 << 20} {
		_, err := tu.Choose(kspace.AllReduce, kspace.Sum, kspace.F32, b)
		require.Error(t, err, "%d bytes", b)
		assert.ErrorIs(t, err, ErrNoChoice)
		assert.ErrorIs(t, err, ErrDirectLLOnly)
		assert.Contains(t, err.Error(), fmt.Sprintf("AllReduce of %d bytes", b))
		assert.Contains(t, err.Error(), fmt.Sprintf("up to %d bytes", directLLLimitDefault))
		assert.Contains(t, err.Error(), "NCCL_ALGO")
	}
	// The other collectives have no DIRECT there.
	_, err := newTuner(t, h200Across(2), map[string]string{"NCCL_ALGO": "allgather:direct"}, nil).
		Choose(kspace.AllGather, kspace.Sum, kspace.F32, 8)
	assert.ErrorIs(t, err, ErrNoChoice)
	assert.NotErrorIs(t, err, ErrDirectLLOnly)
	// Ring and DIRECT allowed (4 ranks: on 2 the ring wins at every size):
	// DIRECT small, the ring above the limit.
	both := newTuner(t, h200Across(4), map[string]string{"NCCL_ALGO": "ring,direct"}, nil)
	ch, err := both.Choose(kspace.AllReduce, kspace.Sum, kspace.F32, 8)
	require.NoError(t, err)
	assert.Equal(t, kspace.Direct, ch.Algo)
	ch, err = both.Choose(kspace.AllReduce, kspace.Sum, kspace.F32, 1<<20)
	require.NoError(t, err)
	assert.Equal(t, kspace.Ring, ch.Algo)
}
