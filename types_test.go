package ncclgo

import (
	"go/ast"
	"go/parser"
	"go/token"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/kspace"
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
