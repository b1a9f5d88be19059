package kspace

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// constBlocks returns the iota constant blocks of a Go file, keyed by their
// type: the names in value order (up to the Num... count).
func constBlocks(t *testing.T, file string) map[string][]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	require.NoError(t, err)
	out := map[string][]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST || len(g.Specs) == 0 {
			continue
		}
		first := g.Specs[0].(*ast.ValueSpec)
		id, ok := first.Type.(*ast.Ident)
		if !ok || len(first.Values) != 1 || first.Values[0].(*ast.Ident).Name != "iota" {
			continue
		}
		var names []string
		for _, s := range g.Specs {
			n := s.(*ast.ValueSpec).Names[0].Name
			if strings.HasPrefix(n, "Num") {
				break
			}
			names = append(names, n)
		}
		out[id.Name] = names
	}
	return out
}

// TestTablesMatchConstants checks that every table row sits at the value of
// the Go constant its names say.
func TestTablesMatchConstants(t *testing.T) {
	blocks := constBlocks(t, "kspace.go")
	for k, v := range constBlocks(t, "vocab.go") {
		blocks[k] = v
	}
	check := func(typ string, want []string) {
		t.Helper()
		assert.Equal(t, want, blocks[typ], "constants of %s", typ)
	}
	check("Coll", CollNames())
	check("RedOp", RedOpNames())
	var types, apiOps []string
	for _, ti := range Types {
		types = append(types, strings.ToUpper(ti.Name))
	}
	for _, o := range APIRedOps {
		apiOps = append(apiOps, "API"+o.GoName)
	}
	check("Type", types)
	check("APIRedOp", apiOps)
	check("Algo", names(Algos[:], func(a AlgoInfo) string { return a.GoName }))
	check("Proto", names(Protos[:], func(p ProtoInfo) string { return p.GoName }))
}

func TestTypeTable(t *testing.T) {
	for ty := Type(0); ty < NumTypes; ty++ {
		ti := Types[ty]
		assert.Equal(t, "nccl"+ti.GoName, ti.CName, ty)
		assert.Contains(t, []int{1, 2, 4, 8}, ti.Size, ty)
		assert.False(t, ti.Signed && ti.Float, ty)
		// Every name finds its own type and no other.
		for _, n := range ty.Names() {
			got, ok := LookupType(strings.ToUpper(n))
			assert.True(t, ok, n)
			assert.Equal(t, ty, got, n)
		}
		if ti.Signed {
			u := ty.Unsigned()
			assert.Equal(t, ti.Size, u.Size())
			assert.False(t, u.IsSigned())
			assert.True(t, u.IsInteger())
		}
	}
	// nccl.h's values.
	assert.Equal(t, "ncclFloat32", Types[7].CName)
	assert.Equal(t, "ncclBfloat16", Types[9].CName)
	assert.Equal(t, "ncclFloat8e5m2", Types[11].CName)
	assert.Equal(t, U32, I32.Unsigned())
	assert.Equal(t, F32, F32.Unsigned())
	_, ok := LookupType("fp32")
	assert.False(t, ok)
}

func TestBusFactors(t *testing.T) {
	// nccl-tests' definitions, at 8 ranks.
	want := map[Coll]float64{
		AllReduce: 2 * 7.0 / 8, AllGather: 7.0 / 8, AllGatherV: 7.0 / 8, ReduceScatter: 7.0 / 8,
		Broadcast: 1, Reduce: 1, SendRecv: 1,
	}
	for c := Coll(0); c < NumColls; c++ {
		assert.Equal(t, want[c], c.BusFactor(8), c)
	}
	assert.Equal(t, 1.0, BusSpread.Factor(2)*2)
	assert.Equal(t, 1.0, BusAllReduce.Factor(2))
}

func TestBlocks(t *testing.T) {
	// One rank's send and receive buffers, in blocks of the call's size,
	// on 4 ranks, and their bytes for a call of 8 bytes.
	type ext struct{ send, recv int }
	want := map[Coll]ext{
		Broadcast: {1, 1}, Reduce: {1, 1}, AllReduce: {1, 1}, SendRecv: {1, 1},
		AllGather: {1, 4}, AllGatherV: {1, 4}, ReduceScatter: {4, 1},
	}
	require.Len(t, want, int(NumColls))
	for c := Coll(0); c < NumColls; c++ {
		s, r := c.Blocks(4)
		assert.Equal(t, want[c], ext{s, r}, c)
		sb, rb := c.Extents(8, 4)
		assert.Equal(t, [2]uint64{8 * uint64(want[c].send), 8 * uint64(want[c].recv)}, [2]uint64{sb, rb}, c)
		// One rank: every buffer is the call's size.
		s, r = c.Blocks(1)
		assert.Equal(t, ext{1, 1}, ext{s, r}, c)
	}
}

func TestCollTable(t *testing.T) {
	for c := Coll(0); c < NumColls; c++ {
		ci := Colls[c]
		if ci.NCCLName != "" {
			assert.Equal(t, "ncclFunc"+ci.Name, ci.NCCLName)
		}
		assert.Equal(t, ci.Reduces, c == Reduce || c == ReduceScatter || c == AllReduce, c)
	}
	for o := APIRedOp(0); o < NumAPIRedOps; o++ {
		assert.Equal(t, "nccl"+APIRedOps[o].GoName, APIRedOps[o].CName)
	}
}

func TestTestsNames(t *testing.T) {
	// nccl-tests' test_typenames and test_opnames.
	assert.Equal(t, []string{"int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double", "bfloat16", "f8e4m3", "f8e5m2"}, TestsTypeNames())
	assert.Equal(t, []string{"sum", "prod", "max", "min", "avg"}, TestsRedOpNames())
	// Every spelling ncclperf accepted before the table.
	for s, want := range map[string]Type{"char": I8, "int": I32, "float16": F16, "float32": F32, "float64": F64, "bf16": BF16,
		"f16": F16, "f32": F32, "f64": F64, "i8": I8, "u8": U8, "i32": I32, "u32": U32, "i64": I64, "u64": U64, "half": F16, "double": F64} {
		got, ok := LookupType(s)
		assert.True(t, ok, s)
		assert.Equal(t, want, got, s)
	}
}
