package main

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo"
	"github.com/ncclgo/ncclgo/gen"
	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/runtime/bootstrap"
	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// importedByClients are the symbols PyTorch 2.11 and nccl-tests 2.19 import
// from libnccl.so.2.
var importedByClients = strings.Fields(`ncclAllGather ncclAllReduce ncclAlltoAll ncclBcast ncclBroadcast
	ncclCommAbort ncclCommCount ncclCommCuDevice ncclCommDeregister ncclCommDestroy ncclCommFinalize
	ncclCommGetAsyncError ncclCommInitAll ncclCommInitRank ncclCommInitRankConfig ncclCommInitRankScalable
	ncclCommRegister ncclCommShrink ncclCommSplit ncclCommUserRank ncclCommWindowDeregister
	ncclCommWindowRegister ncclDevCommCreate ncclDevCommDestroy ncclGather ncclGetErrorString
	ncclGetLastError ncclGetUniqueId ncclGetVersion ncclGroupEnd ncclGroupSimulateEnd ncclGroupStart
	ncclMemAlloc ncclMemFree ncclRecv ncclRedOpCreatePreMulSum ncclRedOpDestroy ncclReduce
	ncclReduceScatter ncclScatter ncclSend`)

// ncclDeviceAPI are the exports of NCCL's device-API header (not nccl.h)
// that clients import.
var ncclDeviceAPI = []string{"ncclDevCommCreate", "ncclDevCommDestroy"}

// buildLibrary builds libnccl.so.2 as `make libnccl` does, into dir.
func buildLibrary(t *testing.T, dir string) string {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("no gcc on PATH: building the c-shared library and the C test needs a C compiler")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go on PATH (a test binary carried to the GPU machine): building the c-shared library needs the Go toolchain; bundle/lib holds the one `make bundle` built")
	}
	so := filepath.Join(dir, "libnccl.so.2")
	script, err := filepath.Abs("libnccl.map")
	require.NoError(t, err)
	cmd := exec.Command("go", "build", "-buildmode=c-shared",
		"-ldflags=-extldflags '-Wl,-soname,libnccl.so.2 -Wl,-z,nodelete -Wl,--version-script="+script+"'", "-o", so, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build -buildmode=c-shared:\n%s", out)
	require.NoError(t, os.Symlink("libnccl.so.2", filepath.Join(dir, "libnccl.so")))
	return so
}

// TestCLibrary builds libnccl.so.2, checks its soname and exports, then
// compiles test/capi_test.c against the generated nccl.h and runs it:
// every entry point with bad arguments, and an init without a driver (or,
// with one, a one-rank all-reduce).
func TestCLibrary(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: building the c-shared library takes half a minute")
	}
	dir := t.TempDir()
	so := buildLibrary(t, dir)

	f, err := elf.Open(so)
	require.NoError(t, err)
	defer f.Close()
	sonames, err := f.DynString(elf.DT_SONAME)
	require.NoError(t, err)
	assert.Equal(t, []string{"libnccl.so.2"}, sonames)
	syms, err := f.DynamicSymbols()
	require.NoError(t, err)
	exported := map[string]bool{}
	for _, s := range syms {
		if s.Section != elf.SHN_UNDEF {
			exported[s.Name] = true
		} else if strings.HasPrefix(s.Name, "nvml") {
			t.Errorf("libnccl.so.2 needs %s: clients would fail to link (NVML must be loaded with dlopen)", s.Name)
		}
	}
	for _, name := range importedByClients {
		assert.True(t, exported[name], "libnccl.so.2 does not export %s", name)
	}
	api := map[string]bool{}
	for _, name := range ncclDeviceAPI {
		api[name] = true
	}
	for _, fn := range gen.NCCLFuncs {
		api["nccl"+fn.Name], api["pnccl"+fn.Name] = true, true
		assert.True(t, exported["nccl"+fn.Name], "nccl.h declares nccl%s, the library lacks it", fn.Name)
		assert.True(t, exported["pnccl"+fn.Name], "nccl.h declares pnccl%s, the library lacks it", fn.Name)
	}
	// Nothing else: the Go runtime's and cgo's symbols stay local (libnccl.map).
	var extra []string
	for name := range exported {
		if !api[name] {
			extra = append(extra, name)
		}
	}
	assert.Empty(t, extra, "libnccl.so.2 exports symbols that are not NCCL's API")

	exe := filepath.Join(dir, "capi_test")
	out, err := exec.Command("gcc", "-std=c99", "-Wall", "-Werror", "-I", filepath.Join("..", "generated", "include"),
		"-o", exe, filepath.Join("test", "capi_test.c"), "-L", dir, "-lnccl", "-ldl", "-pthread", "-Wl,-rpath,"+dir).CombinedOutput()
	require.NoError(t, err, "compiling test/capi_test.c:\n%s", out)
	mode := "gpu"
	if err := cuda.Init(); err != nil {
		mode = "nodriver"
		t.Logf("no usable CUDA driver (%v): checking that inits fail cleanly", err)
	}
	out, err = exec.Command(exe, mode).CombinedOutput()
	t.Logf("%s", out)
	require.NoError(t, err, "capi_test %s failed", mode)
	assert.Contains(t, string(out), "all checks passed")
}

// TestHeaderValues ties the generated nccl.h to the Go API's values.
func TestHeaderValues(t *testing.T) {
	assert.EqualValues(t, ncclgo.Sum, cSum)
	assert.EqualValues(t, ncclgo.Prod, cProd)
	assert.EqualValues(t, ncclgo.Max, cMax)
	assert.EqualValues(t, ncclgo.Min, cMin)
	assert.EqualValues(t, ncclgo.Avg, cAvg)
	assert.EqualValues(t, ncclgo.NumRedOps, cNumOps)
	assert.EqualValues(t, ncclgo.Float32, cFloat32)
	assert.EqualValues(t, ncclgo.Bfloat16, cBfloat16)
	assert.EqualValues(t, ncclgo.Float8e5m2+1, cNumTypes)
	assert.EqualValues(t, bootstrap.UniqueIDBytes, cUniqueIDBytes)
	assert.EqualValues(t, gen.NCCLVersionCode, cVersionCode)
	assert.EqualValues(t, generated.NCCLVersionCode, cVersionCode, "capi was compiled against a stale nccl.h")
}

func TestResultOf(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{nil, cSuccess},
		{&ncclgo.ArgError{Arg: "count"}, cInvalidArgument},
		{fmt.Errorf("x: %w", bootstrap.ErrInvalidID), cInvalidArgument},
		{fmt.Errorf("x: %w", ncclgo.ErrDestroyed), cInvalidUsage},
		{fmt.Errorf("x: %w", errNotImplemented), cInvalidUsage},
		{fmt.Errorf("x: %w", cuda.ErrNoDriver), cUnhandledCudaError},
		{fmt.Errorf("x: %w", cuda.ErrOutOfMemory), cUnhandledCudaError},
		{fmt.Errorf("x: %w", bootstrap.ErrTimeout), cRemoteError},
		{fmt.Errorf("x: %w: %w", ncclgo.ErrPeerFailed, &os.SyscallError{Syscall: "recv", Err: os.ErrClosed}), cRemoteError},
		{&os.SyscallError{Syscall: "connect", Err: os.ErrPermission}, cSystemError},
		{errors.New("surprise"), cInternalError},
	} {
		assert.EqualValues(t, tc.want, resultOf(tc.err), "%v", tc.err)
	}
}

func TestHostScalar(t *testing.T) {
	for _, tc := range []struct {
		bits []byte
		t    ncclgo.DataType
		want float64
	}{
		{[]byte{0xfe}, ncclgo.Int8, -2},
		{[]byte{0xfe}, ncclgo.Uint8, 254},
		{[]byte{0x00, 0x3c}, ncclgo.Float16, 1},
		{[]byte{0x00, 0xc0}, ncclgo.Float16, -2},
		{[]byte{0x01, 0x00}, ncclgo.Float16, math.Ldexp(1, -24)},
		{[]byte{0x80, 0x3f}, ncclgo.Bfloat16, 1},
		{[]byte{0x38}, ncclgo.Float8e4m3, 1},
		{[]byte{0x7e}, ncclgo.Float8e4m3, 448},
		{[]byte{0x3c}, ncclgo.Float8e5m2, 1},
		{[]byte{0x00, 0x00, 0x00, 0x3f}, ncclgo.Float32, 0.5},
		{[]byte{0, 0, 0, 0, 0, 0, 0xf0, 0x3f}, ncclgo.Float64, 1},
		{[]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, ncclgo.Int64, -1},
	} {
		assert.Equal(t, tc.want, hostScalar(unsafe.Pointer(&tc.bits[0]), tc.t), "%s % x", tc.t, tc.bits)
	}
	assert.True(t, math.IsNaN(hostScalar(unsafe.Pointer(&[]byte{0x7f}[0]), ncclgo.Float8e4m3)))
	assert.True(t, math.IsInf(hostScalar(unsafe.Pointer(&[]byte{0x00, 0x7c}[0]), ncclgo.Float16), 1))
}

func TestImageBeside(t *testing.T) {
	dir := t.TempDir()
	lib := filepath.Join(dir, "libnccl.so.2")
	require.NoError(t, os.WriteFile(lib, nil, 0o644))
	assert.Empty(t, imageBeside(lib), "no ncclgo.fatbin beside the library yet")
	assert.Empty(t, imageBeside(""))
	img := filepath.Join(dir, imageName)
	require.NoError(t, os.WriteFile(img, []byte("x"), 0o644))
	assert.Equal(t, img, imageBeside(lib))
	// Through a link in another directory: the real file's directory counts.
	other := t.TempDir()
	link := filepath.Join(other, "libnccl.so")
	require.NoError(t, os.Symlink(lib, link))
	assert.Equal(t, img, imageBeside(link))
}

// TestThreadGroups: ncclGroupStart/End nest per OS thread.
func TestThreadGroups(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	assert.EqualValues(t, cInvalidUsage, ncclGroupEnd())
	assert.EqualValues(t, cSuccess, ncclGroupStart())
	assert.EqualValues(t, cSuccess, ncclGroupStart())
	other := make(chan result)
	go func() {
		runtime.LockOSThread() // another thread: no group open there
		defer runtime.UnlockOSThread()
		other <- ncclGroupEnd()
	}()
	assert.EqualValues(t, cInvalidUsage, <-other)
	assert.EqualValues(t, cSuccess, ncclGroupEnd())
	assert.NotNil(t, threadGroup(false), "the outer group is still open")
	assert.EqualValues(t, cSuccess, ncclGroupEnd())
	assert.Nil(t, threadGroup(false))
}

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
	fset, fds := exports(t)
	for _, fd := range fds {
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
			assert.Equal(t, apiName(fd.Name.Name), op, "%s: guard names another function", pos)
		case fn != nil && fn.Name == "guardString":
		default:
			t.Errorf("%s: %s defers something other than guard first", pos, fd.Name.Name)
		}
	}
	assert.GreaterOrEqual(t, len(fds), len(importedByClients), "found fewer exports than clients import")
}

// exports parses the package's non-test files and returns its exported
// functions (those with an //export comment), and the file set that
// places them.
func exports(t *testing.T) (*token.FileSet, []*ast.FuncDecl) {
	t.Helper()
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	fset := token.NewFileSet()
	var fds []*ast.FuncDecl
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		require.NoError(t, err)
		f, err := parser.ParseFile(fset, name, src, parser.ParseComments)
		require.NoError(t, err)
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Doc != nil && hasExport(fd.Doc, fd.Name.Name) {
				fds = append(fds, fd)
			}
		}
	}
	return fset, fds
}

// apiName is the name, less its nccl prefix, of the C API function whose
// Go side is the export name: nccl<Name>, or capi<Name> behind scope.c.
func apiName(name string) string {
	if s, ok := strings.CutPrefix(name, "capi"); ok {
		return s
	}
	return strings.TrimPrefix(name, "nccl")
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
	assert.Contains(t, msg, "capi_test.go")

	// A wild caller pointer (faulting in this package, where the caller's
	// pointers are dereferenced) is a bad argument, not a bug in ncclgo.
	wild := func() (res result) {
		defer guard("Wild", &res)
		var p *[1 << 10]int32 // as a caller's (int*)0x14
		p[5] = 1
		return cSuccess
	}
	assert.EqualValues(t, cInvalidArgument, wild())
	msg = lastError()
	assert.Contains(t, msg, "ncclWild: ")
	assert.Contains(t, msg, "pointer argument is not valid memory")
	assert.NotContains(t, msg, "a bug in ncclgo")

	gc, err := recovered(func() (*ncclgo.Comm, error) { panic("init went wrong") })
	assert.Nil(t, gc)
	assert.ErrorIs(t, err, errPanic)
	assert.Contains(t, err.Error(), "init went wrong")
	assert.EqualValues(t, cInternalError, resultOf(err))
}
