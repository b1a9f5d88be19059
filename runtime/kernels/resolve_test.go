package kernels

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/kspace"
)

// modelTables builds the host tables that ncclgen would generate for filter,
// mirroring gen's Go emitter.
func modelTables(t *testing.T, filter string) *tables {
	t.Helper()
	s, err := kspace.NewSpace(kspace.MustParseFilter(filter))
	require.NoError(t, err)
	tb := &tables{filter: filter}
	for i, fn := range s.Funcs {
		tb.funcs = append(tb.funcs, generated.FuncInfo{
			Func:        fn,
			Symbol:      "ngDevFunc_" + fn.Symbol(),
			Kernel:      s.KernelOf[i],
			Specialized: s.Specialized(i),
			Implemented: fn.Kind != kspace.Ordinary || kspace.Implemented(fn.Coll, fn.Algo),
			Req:         kspace.KernelReq(fn),
		})
	}
	for _, k := range s.Kernels {
		tb.kernels = append(tb.kernels, generated.KernelInfo{Func: k, Symbol: "ngDevKernel_" + k.Symbol(), Req: kspace.KernelReq(k)})
	}
	for _, id := range s.RowToID {
		tb.rowToID = append(tb.rowToID, int16(id))
	}
	return tb
}

func parse(t *testing.T, s string) kspace.Func {
	t.Helper()
	f, err := kspace.ParseFunc(s)
	require.NoError(t, err)
	return f
}

func TestGeneratedTablesMatchModel(t *testing.T) {
	// The package reads generated/; it must agree with the model for the
	// filter it was generated with, or Resolve would return wrong ids.
	want := modelTables(t, generated.Filter)
	assert.Equal(t, want.funcs, genTables.funcs)
	assert.Equal(t, want.kernels, genTables.kernels)
	assert.Equal(t, want.rowToID, genTables.rowToID)
}

func TestResolveEveryRow(t *testing.T) {
	var ok, invalid, unsupported int
	for _, f := range kspace.Rows() {
		id, err := Resolve(f)
		_, _, valid := kspace.Requirements(f)
		switch {
		case !valid:
			assert.ErrorIs(t, err, ErrInvalid, "%v", f)
			invalid++
		case !kspace.Implemented(f.Coll, f.Algo):
			assert.ErrorIs(t, err, ErrUnsupported, "%v", f)
			assert.False(t, Available(f))
			unsupported++
		default:
			require.NoError(t, err, "%v", f)
			assert.True(t, Available(f))
			// The table entry is f's primary (signed sums share the
			// unsigned implementation).
			assert.Equal(t, kspace.Primary(f), generated.Funcs[id].Func, "%v", f)
			ok++
		}
	}
	t.Logf("rows: %d runnable, %d unsupported, %d invalid", ok, unsupported, invalid)
	assert.Equal(t, 2365, ok+unsupported+invalid) // NCCL's 1999 rows and DIRECT's 366
	assert.Equal(t, 1005, ok+unsupported)
}

func TestResolveExamples(t *testing.T) {
	id, err := Resolve(kspace.SendRecvFunc)
	require.NoError(t, err)
	assert.Equal(t, "ngDevFunc_SendRecv", generated.Funcs[id].Symbol)
	assert.True(t, generated.Funcs[id].Specialized)

	id, err = Resolve(parse(t, "AllReduce Sum f32 RING LL"))
	require.NoError(t, err)
	assert.True(t, generated.Funcs[id].Specialized)
	assert.Equal(t, "ngDevKernel_AllReduce_Sum_f32_RING_LL", generated.Kernels[generated.Funcs[id].Kernel].Symbol)

	// i32 Sum runs u32's implementation.
	i32, err := Resolve(parse(t, "AllReduce Sum i32 RING SIMPLE"))
	require.NoError(t, err)
	u32, err := Resolve(parse(t, "AllReduce Sum u32 RING SIMPLE"))
	require.NoError(t, err)
	assert.Equal(t, u32, i32)

	_, err = Resolve(parse(t, "AllReduce Sum f32 NVLS SIMPLE"))
	assert.ErrorIs(t, err, ErrUnsupported)
	assert.Contains(t, err.Error(), "no device implementation of NVLS for AllReduce")
}

func TestResolveInvalid(t *testing.T) {
	cases := map[string]struct {
		f    kspace.Func
		want string
	}{
		"proto":   {parse(t, "AllReduce Sum f32 NVLS LL"), "protocol LL runs only with RING and TREE"},
		"postdiv": {parse(t, "AllReduce SumPostDiv f32 RING LL"), "SumPostDiv is only for integer types"},
		"nvls op": {parse(t, "AllReduce Prod f32 NVLS SIMPLE"), "NVLS does not support Prod on f32"},
		"algo":    {kspace.Func{Coll: kspace.Broadcast, RedOp: kspace.Unset, Type: kspace.Unset, Algo: kspace.Tree, Proto: kspace.LL}, "Broadcast has no algorithm TREE"},
		"range":   {kspace.Func{Coll: kspace.AllReduce, RedOp: kspace.Sum, Type: 99, Algo: kspace.Ring, Proto: kspace.LL}, "out of range"},
		"nop":     {kspace.NopFunc, "not a collective function"},
		"generic": {kspace.GenericKernel, "not a collective function"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			id, err := Resolve(c.f)
			assert.Equal(t, -1, id)
			require.ErrorIs(t, err, ErrInvalid)
			assert.Contains(t, err.Error(), c.want)
			assert.False(t, Available(c.f))
		})
	}
}

func TestResolveFiltered(t *testing.T) {
	tb := modelTables(t, "AllReduce Sum f32 * *")
	id, err := tb.resolve(parse(t, "AllReduce Sum f32 RING SIMPLE"))
	require.NoError(t, err)
	assert.Equal(t, kspace.Ordinary, tb.funcs[id].Func.Kind)

	_, err = tb.resolve(parse(t, "AllReduce Sum f64 RING SIMPLE"))
	require.ErrorIs(t, err, ErrNotBuilt)
	assert.EqualError(t, err, `kernels: function not built: AllReduce Sum f64 RING SIMPLE is not in this kernel set (built with filter "AllReduce Sum f32 * *")`)

	_, err = tb.resolve(kspace.SendRecvFunc)
	assert.ErrorIs(t, err, ErrNotBuilt)

	// Built but not implemented.
	_, err = tb.resolve(parse(t, "AllReduce Sum f32 COLLNET_DIRECT SIMPLE"))
	assert.ErrorIs(t, err, ErrUnsupported)

	// Never valid stays invalid whatever the filter.
	_, err = tb.resolve(parse(t, "AllReduce Sum f32 NVLS LL"))
	assert.ErrorIs(t, err, ErrInvalid)

	// A filter that leaves out the preferred kernel routes through Generic.
	tb = modelTables(t, "AllReduce Sum f32 RING SIMPLE")
	id, err = tb.resolve(parse(t, "AllReduce Sum f32 RING SIMPLE"))
	require.NoError(t, err)
	assert.Equal(t, kspace.Generic, tb.kernels[tb.funcs[id].Kernel].Func.Kind)
	assert.False(t, tb.funcs[id].Specialized)
}

func TestDescribeFilter(t *testing.T) {
	assert.Equal(t, "no filter (every function)", describeFilter(""))
	assert.Equal(t, `filter "SendRecv"`, describeFilter("SendRecv"))
	e := &MismatchError{Symbol: "ngDevKernel_AllReduce_Sum_f32_RING_LL", Filter: "AllReduce Sum f32 * *"}
	assert.Equal(t, `kernels: the kernel set's image lacks ngDevKernel_AllReduce_Sum_f32_RING_LL, which its manifest lists (set built with filter "AllReduce Sum f32 * *"); rebuild the kernel set with ncclgen build`, e.Error())
	assert.ErrorIs(t, e, ErrMismatch)
}

// The planner resolves a function on every call: a valid one must cost no
// allocation.
func TestResolveAllocatesNothing(t *testing.T) {
	f := kspace.Func{Coll: kspace.AllReduce, RedOp: kspace.Sum, Type: kspace.F32, Algo: kspace.Ring, Proto: kspace.LL}
	_, err := Resolve(f)
	require.NoError(t, err)
	require.Zero(t, testing.AllocsPerRun(1000, func() { _, _ = Resolve(f) }))
}
