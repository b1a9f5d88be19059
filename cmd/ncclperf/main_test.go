package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/ncclgo/ncclgo/internal/launch"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseFlags(t *testing.T) {
	var errb bytes.Buffer
	c, err := parseFlags([]string{"-coll", "all_gather", "-b", "8", "-e", "128M", "-f", "2", "-g", "4", "-d", "bf16", "-o", "max"}, &errb)
	require.NoError(t, err)
	assert.Equal(t, collAllGather, c.coll)
	assert.Equal(t, int64(8), c.minBytes)
	assert.Equal(t, int64(128<<20), c.maxBytes)
	assert.Equal(t, bfloat16T, c.dt)
	assert.Equal(t, opMax, c.op)

	for args, want := range map[string][]string{
		`-coll "gather"`:                              {"-coll", "gather"},
		`-d "float128"`:                               {"-d", "float128"},
		`-o "xor"`:                                    {"-o", "xor"},
		`-b/--minbytes "8Q"`:                          {"-b", "8Q"},
		"-r/--root 4: want a root":                    {"-g", "4", "-r", "4"},
		"-f/--stepfactor 1: want a factor":            {"-f", "1"},
		"-e/--maxbytes 8 is below -b/--minbytes 1024": {"-b", "1K", "-e", "8"},
		"lists 1 devices":                             {"-g", "2", "-devices", "0"},
	} {
		_, err := parseFlags(want, &errb)
		require.Error(t, err, args)
		assert.Contains(t, err.Error(), args)
	}
}

func TestSizes(t *testing.T) {
	c := &config{coll: collAllGather, nRanks: 4, dt: float32T}
	assert.Equal(t, int64(256), c.countFor(4096))
	s, r := c.bufferBytes(4096)
	assert.Equal(t, int64(1024), s)
	assert.Equal(t, int64(4096), r)
	c.coll = collAllReduce
	assert.InDelta(t, 1.5, c.coll.busFactor(4), 1e-9)
}

// TestCountsAreNcclTests checks the count argument and the size column
// against nccl-tests' GetCollByteCount of each collective; the float rows
// on 2 ranks are those all_gather_perf and all_reduce_perf print.
func TestCountsAreNcclTests(t *testing.T) {
	for _, tc := range []struct {
		coll         coll
		dt           dataType
		nRanks       int
		size         int64
		count, bytes int64
	}{
		{collAllReduce, float32T, 2, 8, 2, 8},
		{collAllReduce, float32T, 2, 1 << 30, 1 << 28, 1 << 30},
		{collBroadcast, float32T, 2, 6, 1, 4},
		{collAllGather, float32T, 2, 8, 0, 0}, // nccl-tests' 0-byte rows
		{collAllGather, float32T, 2, 16, 0, 0},
		{collAllGather, float32T, 2, 32, 4, 32},
		{collAllGather, float32T, 2, 1024, 128, 1024},
		{collAllGather, float32T, 2, 1 << 30, 1 << 27, 1 << 30},
		{collReduceScatter, float32T, 2, 16, 0, 0},
		{collReduceScatter, float32T, 2, 64, 8, 64},
		// Chunks rounded down to 16 bytes.
		{collAllGather, float32T, 3, 64, 4, 48},
		{collReduceScatter, float64T, 2, 48, 2, 32},
		{collAllGather, int8T, 2, 64, 32, 64},
		{collAllGather, int8T, 2, 48, 16, 32},
		{collAllToAll, float32T, 4, 4096, 256, 4096},
		{collAllToAll, float32T, 4, 48, 0, 0},
		{collSendRecv, float32T, 4, 12, 3, 12},
	} {
		c := &config{coll: tc.coll, dt: tc.dt, nRanks: tc.nRanks}
		count := c.countFor(tc.size)
		assert.Equal(t, tc.count, count, "%s %s %d ranks %d B: count", tc.coll, tc.dt, tc.nRanks, tc.size)
		assert.Equal(t, tc.bytes, c.rowBytes(count), "%s %s %d ranks %d B: size column", tc.coll, tc.dt, tc.nRanks, tc.size)
	}
	c := &config{coll: collAllGather, dt: float32T, nRanks: 2, minBytes: 8, maxBytes: 128, factor: 2}
	assert.Equal(t, []int64{32, 64, 128}, c.sizes(), "8 and 16 B are no-ops on 2 ranks")
	c.coll = collAllReduce
	assert.Equal(t, []int64{8, 16, 32, 64, 128}, c.sizes())
}

func TestEncodeDecode(t *testing.T) {
	vals := []float64{0, 1, 2, 3, 6, 24, 0.5, 96}
	for tt := int8T; tt <= float8e5m2T; tt++ {
		got := decode(tt, encode(tt, vals))
		for i, v := range vals {
			if !tt.isFloat() && v != float64(int64(v)) {
				continue
			}
			assert.InDelta(t, v, got[i], 1e-9, "%s %v", tt, v)
		}
	}
}

func TestCollAll(t *testing.T) {
	var errb bytes.Buffer
	c, err := parseFlags([]string{"-coll", "all", "-b", "8", "-e", "8G", "-g", "8"}, &errb)
	require.NoError(t, err)
	assert.Equal(t, []coll{collAllReduce, collAllGather, collReduceScatter, collBroadcast}, c.colls)
	assert.Equal(t, int64(8<<30), c.maxBytes)
	assert.Equal(t, int64(64<<20), c.checkMax)
	c, err = parseFlags([]string{"-coll", "reduce", "-check-max", "1G"}, &errb)
	require.NoError(t, err)
	assert.Equal(t, []coll{collReduce}, c.colls)
	assert.Equal(t, int64(1<<30), c.checkMax)
	// 8 GiB AllGather over 8 ranks: 1 GiB in, 8 GiB out per rank.
	c = &config{coll: collAllGather, nRanks: 8, dt: float32T}
	s, r := c.bufferBytes(8 << 30)
	assert.Equal(t, int64(1<<30), s)
	assert.Equal(t, int64(8<<30), r)
}

func TestPlaceRanks(t *testing.T) {
	assert.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7}, placeRanks(8, 8), "one rank per GPU")
	assert.Equal(t, []int{0, 1}, placeRanks(2, 8))
	assert.Equal(t, []int{0, 1, 0, 1}, placeRanks(4, 2))
	assert.Equal(t, []int{0, 0, 0}, placeRanks(3, 1))
}

func TestRatio(t *testing.T) {
	// Below 64 KiB: NCCL's time over ours (ours 10 µs, NCCL 20 µs: 2).
	q, by := ratio(8, 10, 0.0008, 20, 0.0004)
	assert.InDelta(t, 2.0, q, 1e-9)
	assert.Equal(t, "time", by)
	q, by = ratio(64<<10-1, 40, 1, 20, 2)
	assert.InDelta(t, 0.5, q, 1e-9)
	assert.Equal(t, "time", by)
	// From 64 KiB: our busbw over NCCL's.
	q, by = ratio(64<<10, 10, 300, 12, 250)
	assert.InDelta(t, 1.2, q, 1e-9)
	assert.Equal(t, "busbw", by)
}

func TestCheckWindows(t *testing.T) {
	assert.Equal(t, [][2]int64{{0, 100}}, checkWindows(100, 100, nil))
	n := int64(2 << 30)
	ws := checkWindows(n, 16<<20, []int64{n / 8, n / 2})
	total := int64(0)
	for i, w := range ws {
		assert.Less(t, w[0], w[1])
		assert.GreaterOrEqual(t, w[0], int64(0))
		assert.LessOrEqual(t, w[1], n)
		if i > 0 {
			assert.Greater(t, w[0], ws[i-1][1], "sorted and disjoint")
		}
		total += w[1] - w[0]
	}
	assert.Equal(t, int64(0), ws[0][0], "the start is checked")
	assert.Equal(t, n, ws[len(ws)-1][1], "the end is checked")
	assert.Less(t, total, int64(4<<20), "a sample, not the whole")
	covered := func(i int64) bool {
		for _, w := range ws {
			if w[0] <= i && i < w[1] {
				return true
			}
		}
		return false
	}
	assert.True(t, covered(n/8-1) && covered(n/8), "chunk boundaries are checked")
	for i := range 12 {
		assert.Equal(t, fillValue(1, 3, i, opSum), fillValue(1, 3, i+fillChunk, opSum), "fill uploads one chunk and copies it along")
		assert.Equal(t, fillValue(1, 3, i, opProd), fillValue(1, 3, i+fillChunk, opProd))
	}
	differs := func(f func(i int) float64) bool {
		for i := range 200 {
			if f(i) != fillValue(1, 3, i, opSum) {
				return true
			}
		}
		return false
	}
	for _, shift := range []int{1, 3, 6} {
		assert.True(t, differs(func(i int) float64 { return fillValue(1, 3, i+shift, opSum) }), "shift by %d", shift)
	}
	assert.True(t, differs(func(i int) float64 { return fillValue(1, 0, i, opSum) }), "another rank's data")
}

func TestPointToPointSizes(t *testing.T) {
	c := &config{coll: collAllToAll, nRanks: 4, dt: float32T}
	assert.Equal(t, int64(256), c.countFor(4096), "alltoall: count is per peer")
	s, r := c.bufferBytes(4096)
	assert.Equal(t, int64(4096), s)
	assert.Equal(t, int64(4096), r)
	assert.Equal(t, int64(1024), c.sendCount(256))
	assert.InDelta(t, 0.75, c.coll.busFactor(4), 1e-9)
	assert.True(t, c.coll.p2p())

	c.coll = collSendRecv
	assert.Equal(t, int64(1024), c.countFor(4096))
	s, r = c.bufferBytes(4096)
	assert.Equal(t, int64(4096), s)
	assert.Equal(t, int64(4096), r)
	assert.InDelta(t, 1, c.coll.busFactor(4), 1e-9)

	for name, want := range map[string]coll{"send_recv": collSendRecv, "AllToAll": collAllToAll} {
		got, err := parseColl(name)
		require.NoError(t, err)
		assert.Equal(t, want, got)
	}
	assert.False(t, collAllReduce.p2p())
}

func TestMatchTestsConfig(t *testing.T) {
	t.Setenv(centricSchedEnv, "")
	os.Unsetenv(centricSchedEnv)
	require.NoError(t, matchTestsConfig(22703))
	_, set := os.LookupEnv(centricSchedEnv)
	assert.False(t, set, "before 2.28 nccl-tests sets nothing")
	require.NoError(t, matchTestsConfig(22809))
	assert.Equal(t, "1", os.Getenv(centricSchedEnv))
	t.Setenv(centricSchedEnv, "0")
	require.NoError(t, matchTestsConfig(22809))
	assert.Equal(t, "0", os.Getenv(centricSchedEnv), "the user's setting wins")
}

// TestCreateProfile checks -cpuprofile's and -trace's files: one per rank
// under a launcher (rank 0 keeps the name), and a start that fails leaves
// no open file behind and reports its error.
func TestCreateProfile(t *testing.T) {
	dir := t.TempDir()
	var got []string
	start := func(w io.Writer) error { got = append(got, w.(*os.File).Name()); return nil }
	for _, place := range []*launch.Place{nil, {Rank: 0, Size: 2}, {Rank: 1, Size: 2}} {
		f, err := createProfile(filepath.Join(dir, "p.prof"), place, start)
		require.NoError(t, err)
		require.NoError(t, f.Close())
	}
	assert.Equal(t, []string{filepath.Join(dir, "p.prof"), filepath.Join(dir, "p.prof"), filepath.Join(dir, "p.prof.1")}, got)
	boom := errors.New("profiling already on")
	_, err := createProfile(filepath.Join(dir, "q.prof"), nil, func(io.Writer) error { return boom })
	assert.ErrorIs(t, err, boom)
	_, err = createProfile(filepath.Join(dir, "no", "such", "dir"), nil, start)
	assert.Error(t, err)
}
