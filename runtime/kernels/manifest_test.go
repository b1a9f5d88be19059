package kernels

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/gen"
	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/kset"
	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/cuda"
)

const slimFilter = "AllReduce Sum (f32|bf16) * *"

// manifestOf is the manifest ncclgen build would write for filter, after
// a trip through the kernel-set file.
func manifestOf(t *testing.T, filter string) *kset.Manifest {
	t.Helper()
	s, err := kspace.NewSpace(kspace.MustParseFilter(filter))
	require.NoError(t, err)
	b, err := kset.Wrap(gen.KernelSet(s, []string{"sm_90"}), fakeFatbin())
	require.NoError(t, err)
	m, img, err := kset.Split(b)
	require.NoError(t, err)
	assert.Equal(t, fakeFatbin(), img)
	return m
}

func TestManifestOfFullSetIsTheGeneratedTables(t *testing.T) {
	if generated.Filter != "" {
		t.Skip("generated/ was regenerated with a filter")
	}
	tab, err := tablesOf(manifestOf(t, ""))
	require.NoError(t, err)
	assert.Equal(t, genTables.funcs, tab.funcs)
	assert.Equal(t, genTables.kernels, tab.kernels)
	assert.Equal(t, genTables.rowToID, tab.rowToID)
	assert.Equal(t, generated.FuncTableSymbol, tab.funcTable)
}

func TestManifestResolvesLikeTheModel(t *testing.T) {
	// Every row resolves through a slim set's manifest exactly as through
	// the tables the generator would have emitted for that filter.
	for _, filter := range []string{slimFilter, "SendRecv", "AllGather * *|Broadcast * *|SendRecv", "AllReduce Sum f32 RING SIMPLE"} {
		tab, err := tablesOf(manifestOf(t, filter))
		require.NoError(t, err)
		want := modelTables(t, filter)
		assert.Equal(t, want.funcs, tab.funcs, filter)
		assert.Equal(t, want.kernels, tab.kernels, filter)
		for _, f := range kspace.Rows() {
			id, err := tab.resolve(f)
			wid, werr := want.resolve(f)
			assert.Equal(t, wid, id, "%s: %v", filter, f)
			if werr == nil {
				assert.NoError(t, err, "%s: %v", filter, f)
				continue
			}
			assert.EqualError(t, err, werr.Error(), "%s: %v", filter, f)
		}
	}
}

func TestSlimSetMissingFunction(t *testing.T) {
	tab, err := tablesOf(manifestOf(t, slimFilter))
	require.NoError(t, err)
	_, err = tab.resolve(parse(t, "AllReduce Sum f32 RING LL"))
	require.NoError(t, err)
	_, err = tab.resolve(parse(t, "AllReduce Sum bf16 TREE SIMPLE"))
	require.NoError(t, err)
	_, err = tab.resolve(parse(t, "AllGather RING LL"))
	require.ErrorIs(t, err, ErrNotBuilt)
	assert.EqualError(t, err, `kernels: function not built: AllGather RING LL is not in this kernel set (built with filter "AllReduce Sum (f32|bf16) * *")`)
	_, err = tab.resolve(parse(t, "AllReduce Sum f16 RING LL"))
	assert.ErrorIs(t, err, ErrNotBuilt)
	_, err = tab.resolve(kspace.SendRecvFunc)
	assert.ErrorIs(t, err, ErrNotBuilt)
}

// fakeSet is a Set over tab with every kernel "present", for the pure
// table logic (no CUDA).
func fakeSet(tab *tables, arch int) *Set {
	m := &module{tab: tab, arch: arch, kernels: make([]*cuda.Function, len(tab.kernels)), absent: make([]string, len(tab.kernels))}
	for i := range m.kernels {
		m.kernels[i] = new(cuda.Function)
	}
	return &Set{m: m}
}

func TestSetResolvesThroughItsManifest(t *testing.T) {
	m := manifestOf(t, slimFilter)
	tab, err := tablesOf(m)
	require.NoError(t, err)
	s := fakeSet(tab, 900)
	assert.Equal(t, slimFilter, s.Filter())

	f := parse(t, "AllReduce Sum bf16 RING LL128")
	id, kern, err := s.Resolve(f)
	require.NoError(t, err)
	assert.Equal(t, "AllReduce Sum bf16 RING LL128", m.Funcs[id].Name, "the set's own id")
	assert.Equal(t, m.Funcs[id].Kernel, kern)
	assert.Less(t, id, len(m.Funcs))
	assert.True(t, s.Available(f))

	g := parse(t, "AllGather RING SIMPLE")
	assert.False(t, s.Available(g))
	_, _, err = s.Resolve(g)
	require.ErrorIs(t, err, ErrNotBuilt)
	assert.Contains(t, err.Error(), "AllGather RING SIMPLE")
	assert.Contains(t, err.Error(), slimFilter)

	// A function whose arch the device lacks is unavailable there.
	fp8, err := tablesOf(manifestOf(t, "AllReduce Sum f8e4m3 RING *"))
	require.NoError(t, err)
	f8 := parse(t, "AllReduce Sum f8e4m3 RING SIMPLE")
	assert.True(t, fakeSet(fp8, 900).Available(f8))
	_, err = fakeSet(fp8, 800).Lookup(f8)
	assert.ErrorIs(t, err, ErrUnsupported)
}

func TestABIMismatchRefused(t *testing.T) {
	m := manifestOf(t, slimFilter)
	m.ABI = "0123456789abcdef"
	_, err := tablesOf(m)
	require.ErrorIs(t, err, ErrABI)
	var ae *ABIError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, "0123456789abcdef", ae.Set)
	assert.Equal(t, generated.ABIVersion, ae.Runtime)
	assert.Contains(t, err.Error(), "ABI version 0123456789abcdef but this ncclgo has ABI version "+generated.ABIVersion)
	assert.Contains(t, err.Error(), slimFilter)

	b, err := kset.Wrap(m, fakeFatbin())
	require.NoError(t, err)
	_, _, _, err = splitSet(b)
	assert.ErrorIs(t, err, ErrABI)
}

func TestBareImageRefused(t *testing.T) {
	_, _, _, err := splitSet(fakeFatbin())
	require.ErrorIs(t, err, ErrMismatch)
	assert.Contains(t, err.Error(), "no kernel-set manifest")
	assert.Contains(t, err.Error(), "ncclgen build")

	// A damaged container is a mismatch too, and FromBytes says so early.
	b, err := kset.Wrap(manifestOf(t, slimFilter), fakeFatbin())
	require.NoError(t, err)
	binary.LittleEndian.PutUint32(b[8:], 1<<30)
	_, _, _, err = splitSet(b)
	assert.ErrorIs(t, err, ErrMismatch)
	_, _, err = FromBytes(b)
	assert.ErrorIs(t, err, ErrNoImage)
}

func TestManifestWithUnknownFunctions(t *testing.T) {
	// A set from a model with a function this one lacks keeps its ids
	// aligned and simply never resolves it.
	m := manifestOf(t, slimFilter)
	m.Funcs = append(m.Funcs, kset.Func{Name: "AllReduce Sum f4 RING LL", Kernel: 0, Implemented: true})
	m.Aliases["AllReduce Sum f4x RING LL"] = len(m.Funcs) - 1
	tab, err := tablesOf(m)
	require.NoError(t, err)
	assert.Len(t, tab.funcs, len(m.Funcs))
	assert.Equal(t, kspace.Nop, tab.funcs[len(m.Funcs)-1].Func.Kind)
	for _, id := range tab.rowToID {
		assert.NotEqual(t, int16(len(m.Funcs)-1), id)
	}
	assert.False(t, strings.Contains(tab.funcs[len(m.Funcs)-1].Symbol, "f4"))
}
