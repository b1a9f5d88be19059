package main

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo"
)

// lastError reads ncclGetLastError's buffer.
func lastError() string {
	b := unsafe.Slice((*byte)(unsafe.Pointer(lastErrBuf)), lastErrSize)
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// TestEveryExportGuarded: every exported function defers guard (or
// guardString) first, naming itself, so that no panic reaches the host.
func TestEveryExportGuarded(t *testing.T) {
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	fset := token.NewFileSet()
	n := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		require.NoError(t, err)
		f, err := parser.ParseFile(fset, name, src, parser.ParseComments)
		require.NoError(t, err)
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Doc == nil || !hasExport(fd.Doc, fd.Name.Name) {
				continue
			}
			n++
			pos := fset.Position(fd.Pos())
			require.NotEmpty(t, fd.Body.List, "%s: %s has an empty body", pos, fd.Name.Name)
			ds, ok := fd.Body.List[0].(*ast.DeferStmt)
			if !assert.True(t, ok, "%s: %s does not start with defer guard(...)", pos, fd.Name.Name) {
				continue
			}
			fn, _ := ds.Call.Fun.(*ast.Ident)
			switch {
			case fn != nil && fn.Name == "guard":
				lit, _ := ds.Call.Args[0].(*ast.BasicLit)
				require.NotNil(t, lit, "%s: guard's op is not a literal", pos)
				op, _ := strconv.Unquote(lit.Value)
				assert.Equal(t, strings.TrimPrefix(fd.Name.Name, "nccl"), op, "%s: guard names another function", pos)
			case fn != nil && fn.Name == "guardString":
			default:
				t.Errorf("%s: %s defers something other than guard first", pos, fd.Name.Name)
			}
		}
	}
	assert.GreaterOrEqual(t, n, len(importedByClients), "found fewer exports than clients import")
}

func hasExport(doc *ast.CommentGroup, name string) bool {
	for _, c := range doc.List {
		if c.Text == "//export "+name {
			return true
		}
	}
	return false
}

// TestGuard: a panic under an entry point is ncclInternalError, and the
// last error names the call, the panic and where it happened.
func TestGuard(t *testing.T) {
	var m map[string]int
	boom := func() (res result) {
		defer guard("Boom", &res)
		m["x"] = 1 // assignment to a nil map
		return cSuccess
	}
	assert.EqualValues(t, cInternalError, boom())
	msg := lastError()
	assert.Contains(t, msg, "ncclBoom: ")
	assert.Contains(t, msg, "panic: assignment to entry in nil map")
	assert.Contains(t, msg, "TestGuard")
	assert.Contains(t, msg, "guard_test.go")

	gc, err := recovered(func() (*ncclgo.Comm, error) { panic("init went wrong") })
	assert.Nil(t, gc)
	assert.ErrorIs(t, err, errPanic)
	assert.Contains(t, err.Error(), "init went wrong")
	assert.EqualValues(t, cInternalError, resultOf(err))
}
