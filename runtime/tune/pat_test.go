package tune

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/kspace"
)

// hosts is n fake hosts of one rank each, as under NCCL_HOSTID on one
// GPU with MPS (RanksPerGPU 1: each rank is its own host's only rank).
func hosts(n int) Topology {
	return Topology{NRanks: n, NNodes: n, NGPUs: 1, RanksPerGPU: 1, SMCount: 132, BlocksPerSM: 1, IntraBW: 20, InterBW: 12}
}

func TestPATForced(t *testing.T) {
	for _, n := range []int{2, 3, 4, 17} {
		tu := newTuner(t, hosts(n), map[string]string{"NCCL_ALGO": "PAT"}, nil)
		for _, c := range []kspace.Coll{kspace.AllGather, kspace.ReduceScatter} {
			for _, b := range []int64{0, 8, 65536, 256 << 20} {
				ch, err := tu.Choose(c, kspace.Sum, kspace.F32, b)
				require.NoError(t, err, "n=%d %s %d", n, c, b)
				assert.Equal(t, kspace.PAT, ch.Algo)
				assert.Equal(t, kspace.Simple, ch.Proto)
				assert.Equal(t, kspace.PAT, ch.Func.Algo)
				assert.LessOrEqual(t, ch.NChannels, PATMaxChannels)
			}
		}
		// PAT has nothing for AllReduce: NCCL_ALGO=PAT leaves it no algorithm.
		_, err := tu.Choose(kspace.AllReduce, kspace.Sum, kspace.F32, 8)
		require.ErrorIs(t, err, ErrNoChoice)
	}
}

func TestPATRefused(t *testing.T) {
	// Two ranks on each of two hosts: PAT needs one rank per host.
	tp := Topology{NRanks: 4, NNodes: 2, RanksPerGPU: 4, SMCount: 132, BlocksPerSM: 1, IntraBW: 20, InterBW: 2}
	tu := newTuner(t, tp, map[string]string{"NCCL_ALGO": "PAT"}, nil)
	_, err := tu.Choose(kspace.AllGather, 0, 0, 1<<20)
	require.ErrorIs(t, err, ErrNoChoice)
	assert.Contains(t, err.Error(), "PAT needs one rank per host, not 4 ranks on 2 hosts")
	// One host.
	tu = newTuner(t, h200(4), map[string]string{"NCCL_ALGO": "PAT"}, nil)
	_, err = tu.Choose(kspace.ReduceScatter, kspace.Sum, kspace.F32, 1<<20)
	require.ErrorIs(t, err, ErrNoChoice)
	assert.Contains(t, err.Error(), "one rank per host")
	// ReduceScatter beyond the FIFOs; AllGather still runs.
	tu = newTuner(t, hosts(PATMaxRanksReduceScatter+1), map[string]string{"NCCL_ALGO": "PAT"}, nil)
	_, err = tu.Choose(kspace.ReduceScatter, kspace.Sum, kspace.F32, 1<<20)
	require.ErrorIs(t, err, ErrNoChoice)
	assert.Contains(t, err.Error(), "at most 24 ranks, not 25")
	ch, err := tu.Choose(kspace.AllGather, 0, 0, 1<<20)
	require.NoError(t, err)
	assert.Equal(t, kspace.PAT, ch.Algo)
	// Without NCCL_ALGO, those communicators never choose PAT.
	for _, tp := range []Topology{tp, h200(8), hosts(PATMaxRanksReduceScatter + 1)} {
		tu := newTuner(t, tp, nil, nil)
		for _, b := range sizes {
			ch, err := tu.Choose(kspace.ReduceScatter, kspace.Sum, kspace.F32, b)
			require.NoError(t, err)
			assert.NotEqual(t, kspace.PAT, ch.Algo, "%+v %d bytes", tp, b)
		}
	}
}

// TestPATChosen checks that the model picks PAT where it wins: on many
// hosts, at sizes where a ring's n-1 network hops cost more than PAT's
// ceil(log2 n) and LL's bandwidth no longer makes up for it; never on two
// hosts (one hop either way, PAT slower per byte), never for large calls.
// LL128 is off, as runtime/comm turns it off over NET.
func TestPATChosen(t *testing.T) {
	noLL128 := func(f kspace.Func) bool { return f.Proto != kspace.LL128 }
	picked := func(n int, c kspace.Coll) (sizes []int64) {
		tu := newTuner(t, hosts(n), nil, noLL128)
		for b := int64(8); b <= 1<<30; b *= 2 {
			ch, err := tu.Choose(c, kspace.Sum, kspace.F32, b)
			require.NoError(t, err)
			if ch.Algo == kspace.PAT {
				sizes = append(sizes, b)
			}
		}
		return sizes
	}
	for _, c := range []kspace.Coll{kspace.AllGather, kspace.ReduceScatter} {
		assert.Empty(t, picked(2, c), "%s on 2 hosts", c)
		s := picked(16, c)
		require.NotEmpty(t, s, "%s on 16 hosts", c)
		assert.Less(t, s[len(s)-1], int64(64<<20), "%s on 16 hosts: PAT is for small and medium sizes", c)
	}
}

func TestPATFitsTable(t *testing.T) {
	for n := 1; n <= 40; n++ {
		assert.Equal(t, n <= PATMaxRanksReduceScatter, PATFits(kspace.ReduceScatter, n), "n=%d", n)
		assert.True(t, PATFits(kspace.AllGather, n))
		assert.False(t, PATFits(kspace.AllReduce, n))
	}
}
