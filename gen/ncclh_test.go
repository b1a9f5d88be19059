package gen

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// ncclConfigLayout is NCCL 2.28's ncclConfig_t on LP64 (x86_64, aarch64):
// the reference that ncclgo's nccl.h must match, field by field, since
// clients compiled against NCCL's header pass it to ncclgo.
var ncclConfigLayout = []struct {
	field  string
	offset int
}{
	{"size", 0}, {"magic", 8}, {"version", 12}, {"blocking", 16}, {"cgaClusterSize", 20},
	{"minCTAs", 24}, {"maxCTAs", 28}, {"netName", 32}, {"splitShare", 40}, {"trafficClass", 44},
	{"commName", 48}, {"collnetEnable", 56}, {"CTAPolicy", 60}, {"shrinkShare", 64},
	{"nvlsCTAs", 68}, {"nChannelsPerNetPeer", 72}, {"nvlinkCentricSched", 76},
}

const ncclConfigSize = 80

// ncclEnumValues are nccl.h's (NCCL 2.28) enum values, the reference.
var ncclEnumValues = map[string]int{
	"ncclSuccess": 0, "ncclUnhandledCudaError": 1, "ncclSystemError": 2, "ncclInternalError": 3,
	"ncclInvalidArgument": 4, "ncclInvalidUsage": 5, "ncclRemoteError": 6, "ncclInProgress": 7, "ncclNumResults": 8,
	"ncclSum": 0, "ncclProd": 1, "ncclMax": 2, "ncclMin": 3, "ncclAvg": 4, "ncclNumOps": 5,
	"ncclInt8": 0, "ncclChar": 0, "ncclUint8": 1, "ncclInt32": 2, "ncclInt": 2, "ncclUint32": 3,
	"ncclInt64": 4, "ncclUint64": 5, "ncclFloat16": 6, "ncclHalf": 6, "ncclFloat32": 7, "ncclFloat": 7,
	"ncclFloat64": 8, "ncclDouble": 8, "ncclBfloat16": 9, "ncclFloat8e4m3": 10, "ncclFloat8e5m2": 11,
	"ncclNumTypes": 12, "ncclScalarDevice": 0, "ncclScalarHostImmediate": 1,
	"NCCL_UNIQUE_ID_BYTES": 128, "sizeof(ncclUniqueId)": 128, "sizeof(ncclSimInfo_t)": 24,
	"sizeof(ncclRedOp_t)": 4, "sizeof(ncclDataType_t)": 4, "sizeof(ncclResult_t)": 4,
}

// TestNCCLHeaderABI compiles a C program against the emitted nccl.h and
// checks ncclConfig_t's layout, NCCL_CONFIG_INITIALIZER and the enum values
// against NCCL 2.28's.
func TestNCCLHeaderABI(t *testing.T) {
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("no gcc on PATH: the C layout check of nccl.h needs a C compiler")
	}
	h, err := emitNCCLHeader()
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "nccl.h"), h, 0o644))
	var b strings.Builder
	b.WriteString("#include <stdio.h>\n#include <stddef.h>\n#include \"nccl.h\"\nint main(void) {\n")
	b.WriteString("  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;\n")
	for _, f := range ncclConfigLayout {
		fmt.Fprintf(&b, "  printf(\"offsetof(%[1]s) %%zu\\n\", offsetof(ncclConfig_t, %[1]s));\n", f.field)
	}
	b.WriteString("  printf(\"sizeof(ncclConfig_t) %zu\\n\", sizeof(ncclConfig_t));\n")
	b.WriteString("  printf(\"init %zu %x %u %d %d %d %d %p %p %d\\n\", c.size, c.magic, c.version, c.blocking == NCCL_CONFIG_UNDEF_INT, c.minCTAs == NCCL_CONFIG_UNDEF_INT, c.maxCTAs == INT_MIN, c.nvlinkCentricSched == INT_MIN, (void*)c.netName, (void*)c.commName, NCCL_VERSION_CODE);\n")
	for name := range ncclEnumValues {
		fmt.Fprintf(&b, "  printf(\"%s %%d\\n\", (int)(%s));\n", name, name)
	}
	b.WriteString("  return 0;\n}\n")
	src := filepath.Join(dir, "layout.c")
	require.NoError(t, os.WriteFile(src, []byte(b.String()), 0o644))
	exe := filepath.Join(dir, "layout")
	out, err := exec.Command(cc, "-std=c99", "-Wall", "-Werror", "-pedantic", "-o", exe, src).CombinedOutput()
	require.NoError(t, err, "compiling against nccl.h:\n%s", out)
	out, err = exec.Command(exe).CombinedOutput()
	require.NoError(t, err, "%s", out)
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		k, v, _ := strings.Cut(line, " ")
		got[k] = v
	}
	for _, f := range ncclConfigLayout {
		require.Equal(t, fmt.Sprint(f.offset), got["offsetof("+f.field+")"], "offsetof(ncclConfig_t, %s)", f.field)
	}
	require.Equal(t, fmt.Sprint(ncclConfigSize), got["sizeof(ncclConfig_t)"])
	require.Equal(t, fmt.Sprintf("%d cafebeef %d 1 1 1 1 (nil) (nil) %d", ncclConfigSize, NCCLVersionCode, NCCLVersionCode), got["init"])
	require.GreaterOrEqual(t, NCCLVersionCode, 22800, "the API level must be at least 2.28.0")
	for name, want := range ncclEnumValues {
		require.Equal(t, fmt.Sprint(want), got[name], name)
	}
}

// TestNCCLHeaderCXX compiles nccl.h as C++ (nccl-tests and PyTorch are
// C++), with the initializers and NCCL's version macro.
func TestNCCLHeaderCXX(t *testing.T) {
	cxx, err := exec.LookPath("g++")
	if err != nil {
		t.Skip("no g++ on PATH: the C++ check of nccl.h needs a C++ compiler")
	}
	h, err := emitNCCLHeader()
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "nccl.h"), h, 0o644))
	src := filepath.Join(dir, "use.cc")
	require.NoError(t, os.WriteFile(src, []byte(`#include "nccl.h"
ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
static_assert(sizeof(ncclConfig_t) == 80, "ncclConfig_t");
static_assert(NCCL_VERSION_CODE >= NCCL_VERSION(2,28,0), "API level");
ncclResult_t (*allReduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t) = ncclAllReduce;
`), 0o644))
	out, err := exec.Command(cxx, "-std=c++11", "-Wall", "-Werror", "-c", "-o", filepath.Join(dir, "use.o"), src).CombinedOutput()
	require.NoError(t, err, "compiling nccl.h as C++:\n%s", out)
}

// TestNCCLHeaderDeclaresEveryFunction checks that nccl.h declares each C
// API function and its pnccl alias exactly once.
func TestNCCLHeaderDeclaresEveryFunction(t *testing.T) {
	h, err := emitNCCLHeader()
	require.NoError(t, err)
	for _, f := range NCCLFuncs {
		for _, p := range []string{" nccl", " pnccl"} {
			require.Equal(t, 1, strings.Count(string(h), p+f.Name+"("), "declarations of %s%s", strings.TrimSpace(p), f.Name)
		}
	}
}

// TestNCCLHeaderVersionMatchesDeclarations: nccl.h claims no NCCL version
// older than the newest function it declares (2.28.3's nccl.h had no
// ncclCommRevoke), and every function ncclSince names is declared.
func TestNCCLHeaderVersionMatchesDeclarations(t *testing.T) {
	declared := map[string]bool{}
	for _, f := range NCCLFuncs {
		declared[f.Name] = true
	}
	for name, since := range ncclSince {
		require.True(t, declared[name], "ncclSince names nccl%s, which NCCLFuncs does not declare", name)
		require.GreaterOrEqual(t, NCCLVersionCode, since, "nccl.h declares nccl%s (NCCL %d) but claims %d", name, since, NCCLVersionCode)
	}
	h, err := emitNCCLHeader()
	require.NoError(t, err)
	require.Contains(t, string(h), fmt.Sprintf("#define NCCL_VERSION_CODE %d\n", NCCLVersionCode))
	require.Contains(t, string(h), fmt.Sprintf("#define NCCL_PATCH %d\n", NCCLPatch))
}
