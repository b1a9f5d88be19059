// Package enumswitch defines an analysis pass that reports a switch
// statement over a vocabulary enum (kspace.Coll, kspace.Type,
// ncclgo.DataType, ...) that leaves some of the enum's values out and has
// no default clause. Such a switch silently does nothing for a value added
// to the vocabulary later; naming every value, or saying in a default what
// happens to the others, keeps the vocabulary's "one row per value" promise.
//
// An enum is a defined integer type, declared in one of the packages that
// the -pkgs flag lists, that has at least two exported constants of its own
// type in that package. Its values are those constants, except the counts
// named Num* (NumColls): constants of equal value are one value, so a case
// naming an alias (ncclgo.Int for ncclgo.Int32) covers it. A switch whose
// case list holds a non-constant expression is not checked: which values
// it covers is not known before run time.
package enumswitch

import (
	"fmt"
	"go/ast"
	"go/constant"
	"go/token"
	"go/types"
	"sort"
	"strings"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/passes/inspect"
	"golang.org/x/tools/go/ast/inspector"
)

// DefaultPkgs are the packages that declare ncclgo's vocabulary enums.
const DefaultPkgs = "github.com/ncclgo/ncclgo/kspace,github.com/ncclgo/ncclgo"

// Analyzer reports switches over a vocabulary enum that miss a value and
// have no default.
var Analyzer = &analysis.Analyzer{
	Name:     "enumswitch",
	Doc:      "report switches over a vocabulary enum that miss a value and have no default",
	URL:      "https://pkg.go.dev/github.com/ncclgo/ncclgo/internal/analysis/enumswitch",
	Requires: []*analysis.Analyzer{inspect.Analyzer},
	Run:      run,
}

// pkgs is the -pkgs flag: comma-separated import paths.
var pkgs = DefaultPkgs

func init() {
	Analyzer.Flags.StringVar(&pkgs, "pkgs", DefaultPkgs,
		"comma-separated import paths of the packages whose enums are checked")
}

func run(pass *analysis.Pass) (any, error) {
	enumPkgs := map[string]bool{}
	for _, p := range strings.Split(pkgs, ",") {
		if p = strings.TrimSpace(p); p != "" {
			enumPkgs[p] = true
		}
	}
	ins := pass.ResultOf[inspect.Analyzer].(*inspector.Inspector)
	ins.Preorder([]ast.Node{(*ast.SwitchStmt)(nil)}, func(n ast.Node) {
		sw := n.(*ast.SwitchStmt)
		if sw.Tag == nil {
			return
		}
		named, ok := types.Unalias(pass.TypesInfo.TypeOf(sw.Tag)).(*types.Named)
		if !ok || named.Obj().Pkg() == nil || !enumPkgs[named.Obj().Pkg().Path()] {
			return
		}
		members := enumMembers(named)
		if len(members) < 2 {
			return
		}
		covered := map[string]bool{} // by constant.Value.ExactString
		for _, s := range sw.Body.List {
			cc := s.(*ast.CaseClause)
			if cc.List == nil {
				return // default
			}
			for _, e := range cc.List {
				tv, ok := pass.TypesInfo.Types[e]
				if !ok || tv.Value == nil {
					return // not constant: not checked
				}
				covered[tv.Value.ExactString()] = true
			}
		}
		var missing []string
		for _, m := range members {
			if !covered[m.value] {
				missing = append(missing, m.name)
			}
		}
		if len(missing) == 0 {
			return
		}
		pass.Report(analysis.Diagnostic{
			Pos: sw.Pos(),
			End: sw.Body.Lbrace,
			Message: fmt.Sprintf("switch on %s misses %s and has no default: add the cases, or a default that says what the others do",
				typeName(pass, named), strings.Join(missing, ", ")),
		})
	})
	return nil, nil
}

// member is one value of an enum, named by the first declared constant
// that has it (ncclgo.Int8, not its alias Char).
type member struct {
	name  string
	value string // constant.Value.ExactString
	v     constant.Value
	pos   token.Pos
}

// enumMembers lists the values of named, in value order; none when named
// is not an integer type.
func enumMembers(named *types.Named) []member {
	b, ok := named.Underlying().(*types.Basic)
	if !ok || b.Info()&types.IsInteger == 0 {
		return nil
	}
	scope := named.Obj().Pkg().Scope()
	byValue := map[string]member{}
	for _, name := range scope.Names() {
		c, ok := scope.Lookup(name).(*types.Const)
		if !ok || !c.Exported() || strings.HasPrefix(name, "Num") || !types.Identical(c.Type(), named) {
			continue
		}
		k := c.Val().ExactString()
		if m, dup := byValue[k]; !dup || c.Pos() < m.pos {
			byValue[k] = member{name: name, value: k, v: c.Val(), pos: c.Pos()}
		}
	}
	out := make([]member, 0, len(byValue))
	for _, m := range byValue {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return constant.Compare(out[i].v, token.LSS, out[j].v) })
	return out
}

// typeName is named as the pass's package would write it ("kspace.Coll",
// or "Coll" inside kspace).
func typeName(pass *analysis.Pass, named *types.Named) string {
	return types.TypeString(named, func(p *types.Package) string {
		if p == pass.Pkg {
			return ""
		}
		return p.Name()
	})
}
