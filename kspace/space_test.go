package kspace

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNCCLParity(t *testing.T) {
	s, err := NewSpace(Filter{})
	require.NoError(t, err)
	// NCCL's algorithms keep NCCL's 1999 rows (SendRecv and its 1998
	// collective rows), in NCCL's order; ncclgo's own algorithms (DIRECT:
	// AllReduce × 5 ops × 12 types × 3 protocols, 48 of them valid: no PreMulSum) follow.
	assert.Len(t, rowsOf(false), 1998)
	assert.Len(t, rowsOf(true), 180)
	assert.Equal(t, Summary{Rows: 2179, Valid: 961, Functions: 703, Kernels: 40}, s.Summary())
}

// Rows of NCCL's algorithms sit where NCCL puts them whatever ncclgo adds.
func TestOwnAlgosFollowNCCLRows(t *testing.T) {
	f := Func{Coll: ReduceScatter, RedOp: SumPostDiv, Type: F8E5M2, Algo: PAT, Proto: Simple}
	row, ok := RowOf(f)
	require.True(t, ok)
	assert.Equal(t, 1998, row, "NCCL's last row")
	d := Func{Coll: AllReduce, RedOp: Sum, Type: I8, Algo: Direct, Proto: LL}
	row, ok = RowOf(d)
	require.True(t, ok)
	assert.Equal(t, 1999, row, "the first DIRECT row follows NCCL's")
	_, why, ok := Requirements(d)
	assert.False(t, ok, "DIRECT moves data with SIMPLE only")
	assert.Contains(t, why, "DIRECT")
	d.Proto = Simple
	_, _, ok = Requirements(d)
	assert.True(t, ok)
	d.RedOp = PreMulSum
	_, why, ok = Requirements(d)
	assert.False(t, ok, "PreMulSum's scalar is per rank")
	assert.Contains(t, why, "PreMulSum")
	assert.True(t, Implemented(AllReduce, Direct))
	assert.False(t, Implemented(AllGather, Direct))
}

// The design's filter examples (docs/ARCHITECTURE.md) and their (functions, kernels).
func TestFilterExamples(t *testing.T) {
	cases := []struct {
		pattern  string
		fns, krn int
	}{
		{"SendRecv", 2, 2},
		{"AllGather * *|Broadcast * *|SendRecv", 11, 4},
		{"AllReduce Sum f32 * *", 12, 3},
		{"AllReduce MinMax i32 NVLS *", 2, 1},
		{"AllReduce Sum f32 RING LL128", 2, 1},
	}
	for _, c := range cases {
		t.Run(c.pattern, func(t *testing.T) {
			s, err := NewSpace(MustParseFilter(c.pattern))
			require.NoError(t, err)
			sum := s.Summary()
			assert.Equal(t, 2179, sum.Rows)
			assert.Equal(t, 961, sum.Valid)
			assert.Equal(t, c.fns, sum.Functions)
			assert.Equal(t, c.krn, sum.Kernels)
		})
	}
}

func TestRowOfMatchesEnumeration(t *testing.T) {
	for i, fn := range Rows() {
		row, ok := RowOf(fn)
		require.True(t, ok, fn.String())
		require.Equal(t, i, row, fn.String())
	}
}

func TestImplemented(t *testing.T) {
	for c := Coll(0); c < NumColls; c++ {
		for a := Algo(0); a < NumAlgos; a++ {
			want := c == SendRecv || a == Ring ||
				a == Tree && c == AllReduce ||
				a == PAT && (c == AllGather || c == ReduceScatter) ||
				a == Direct && c == AllReduce
			assert.Equal(t, want, Implemented(c, a), "%s %s", c, a)
		}
	}
	// PAT's functions are SIMPLE only.
	for _, c := range []Coll{AllGather, ReduceScatter} {
		for p := Proto(0); p < NumProtos; p++ {
			f := Func{Coll: c, RedOp: Unset, Type: Unset, Algo: PAT, Proto: p}
			if c.HasRedOp() {
				f.RedOp, f.Type = Sum, F32
			}
			_, _, ok := Requirements(f)
			assert.Equal(t, p == Simple, ok, f.String())
		}
	}
}
