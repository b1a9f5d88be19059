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
	// collective rows), in NCCL's order; ncclgo's own algorithms follow:
	// DIRECT's AllGather and Broadcast (3 protocols each, SIMPLE valid),
	// AllReduce and ReduceScatter (5 ops × 12 types × 3 protocols each; 42
	// valid: SIMPLE, no PreMulSum, SumPostDiv on integers only).
	assert.Len(t, rowsOf(false), 1998)
	assert.Len(t, rowsOf(true), 3+3+180+180)
	assert.Equal(t, Summary{Rows: 2365, Valid: 961 + 2 + 42, Functions: 735, Kernels: 40}, s.Summary())
}

// Rows of NCCL's algorithms sit where NCCL puts them whatever ncclgo adds.
func TestOwnAlgosFollowNCCLRows(t *testing.T) {
	f := Func{Coll: ReduceScatter, RedOp: SumPostDiv, Type: F8E5M2, Algo: PAT, Proto: Simple}
	row, ok := RowOf(f)
	require.True(t, ok)
	assert.Equal(t, 1998, row, "NCCL's last row")
	row, ok = RowOf(Func{Coll: AllGather, RedOp: Unset, Type: Unset, Algo: Direct, Proto: LL})
	require.True(t, ok)
	assert.Equal(t, 1999, row, "the first DIRECT row follows NCCL's")
	d := Func{Coll: AllReduce, RedOp: Sum, Type: I8, Algo: Direct, Proto: LL}
	row, ok = RowOf(d)
	require.True(t, ok)
	assert.Equal(t, 1999+6, row, "AllReduce's DIRECT rows follow AllGather's and Broadcast's")
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
	for _, c := range []Coll{AllReduce, AllGather, ReduceScatter, Broadcast} {
		assert.True(t, Implemented(c, Direct), c.String())
	}
	assert.False(t, Implemented(Reduce, Direct))
	assert.False(t, Implemented(AllGatherV, Direct))
}

// The design's filter examples (docs/ARCHITECTURE.md) and their (functions, kernels).
func TestFilterExamples(t *testing.T) {
	cases := []struct {
		pattern  string
		fns, krn int
	}{
		{"SendRecv", 2, 2},
		{"AllGather * *|Broadcast * *|SendRecv", 13, 4},
		{"AllReduce Sum f32 * *", 12, 3},
		{"AllReduce MinMax i32 NVLS *", 2, 1},
		{"AllReduce Sum f32 RING LL128", 2, 1},
	}
	for _, c := range cases {
		t.Run(c.pattern, func(t *testing.T) {
			s, err := NewSpace(MustParseFilter(c.pattern))
			require.NoError(t, err)
			sum := s.Summary()
			assert.Equal(t, 2365, sum.Rows)
			assert.Equal(t, 1005, sum.Valid)
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
				a == Direct && (c == AllReduce || c == AllGather || c == ReduceScatter || c == Broadcast)
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

// A function lookup runs on every planned call (kernels.Set.Resolve): it
// must not allocate.
func TestRowOfAllocatesNothing(t *testing.T) {
	rows := Rows()
	i := 0
	allocs := testing.AllocsPerRun(1000, func() {
		if _, ok := RowOf(rows[i%len(rows)]); !ok {
			t.Fatal("no row")
		}
		i += 97
	})
	require.Zero(t, allocs)
}

// InlineSiblings: a RING LL kernel's SIMPLE sibling, and for AllReduce
// every op's DIRECT function as an LL one-shot entry (DIRECT has no
// PreMulSum), only those in the space; nothing for TREE, fp8 or a kernel
// whose siblings the filter leaves out.
func TestInlineSiblings(t *testing.T) {
	s, err := NewSpace(MustParseFilter("AllReduce * f32 * *"))
	require.NoError(t, err)
	k := Func{Coll: AllReduce, RedOp: Sum, Type: F32, Algo: Ring, Proto: LL}
	var got []string
	for _, sib := range s.InlineSiblings(k) {
		assert.Equal(t, s.FuncID(sib.Func), sib.ID)
		assert.Equal(t, sib.Func.Algo == Direct, sib.LLOneShot, "%s", sib.Func)
		got = append(got, sib.Func.String())
	}
	assert.Equal(t, []string{"AllReduce Sum f32 RING SIMPLE", "AllReduce Sum f32 DIRECT SIMPLE",
		"AllReduce Prod f32 DIRECT SIMPLE", "AllReduce MinMax f32 DIRECT SIMPLE"}, got)

	tree := k
	tree.Algo = Tree
	assert.Empty(t, s.InlineSiblings(tree))
	full, err := NewSpace(Filter{})
	require.NoError(t, err)
	fp8 := Func{Coll: AllReduce, RedOp: Sum, Type: F8E4M3, Algo: Ring, Proto: LL}
	assert.Empty(t, full.InlineSiblings(fp8))
	u32 := Func{Coll: AllReduce, RedOp: Sum, Type: U32, Algo: Ring, Proto: LL}
	assert.Len(t, full.InlineSiblings(u32), 5, "SIMPLE and the DIRECT of Sum, Prod, MinMax, SumPostDiv")
	ag := Func{Coll: AllGather, RedOp: Unset, Type: Unset, Algo: Ring, Proto: LL}
	assert.Len(t, full.InlineSiblings(ag), 1, "AllGather: its SIMPLE sibling only")

	alone, err := NewSpace(MustParseFilter("AllReduce Sum f32 RING LL"))
	require.NoError(t, err)
	assert.Empty(t, alone.InlineSiblings(k))
}
