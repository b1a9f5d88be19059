package ncclgo

import (
	"github.com/ncclgo/ncclgo/kspace"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go/ast"
	"go/parser"
	"go/token"
	"math"
	"testing"
)

// TestConstantsMatchVocabulary checks the exported DataType and RedOp
// constants of types.go, names and values, against kspace's tables, so
// a row added there and not here (or the reverse) fails.
func TestConstantsMatchVocabulary(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "types.go", nil, 0)
	require.NoError(t, err)
	consts := map[string][]string{} // type -> names, in iota order
	aliases := map[string]string{}  // alias -> the constant it names
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		var typ string
		for i, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			if i == 0 {
				if id, ok := vs.Type.(*ast.Ident); ok {
					typ = id.Name
				}
			}
			if typ == "" && len(vs.Values) == 1 {
				if id, ok := vs.Values[0].(*ast.Ident); ok {
					aliases[vs.Names[0].Name] = id.Name
				}
				continue
			}
			if typ != "" && ast.IsExported(vs.Names[0].Name) {
				consts[typ] = append(consts[typ], vs.Names[0].Name)
			}
		}
	}
	var wantTypes, wantOps []string
	wantAliases := map[string]string{}
	for ty := kspace.Type(0); ty < kspace.NumTypes; ty++ {
		ti := kspace.Types[ty]
		wantTypes = append(wantTypes, ti.GoName)
		for _, a := range ti.Aliases {
			wantAliases[a] = ti.GoName
		}
		assert.Equal(t, ti.GoName, DataType(ty).String())
		assert.Equal(t, ti.Size, DataType(ty).Size())
		assert.Equal(t, ti.Float, DataType(ty).IsFloat())
	}
	for o := kspace.APIRedOp(0); o < kspace.NumAPIRedOps; o++ {
		wantOps = append(wantOps, kspace.APIRedOps[o].GoName)
		assert.Equal(t, kspace.APIRedOps[o].GoName, RedOp(o).String())
	}
	assert.Equal(t, wantTypes, consts["DataType"])
	assert.Equal(t, append(wantOps, "NumRedOps"), consts["RedOp"])
	assert.Equal(t, wantAliases, aliases)
	assert.Equal(t, int(kspace.NumTypes), int(numDataTypes))
	assert.Equal(t, int(kspace.NumAPIRedOps), int(NumRedOps))
	assert.Equal(t, "Int8 .. Float8e5m2 (0..11)", validDataTypes())
	assert.Equal(t, "Sum, Prod, Max, Min, Avg", builtinRedOps())
}

func TestScalarBits(t *testing.T) {
	cases := []struct {
		v    float64
		t    DataType
		want uint64
	}{
		{1, Float16, 0x3c00}, {0.25, Float16, 0x3400}, {-2, Float16, 0xc000}, {65504, Float16, 0x7bff},
		{1e6, Float16, 0x7c00}, {math.Ldexp(1, -24), Float16, 0x0001}, {1.0 / 3, Float16, 0x3555},
		{0.5, Float16, 0x3800}, {0, Float16, 0}, {math.Ldexp(1, -14), Float16, 0x0400},
		{1, Bfloat16, 0x3f80}, {1.0 / 3, Bfloat16, 0x3eab}, {-1, Bfloat16, 0xbf80},
		{1, Float8e4m3, 0x38}, {448, Float8e4m3, 0x7e}, {1000, Float8e4m3, 0x7e}, {0.5, Float8e4m3, 0x30},
		{math.Ldexp(1, -9), Float8e4m3, 0x01}, {-1, Float8e4m3, 0xb8},
		{1, Float8e5m2, 0x3c}, {57344, Float8e5m2, 0x7b}, {1e6, Float8e5m2, 0x7b}, {-1e6, Float16, 0xfc00}, {math.Inf(1), Float8e4m3, 0x7e}, {0.25, Float8e5m2, 0x34},
		{0.125, Float32, uint64(math.Float32bits(0.125))}, {0.1, Float64, math.Float64bits(0.1)},
		{3, Int32, 3}, {-1, Int8, 0xff}, {7, Uint64, 7},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, scalarBits(c.v, c.t), "%v as %s", c.v, c.t)
	}
}

func TestDataTypes(t *testing.T) {
	assert.Equal(t, 4, Float32.Size())
	assert.Equal(t, 2, Bfloat16.Size())
	assert.Equal(t, 1, Float8e5m2.Size())
	assert.Equal(t, 0, DataType(12).Size())
	assert.Equal(t, "Float32", Float.String())
	assert.Equal(t, 11, int(Float8e5m2))
	assert.Equal(t, 4, int(Avg))
	assert.Equal(t, "PreMulSum#0", NumRedOps.String())
}
