package kspace

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNCCLParity(t *testing.T) {
	s, err := NewSpace(Filter{})
	require.NoError(t, err)
	assert.Equal(t, Summary{Rows: 1999, Valid: 919, Functions: 673, Kernels: 40}, s.Summary())
}

// The design's filter examples (docs/ARCHITECTURE.md) and their (functions, kernels).
func TestFilterExamples(t *testing.T) {
	cases := []struct {
		pattern  string
		fns, krn int
	}{
		{"SendRecv", 2, 2},
		{"AllGather * *|Broadcast * *|SendRecv", 11, 4},
		{"AllReduce Sum f32 * *", 11, 3},
		{"AllReduce MinMax i32 NVLS *", 2, 1},
		{"AllReduce Sum f32 RING LL128", 2, 1},
	}
	for _, c := range cases {
		t.Run(c.pattern, func(t *testing.T) {
			s, err := NewSpace(MustParseFilter(c.pattern))
			require.NoError(t, err)
			sum := s.Summary()
			assert.Equal(t, 1999, sum.Rows)
			assert.Equal(t, 919, sum.Valid)
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
				a == PAT && (c == AllGather || c == ReduceScatter)
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
