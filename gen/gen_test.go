package gen

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/gen/abi"
	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/kspace"
)

// TestGeneratedUpToDate fails, naming each file, when the committed
// generated/ tree differs from what the generator emits now.
func TestGeneratedUpToDate(t *testing.T) {
	files, err := Generate(Options{})
	require.NoError(t, err)
	dir := filepath.Join("..", "generated")
	var problems []string
	for p, want := range files {
		got, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(p)))
		switch {
		case err != nil:
			problems = append(problems, "generated/"+p+": missing")
		case !bytes.Equal(got, want):
			problems = append(problems, "generated/"+p+": differs from the generator's output (edited by hand, or the generator changed)")
		}
	}
	_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		rel = filepath.ToSlash(rel)
		if _, ok := files[rel]; !ok && !strings.HasSuffix(rel, "_test.go") {
			problems = append(problems, "generated/"+rel+": not produced by the generator")
		}
		return nil
	})
	sort.Strings(problems)
	if len(problems) > 0 {
		t.Fatalf("generated/ is out of date; run `go generate ./...` and commit:\n  %s", strings.Join(problems, "\n  "))
	}
}

func TestDeterministic(t *testing.T) {
	a, err := Generate(Options{Filter: kspace.MustParseFilter("AllReduce * * * *|SendRecv")})
	require.NoError(t, err)
	b, err := Generate(Options{Filter: kspace.MustParseFilter("AllReduce * * * *|SendRecv")})
	require.NoError(t, err)
	require.Equal(t, len(a), len(b))
	for p := range a {
		assert.True(t, bytes.Equal(a[p], b[p]), p)
	}
}

func TestHeaders(t *testing.T) {
	files, err := Generate(Options{Filter: kspace.MustParseFilter("SendRecv")})
	require.NoError(t, err)
	for p, b := range files {
		if strings.HasSuffix(p, ".json") {
			continue
		}
		assert.Contains(t, string(b[:200]), Header, p)
	}
}

func TestSlimBuild(t *testing.T) {
	files, err := Generate(Options{Filter: kspace.MustParseFilter("AllReduce Sum f32 RING LL128")})
	require.NoError(t, err)
	var units []string
	for p := range files {
		if strings.HasPrefix(p, "cuda/") {
			units = append(units, p)
		}
	}
	sort.Strings(units)
	assert.Equal(t, []string{"cuda/all_reduce_sum_f32.cu", "cuda/device_table.cu"}, units)
	table := string(files["cuda/device_table.cu"])
	assert.Contains(t, table, "NG_DEV_FUNC_NOP(Nop)")
	assert.Contains(t, table, "NG_DEV_KERNEL_GENERIC(Generic)")
	assert.NotContains(t, string(files["cuda/all_reduce_sum_f32.cu"]), "NG_DEV_KERNEL(")
}

func TestBadInput(t *testing.T) {
	_, err := Generate(Options{Arches: []string{"sm_91"}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"sm_91"`)
	assert.Contains(t, err.Error(), "sm_90")
	_, err = Generate(Options{Filter: kspace.MustParseFilter("AllReduce Sum f32 NOPE *")})
	require.ErrorIs(t, err, kspace.ErrEmptyFilter)
}

// TestGoABILayout checks the emitted Go structs against the declaration.
func TestGoABILayout(t *testing.T) {
	types := map[string]reflect.Type{
		"ConnInfo":    reflect.TypeOf(generated.ConnInfo{}),
		"DevPeer":     reflect.TypeOf(generated.DevPeer{}),
		"DevRing":     reflect.TypeOf(generated.DevRing{}),
		"DevTree":     reflect.TypeOf(generated.DevTree{}),
		"DevChannel":  reflect.TypeOf(generated.DevChannel{}),
		"DevComm":     reflect.TypeOf(generated.DevComm{}),
		"DirectSlot":  reflect.TypeOf(generated.DirectSlot{}),
		"DevWork":     reflect.TypeOf(generated.DevWork{}),
		"LaunchParts": reflect.TypeOf(generated.LaunchParts{}),
		"KernelArgs":  reflect.TypeOf(generated.KernelArgs{}),
	}
	require.Len(t, types, len(abi.Structs))
	for _, st := range abi.Structs {
		name := abi.GoName(st.Name)
		typ, ok := types[name]
		require.True(t, ok, name)
		l := st.Layout()
		assert.Equal(t, uintptr(st.Size), typ.Size(), "sizeof %s", name)
		require.Equal(t, len(st.Fields), typ.NumField(), name)
		for i, f := range st.Fields {
			assert.Equal(t, abi.GoName(f.Name), typ.Field(i).Name)
			assert.Equal(t, uintptr(l.Offsets[i]), typ.Field(i).Offset, "%s.%s", name, f.Name)
		}
		decl := generated.Layouts[name]
		assert.Equal(t, l.Size, decl.Size)
		assert.Equal(t, l.Offsets, decl.Offsets)
	}
}

// TestCABILayout compiles the C header with the host C++ compiler, so its
// static_asserts on every offset and size run.
func TestCABILayout(t *testing.T) {
	cxx, err := exec.LookPath("g++")
	if err != nil {
		t.Skipf("no host C++ compiler (g++) on PATH: %v", err)
	}
	src := "#include \"ngabi.h\"\nint main() { return sizeof(struct ngKernelArgs) == 4096 ? 0 : 1; }\n"
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "check.cc"), []byte(src), 0o644))
	out, err := exec.Command(cxx, "-std=c++17", "-Wall", "-Werror", "-I", filepath.Join("..", "generated", "include"),
		"-o", filepath.Join(dir, "check"), filepath.Join(dir, "check.cc")).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.NoError(t, exec.Command(filepath.Join(dir, "check")).Run())

	// A wrong offset must fail the compile: corrupt one assert and expect an error.
	h, err := os.ReadFile(filepath.Join("..", "generated", "include", "ngabi.h"))
	require.NoError(t, err)
	bad := bytes.Replace(h, []byte("offsetof(struct ngDevWork, funcId) == 48"), []byte("offsetof(struct ngDevWork, funcId) == 50"), 1)
	require.NotEqual(t, h, bad)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "ngabi.h"), bad, 0o644))
	out, err = exec.Command(cxx, "-std=c++17", "-fsyntax-only", "-I", dir, filepath.Join(dir, "check.cc")).CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "ngDevWork.funcId")
}

func BenchmarkGenerateFull(b *testing.B) {
	for b.Loop() {
		if _, err := Generate(Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestKernelInlineSiblings: a RING LL kernel names the table ids of the
// siblings it runs inline: its SIMPLE sibling and, for AllReduce, the
// DIRECT function of every op of its type (no PreMulSum: DIRECT has none),
// none that the filter leaves out; TREE kernels and fp8 kernels none.
func TestKernelInlineSiblings(t *testing.T) {
	filter := kspace.MustParseFilter("AllReduce * f32 * *")
	s, err := kspace.NewSpace(filter)
	require.NoError(t, err)
	fn := func(op kspace.RedOp, a kspace.Algo, p kspace.Proto) int {
		id := s.FuncID(kspace.Func{Coll: kspace.AllReduce, RedOp: op, Type: kspace.F32, Algo: a, Proto: p})
		require.GreaterOrEqual(t, id, 0, "%s %s %s", op, a, p)
		return id
	}
	files, err := Generate(Options{Filter: filter})
	require.NoError(t, err)
	unit := string(files["cuda/all_reduce_sum_f32.cu"])
	assert.Contains(t, unit, fmt.Sprintf(`NG_DEV_KERNEL(AllReduce_Sum_f32_RING_LL, AllReduce, Sum, float, RING, LL, %d,
  NG_INLINE_FUNC(%d, AllReduce, Sum, float, RING, SIMPLE),
  NG_INLINE_DIRECT_LL(%d, AllReduce, Sum, float),
  NG_INLINE_DIRECT_LL(%d, AllReduce, Prod, float),
  NG_INLINE_DIRECT_LL(%d, AllReduce, MinMax, float))
`, fn(kspace.Sum, kspace.Ring, kspace.LL), fn(kspace.Sum, kspace.Ring, kspace.Simple),
		fn(kspace.Sum, kspace.Direct, kspace.Simple), fn(kspace.Prod, kspace.Direct, kspace.Simple),
		fn(kspace.MinMax, kspace.Direct, kspace.Simple)))
	assert.Regexp(t, `NG_DEV_KERNEL\(AllReduce_Sum_f32_TREE_LL, [^\n]*, \d+\)\n`, unit)

	files, err = Generate(Options{Filter: kspace.MustParseFilter("AllReduce Sum f8e4m3 * *")})
	require.NoError(t, err)
	assert.NotContains(t, string(files["cuda/all_reduce_sum_f8e4m3.cu"]), "NG_INLINE", "fp8 keeps its siblings behind the table")

	files, err = Generate(Options{Filter: kspace.MustParseFilter("AllGather * *")})
	require.NoError(t, err)
	ag := string(files["cuda/all_gather.cu"])
	assert.Contains(t, ag, "NG_INLINE_FUNC(")
	assert.NotContains(t, ag, "NG_INLINE_DIRECT_LL", "only AllReduce's DIRECT has an LL one-shot")

	files, err = Generate(Options{Filter: kspace.MustParseFilter("AllReduce Sum f32 RING LL")})
	require.NoError(t, err)
	assert.Regexp(t, `NG_DEV_KERNEL\(AllReduce_Sum_f32_RING_LL, [^\n]*, \d+\)\n`, string(files["cuda/all_reduce_sum_f32.cu"]), "no sibling in the space")
}
