package ncclgo

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/printer"
	"go/token"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// parsePackage parses the package's non-test files, with comments.
func parsePackage(t *testing.T) (*token.FileSet, []*ast.File) {
	t.Helper()
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return fset, files
}

// TestExportedDocs: every exported identifier of the package — functions,
// methods of exported types, types, constants, variables and the fields of
// exported structs — carries a doc comment (a field may have a line
// comment instead).
func TestExportedDocs(t *testing.T) {
	fset, files := parsePackage(t)
	missing := func(pos token.Pos, what string) { t.Errorf("%s: %s has no doc comment", fset.Position(pos), what) }
	for _, f := range files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() || d.Doc != nil {
					continue
				}
				if d.Recv != nil {
					typ := d.Recv.List[0].Type
					if s, ok := typ.(*ast.StarExpr); ok {
						typ = s.X
					}
					if ix, ok := typ.(*ast.IndexExpr); ok {
						typ = ix.X
					}
					if id, ok := typ.(*ast.Ident); !ok || !id.IsExported() {
						continue
					}
				}
				missing(d.Pos(), "func "+d.Name.Name)
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if !s.Name.IsExported() {
							continue
						}
						if s.Doc == nil && d.Doc == nil {
							missing(s.Pos(), "type "+s.Name.Name)
						}
						st, ok := s.Type.(*ast.StructType)
						if !ok {
							continue
						}
						for _, fl := range st.Fields.List {
							for _, n := range fl.Names {
								if n.IsExported() && fl.Doc == nil && fl.Comment == nil {
									missing(n.Pos(), "field "+s.Name.Name+"."+n.Name)
								}
							}
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() && s.Doc == nil && s.Comment == nil && d.Doc == nil {
								missing(n.Pos(), n.Name)
							}
						}
					}
				}
			}
		}
	}
}

// TestPublicAPIHidesMachinery: no exported declaration of the package, nor
// its doc, names the machinery's packages (the engine, runtime/comm, and
// everything under it: bootstrap, enqueue, graph, transport, tune,
// residency, kernels, ...; only cuda and config, whose types the API
// takes, are named): users see ncclgo's own names (InitRank's doc named
// transport.ErrNoTransport, Root.Wait's bootstrap.ErrTimeout).
func TestPublicAPIHidesMachinery(t *testing.T) {
	// A package's name followed by one of its exported names.
	machinery := regexp.MustCompile(`\b(comm|bootstrap|enqueue|graph|transport|ipc|tune|kspace|kset|residency|kernels|topo|proxy|diag|generated)\.[A-Z]`)
	fset, files := parsePackage(t)
	p, err := doc.NewFromFiles(fset, files, "github.com/ncclgo/ncclgo")
	if err != nil {
		t.Fatal(err)
	}
	check := func(name, text string, decl ast.Node) {
		var b strings.Builder
		if decl != nil {
			if err := printer.Fprint(&b, fset, decl); err != nil {
				t.Fatal(err)
			}
		}
		for _, s := range []string{text, b.String()} {
			if m := machinery.FindString(s); m != "" {
				t.Errorf("%s mentions %s", name, m)
			}
		}
	}
	values := func(vs []*doc.Value) {
		for _, v := range vs {
			check(strings.Join(v.Names, ", "), v.Doc, nil)
			for _, s := range v.Decl.Specs {
				// The type, not the value (ErrNoTransport is transport's).
				if vs := s.(*ast.ValueSpec); vs.Type != nil {
					check(strings.Join(v.Names, ", "), vs.Doc.Text(), vs.Type)
				} else {
					check(strings.Join(v.Names, ", "), vs.Doc.Text(), nil)
				}
			}
		}
	}
	funcs := func(fs []*doc.Func) {
		for _, f := range fs {
			check(f.Name, f.Doc, f.Decl.Type)
		}
	}
	check("the package doc", p.Doc, nil)
	values(p.Consts)
	values(p.Vars)
	funcs(p.Funcs)
	for _, ty := range p.Types {
		check(ty.Name, ty.Doc, ty.Decl)
		values(ty.Consts)
		values(ty.Vars)
		funcs(ty.Funcs)
		funcs(ty.Methods)
	}
}
