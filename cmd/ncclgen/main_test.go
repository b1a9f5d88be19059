package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/gen"
	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/internal/cli"
	"github.com/ncclgo/ncclgo/kset"
)

// envMain makes the test binary run as ncclgen itself (main, with
// os.Args), so that tests see its real exit status and output streams.
const envMain = "NCCLGEN_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(envMain) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runMain runs ncclgen args as a process and returns its stdout, stderr
// and exit status.
func runMain(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), envMain+"=1")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("ncclgen %q: %v", args, err)
	}
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}

func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(args, &out, &errb)
	return out.String() + errb.String(), err
}

func TestListSummary(t *testing.T) {
	out, err := runCLI(t, "list", "--summary")
	require.NoError(t, err)
	assert.Equal(t, "rows=2365 valid=1005 functions=735 kernels=40\n", out)
}

func TestListSummaryDesignExamples(t *testing.T) {
	for only, want := range map[string]string{
		"SendRecv":                             "functions=2 kernels=2",
		"AllGather * *|Broadcast * *|SendRecv": "functions=13 kernels=4",
		"AllReduce Sum f32 * *":                "functions=12 kernels=3",
		"AllReduce MinMax i32 NVLS *":          "functions=2 kernels=1",
		"AllReduce Sum f32 RING LL128":         "functions=2 kernels=1",
	} {
		out, err := runCLI(t, "list", "--summary", "--only", only)
		require.NoError(t, err, only)
		assert.Equal(t, "rows=2365 valid=1005 "+want+"\n", out, only)
	}
}

func TestList(t *testing.T) {
	out, err := runCLI(t, "list", "--only", "AllReduce Sum f32 RING LL128")
	require.NoError(t, err)
	assert.Contains(t, out, "AllReduce Sum f32 RING LL128")
	assert.Contains(t, out, "ngDevKernel_Generic")
	assert.Contains(t, out, "Nop")
}

func TestExplain(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"AllReduce Sum bf16 RING LL128"}, []string{"row:", "function id:", "ngDevKernel_AllReduce_Sum_bf16_RING_LL", "all_reduce_sum_bf16.cu", "CUDA >= 11.0"}},
		{[]string{"AllReduce Sum i32 RING SIMPLE"}, []string{"by AllReduce Sum u32 RING SIMPLE (same code as its equivalence class)"}},
		{[]string{"AllReduce Prod f32 NVLS SIMPLE"}, []string{"valid:        no: NVLS does not support Prod on f32"}},
		{[]string{"--only", "SendRecv", "AllReduce Sum f32 RING LL"}, []string{`by Nop: the filter "SendRecv" leaves it out`}},
		// Siblings that the type's RING LL kernel runs inline.
		{[]string{"AllReduce Sum f32 RING SIMPLE"}, []string{"ngDevKernel_AllReduce_Sum_f32_RING_LL (inline from sm_90, through the device function table before)"}},
		{[]string{"AllReduce MinMax f32 DIRECT SIMPLE"}, []string{"(inline from sm_90 for the works that take DIRECT's LL one-shot, else through the device function table)"}},
		{[]string{"AllReduce Prod f32 RING LL"}, []string{"ngDevKernel_AllReduce_Sum_f32_RING_LL (through the device function table)"}},
	} {
		out, err := runCLI(t, append([]string{"explain"}, c.args...)...)
		require.NoError(t, err, "%q", c.args)
		for _, want := range c.want {
			assert.Contains(t, out, want, "%q", c.args)
		}
	}
}

func TestBadInput(t *testing.T) {
	_, err := runCLI(t, "list", "--only", "AllReduce (Sum")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "position 10")
	_, err = runCLI(t, "list", "--only", "Nothing At All")
	assert.ErrorContains(t, err, "selects no function")
	_, err = runCLI(t, "explain", "AllReduce Sum f32 RING LL9")
	assert.ErrorContains(t, err, "valid protocols are LL, LL128, SIMPLE")
	_, err = runCLI(t, "generate", "--out", t.TempDir(), "--arch", "sm_42")
	assert.ErrorContains(t, err, `bad target arch "sm_42"; valid: sm_70`)
	_, err = runCLI(t, "frobnicate")
	assert.ErrorContains(t, err, "valid commands are")
}

func TestGenerateSlim(t *testing.T) {
	dir := t.TempDir()
	_, err := runCLI(t, "generate", "--out", dir, "--only", "SendRecv")
	require.NoError(t, err)
	entries, err := os.ReadDir(filepath.Join(dir, "cuda"))
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	assert.Equal(t, "device_table.cu sendrecv.cu", strings.Join(names, " "))
	// A wider filter afterwards adds units; a narrower one removes stale ones.
	_, err = runCLI(t, "generate", "--out", dir, "--only", "SendRecv|AllGather * *")
	require.NoError(t, err)
	assert.FileExists(t, filepath.Join(dir, "cuda", "all_gather.cu"))
	_, err = runCLI(t, "generate", "--out", dir, "--only", "SendRecv")
	require.NoError(t, err)
	assert.NoFileExists(t, filepath.Join(dir, "cuda", "all_gather.cu"))
}

func TestFlagsAfterArguments(t *testing.T) {
	out, err := runCLI(t, "explain", "AllReduce Sum f32 RING LL", "--only", "SendRecv")
	require.NoError(t, err)
	assert.Contains(t, out, `by Nop: the filter "SendRecv" leaves it out`)
	out, err = runCLI(t, "explain", "AllReduce", "Sum", "f32", "RING", "LL", "--only=AllReduce Sum f32 * *")
	require.NoError(t, err)
	assert.Contains(t, out, "implemented:  by AllReduce Sum f32 RING LL\n")
	// Go-style single-dash long flags still work.
	out, err = runCLI(t, "list", "-summary", "-only", "SendRecv")
	require.NoError(t, err)
	assert.Equal(t, "rows=2365 valid=1005 functions=2 kernels=2\n", out)
}

func TestExtraArgumentsRejected(t *testing.T) {
	for _, args := range [][]string{
		{"list", "extra", "--summary"},
		{"list", "--only", "AllReduce", "Sum", "f32", "*", "*"},
		{"generate", "--out", t.TempDir(), "stray"},
		{"build", "stray"},
		{"inspect", "a", "b"},
	} {
		_, err := runCLI(t, args...)
		require.Error(t, err, "%q", args)
		assert.Contains(t, err.Error(), "argument", "%q", args)
	}
	_, err := runCLI(t, "explain")
	assert.ErrorContains(t, err, "explain: needs")
	_, err = runCLI(t, "list", "--bogus")
	assert.ErrorContains(t, err, "unknown flag: --bogus")
	out, err := runCLI(t, "build", "--help")
	require.NoError(t, err)
	assert.Contains(t, out, "--only")
}

func TestEmptyFilterSaysWhy(t *testing.T) {
	_, err := runCLI(t, "list", "--only", "AllReduce f32")
	assert.ErrorContains(t, err, `selects no function: AllReduce needs 5 fields ("AllReduce RedOp Type Algo Proto"), the pattern has 2`)
	_, err = runCLI(t, "list", "--only", "AllReduce Sum fp32 * *")
	assert.ErrorContains(t, err, `unknown type "fp32": valid types are i8, u8`)
	_, err = runCLI(t, "build", "--only", "AllReduce Sum fp32 * *", "--out", filepath.Join(t.TempDir(), "x"))
	assert.ErrorContains(t, err, `unknown type "fp32"`)
}

func TestFilterLengthCapped(t *testing.T) {
	start := time.Now()
	_, err := runCLI(t, "list", "--summary", "--only", strings.Repeat("*", 100<<10))
	assert.ErrorContains(t, err, "limited to 4096 bytes")
	assert.Less(t, time.Since(start), 2*time.Second)
}

func TestGenerateOnlySaysHowToRestore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "generated")
	out, err := runCLI(t, "generate", "--out", dir, "--only", "SendRecv")
	require.NoError(t, err)
	assert.Contains(t, out, "rewrote "+dir+"/")
	assert.Contains(t, out, "git checkout "+dir+"/")
	assert.Contains(t, out, "go generate ./...")
	assert.Contains(t, out, "ncclgen build --only")
	out, err = runCLI(t, "generate", "--out", dir)
	require.NoError(t, err)
	assert.Empty(t, out)
	// A tree that is slim on purpose, elsewhere, gets no note.
	out, err = runCLI(t, "generate", "--out", t.TempDir(), "--only", "SendRecv")
	require.NoError(t, err)
	assert.Empty(t, out)
}

// noNVCC hides every nvcc from the build.
func noNVCC(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	t.Setenv("NVCC", "")
	t.Setenv("CUDA_HOME", "")
	if _, err := os.Stat("/usr/local/cuda/bin/nvcc"); err == nil {
		t.Skip("/usr/local/cuda/bin/nvcc exists: the build would find it")
	}
}

func TestBuildOutsideTheRepository(t *testing.T) {
	// A user's module: no generated/ tree, ncclgo's sources only inside
	// ncclgen. Generation works; the build stops at nvcc with a message
	// that says how to point at one.
	noNVCC(t)
	t.Chdir(t.TempDir())
	cache := t.TempDir()
	out, err := runCLI(t, "build", "--arch", "sm_90", "--only", "AllReduce Sum (f32|bf16) * *", "--out", "kernels.fatbin", "--cache", cache)
	require.Error(t, err)
	for _, want := range []string{"nvcc not found", "CUDA_HOME", "NVCC", "--nvcc"} {
		assert.Contains(t, err.Error(), want)
	}
	assert.Contains(t, out, `sources for filter "AllReduce Sum (f32|bf16) * *" in `+filepath.Join(cache, "gen"))
	assert.NoFileExists(t, "kernels.fatbin")
	assert.NoDirExists(t, "generated")
	dirs, err := filepath.Glob(filepath.Join(cache, "gen", "*"))
	require.NoError(t, err)
	require.Len(t, dirs, 1)
	for _, f := range []string{"manifest.json", "kernelset.json", "cuda/device_table.cu", "cuda/all_reduce_sum_f32.cu", "devicesrc/ng_device.h"} {
		assert.FileExists(t, filepath.Join(dirs[0], f))
	}
	assert.NoFileExists(t, filepath.Join(dirs[0], "cuda", "all_gather.cu"))

	// The same again reuses the directory; another filter gets its own.
	_, err = runCLI(t, "build", "--arch", "sm_90", "--only", "AllReduce Sum (f32|bf16) * *", "--out", "kernels.fatbin", "--cache", cache)
	require.Error(t, err)
	_, err = runCLI(t, "build", "--arch", "sm_90", "--only", "SendRecv", "--out", "kernels.fatbin", "--cache", cache)
	require.Error(t, err)
	dirs, _ = filepath.Glob(filepath.Join(cache, "gen", "*"))
	assert.Len(t, dirs, 2)
}

func TestInspect(t *testing.T) {
	dir := t.TempDir()
	s, err := spaceOf("AllReduce Sum f32 * *")
	require.NoError(t, err)
	b, err := kset.Wrap(gen.KernelSet(s, []string{"sm_90"}), []byte("fatbin bytes"))
	require.NoError(t, err)
	p := filepath.Join(dir, "k.fatbin")
	require.NoError(t, os.WriteFile(p, b, 0o644))
	bare := filepath.Join(dir, "bare.fatbin")
	out, err := runCLI(t, "inspect", p, "--fatbin", bare)
	require.NoError(t, err)
	assert.Contains(t, out, `filter:     filter "AllReduce Sum f32 * *"`)
	assert.Contains(t, out, "(this ncclgo's)")
	assert.Contains(t, out, "functions:  12")
	got, err := os.ReadFile(bare)
	require.NoError(t, err)
	assert.Equal(t, "fatbin bytes", string(got))
	require.NoError(t, os.WriteFile(p, []byte("bare"), 0o644))
	_, err = runCLI(t, "inspect", p)
	assert.ErrorIs(t, err, kset.ErrNoManifest)
}

// TestHelp: "ncclgen help CMD", "CMD --help" and "CMD -h" print the
// command's own usage on stdout, and exit 0.
func TestHelp(t *testing.T) {
	for _, name := range []string{"generate", "list", "explain", "build", "inspect"} {
		want, err := runCLI(t, name, "--help")
		require.NoError(t, err, name)
		assert.True(t, strings.HasPrefix(want, "usage: ncclgen "+name+" "), "%s --help: %q", name, want)
		for _, args := range [][]string{{"help", name}, {name, "-h"}, {name, "-help"}} {
			stdout, stderr, code := runMain(t, args...)
			assert.Equal(t, 0, code, "%q", args)
			assert.Equal(t, want, stdout, "%q prints %s's usage", args, name)
			assert.Empty(t, stderr, "%q", args)
		}
	}
	stdout, _, code := runMain(t, "help")
	assert.Equal(t, 0, code)
	assert.Equal(t, usage, stdout)
}

// TestHelpLines: every flag's help line names its value plainly (a
// back-quoted word in the text becomes the value's name, so a quoted
// command line there garbled the line).
func TestHelpLines(t *testing.T) {
	out, err := runCLI(t, "generate", "--help")
	require.NoError(t, err)
	assert.Contains(t, out, "--only filter ")
	assert.Contains(t, out, "prefer 'ncclgen build --only'")
	out, err = runCLI(t, "build", "--help")
	require.NoError(t, err)
	assert.Contains(t, out, "--only filter ")
	assert.Contains(t, out, "-j, --jobs number ")
}

// TestExitCodes: usage errors exit 2 with the message on stderr; a
// failure of the work exits 1.
func TestExitCodes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{nil, cli.ExitUsage, "no command"},
		{[]string{"frobnicate"}, cli.ExitUsage, `unknown command "frobnicate"`},
		{[]string{"help", "frobnicate"}, cli.ExitUsage, `help "frobnicate": unknown command`},
		{[]string{"list", "--bogus"}, cli.ExitUsage, "list: unknown flag: --bogus ('ncclgen help list' lists its flags)"},
		{[]string{"list", "-j", "2"}, cli.ExitUsage, "unknown shorthand flag: 'j'"},
		{[]string{"list", "extra"}, cli.ExitUsage, "list: takes no arguments"},
		{[]string{"list", "--only", "AllReduce (Sum"}, cli.ExitUsage, "list: --only:"},
		{[]string{"explain"}, cli.ExitUsage, "explain: needs"},
		{[]string{"explain", "AllReduce Sum f32 RING LL9"}, cli.ExitUsage, "valid protocols are"},
		{[]string{"build", "--jobs", "many"}, cli.ExitUsage, `invalid argument "many"`},
		{[]string{"build", "--arch", "sm_42"}, cli.ExitUsage, `build: --arch: bad target arch "sm_42"`},
		{[]string{"generate", "--out", t.TempDir(), "--arch", "sm_42"}, cli.ExitUsage, `generate: --arch: bad target arch "sm_42"`},
		{[]string{"inspect"}, cli.ExitUsage, "inspect: needs FILE"},
		{[]string{"inspect", filepath.Join(t.TempDir(), "missing.fatbin")}, cli.ExitFailure, "no such file"},
		{[]string{"list", "--summary"}, 0, ""},
	} {
		_, stderr, code := runMain(t, tc.args...)
		assert.Equal(t, tc.code, code, "%q: %s", tc.args, stderr)
		if tc.msg == "" {
			assert.Empty(t, stderr, "%q", tc.args)
			continue
		}
		assert.Contains(t, stderr, "ncclgen: ", "%q", tc.args)
		assert.Contains(t, stderr, tc.msg, "%q", tc.args)
	}
}

func TestBuildWarnsOfAnotherABI(t *testing.T) {
	// A generated tree from another ncclgo builds a kernel set that this
	// one's runtime refuses: the build says so before it compiles.
	noNVCC(t)
	lib, err := filepath.Abs(filepath.Join("..", "..", "devicesrc"))
	require.NoError(t, err)
	dir := t.TempDir()
	t.Chdir(dir)
	rel, err := filepath.Rel(filepath.Join(dir, "generated"), lib)
	require.NoError(t, err)
	_, err = runCLI(t, "generate", "--out", "generated", "--only", "SendRecv", "--devicesrc", rel)
	require.NoError(t, err)
	build := func() string {
		out, err := runCLI(t, "build", "--arch", "sm_90", "--out", "kernels.fatbin", "--cache", t.TempDir())
		require.ErrorContains(t, err, "nvcc not found")
		return out
	}
	assert.NotContains(t, build(), "another ncclgo", "this ncclgen's own tree")

	p := filepath.Join("generated", kset.FileName)
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	require.Contains(t, string(b), generated.ABIVersion)
	require.NoError(t, os.WriteFile(p, bytes.ReplaceAll(b, []byte(generated.ABIVersion), []byte("00000000feedbeef")), 0o644))
	out := build()
	assert.Contains(t, out, "generated was generated by another ncclgo (ABI 00000000feedbeef; this ncclgen's is "+generated.ABIVersion+")")
	assert.Contains(t, out, "go generate")
	assert.Contains(t, out, "--only")
}
