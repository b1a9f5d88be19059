package nvbuild

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/kset"
)

func countPrefix(lines []string, prefix string) int {
	n := 0
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}

func compiledFiles(lines []string) []string {
	var out []string
	for _, l := range lines {
		if f, ok := strings.CutPrefix(l, "compile "); ok {
			out = append(out, f)
		}
	}
	slices.Sort(out)
	return out
}

func TestFakeBuildAndCache(t *testing.T) {
	e := newFakeEnv(t)
	ctx := context.Background()
	var progress bytes.Buffer
	opt := e.opts()
	opt.Progress = &progress

	res, err := Build(ctx, opt)
	require.NoError(t, err)
	log := e.takeLog(t)
	// 3 units × (sm_80, sm_90, lto_90).
	assert.Equal(t, 9, res.Compiled)
	assert.Equal(t, 0, res.Cached)
	assert.Equal(t, 3, res.Linked)
	assert.True(t, res.Packed)
	assert.Equal(t, []string{"sm_80", "sm_90"}, res.Arches)
	assert.Equal(t, "compute_90", res.PTXArch)
	assert.Equal(t, "options", res.ArchSource)
	assert.Equal(t, "12.4", res.NVCCRelease)
	assert.Equal(t, 9, countPrefix(log, "compile "))
	assert.Contains(t, log, "nvlink sm_80")
	assert.Contains(t, log, "nvlink sm_90")
	assert.Contains(t, log, "nvlink compute_90")
	assert.Equal(t, 1, countPrefix(log, "fatbinary"))
	set, err := os.ReadFile(e.out)
	require.NoError(t, err)
	assert.Equal(t, int64(len(set)), res.Size)
	// The output is a kernel set: the tree's manifest, with the arches
	// actually built, in front of the fatbin.
	m, fat, err := kset.Split(set)
	require.NoError(t, err)
	assert.Equal(t, []string{"sm_80", "sm_90"}, m.Arches)
	assert.Equal(t, "compute_90", m.PTX)
	assert.Equal(t, "AllReduce Sum f32 * *", m.Filter)
	assert.Equal(t, "00000000deadbeef", res.ABI)
	assert.Contains(t, string(fat), "IMAGE --image3=kind=elf,sm=80,")
	assert.Contains(t, string(fat), "IMAGE --image3=kind=elf,sm=90,")
	assert.Contains(t, string(fat), "IMAGE --image3=kind=ptx,sm=90,")
	assert.Contains(t, string(fat), "LINKED sm_90")
	assert.Contains(t, string(fat), "// abi v1")
	out := progress.String()
	assert.Contains(t, out, "ncclgo build: 3 units for sm_80 sm_90 + PTX compute_90")
	assert.Regexp(t, `\[1/9\] compiled [a-z_0-9]+\.cu (sm_80|sm_90|lto_90) \(\d+\.\ds\)`, out)
	assert.Contains(t, out, "[9/9] compiled ")
	assert.Contains(t, out, "built "+e.out)
	assert.Contains(t, out, "9 compiled, 0 cached, 3 linked")
	assert.NotContains(t, out, "\r", "not a terminal: plain lines only")

	// No-op rebuild: no tool runs besides the version probes, well under 1 s.
	start := time.Now()
	res, err = Build(ctx, e.opts())
	require.NoError(t, err)
	assert.Less(t, time.Since(start), time.Second)
	log = e.takeLog(t)
	assert.Empty(t, compiledFiles(log))
	assert.Zero(t, countPrefix(log, "nvlink"))
	assert.Zero(t, countPrefix(log, "fatbinary"))
	assert.Equal(t, 0, res.Compiled)
	assert.Equal(t, 9, res.Cached)
	assert.Equal(t, 0, res.Linked)
	assert.Equal(t, 3, res.LinkCached)
	assert.False(t, res.Packed)
	assert.True(t, res.Unchanged)

	// Touch only (same content): still nothing to do.
	now := time.Now().Add(time.Minute)
	require.NoError(t, os.Chtimes(filepath.Join(e.gen, "cuda", "all_gather.cu"), now, now))
	res, err = Build(ctx, e.opts())
	require.NoError(t, err)
	assert.Equal(t, 0, res.Compiled)

	// Change one unit: only it recompiles (for every target); all links rerun.
	e.write(t, "src/generated/cuda/all_gather.cu", "#include \"ngabi.h\"\n// allgather v2\n")
	res, err = Build(ctx, e.opts())
	require.NoError(t, err)
	log = e.takeLog(t)
	assert.Equal(t, []string{"lto_90 cuda/all_gather.cu", "sm_80 cuda/all_gather.cu", "sm_90 cuda/all_gather.cu"}, compiledFiles(log))
	assert.Equal(t, 3, res.Compiled)
	assert.Equal(t, 6, res.Cached)
	assert.Equal(t, 3, res.Linked)
	assert.False(t, res.Unchanged)

	// Change a devicesrc header included indirectly by one unit only.
	e.write(t, "src/devicesrc/op.h", "#pragma once\n// op v2\n")
	res, err = Build(ctx, e.opts())
	require.NoError(t, err)
	assert.Equal(t, []string{"lto_90 cuda/all_reduce_sum_f32.cu", "sm_80 cuda/all_reduce_sum_f32.cu", "sm_90 cuda/all_reduce_sum_f32.cu"}, compiledFiles(e.takeLog(t)))
	assert.Equal(t, 3, res.Compiled)

	// A header grows a new include: the include list is refreshed, so a later
	// change to the new header is noticed.
	e.write(t, "src/devicesrc/extra.h", "#pragma once\n// extra v1\n")
	e.write(t, "src/devicesrc/table.h", "#pragma once\n#include \"extra.h\"\n// table v1\n")
	_, err = Build(ctx, e.opts())
	require.NoError(t, err)
	assert.Len(t, compiledFiles(e.takeLog(t)), 3)
	e.write(t, "src/devicesrc/extra.h", "#pragma once\n// extra v2\n")
	_, err = Build(ctx, e.opts())
	require.NoError(t, err)
	assert.Equal(t, []string{"lto_90 cuda/device_table.cu", "sm_80 cuda/device_table.cu", "sm_90 cuda/device_table.cu"}, compiledFiles(e.takeLog(t)))

	// Reverting a header finds the earlier objects again.
	e.write(t, "src/devicesrc/op.h", "#pragma once\n// op v1\n")
	res, err = Build(ctx, e.opts())
	require.NoError(t, err)
	assert.Empty(t, compiledFiles(e.takeLog(t)))
	assert.Equal(t, 9, res.Cached)

	// A deleted output comes back from the cache without fatbinary.
	require.NoError(t, os.Remove(e.out))
	res, err = Build(ctx, e.opts())
	require.NoError(t, err)
	log = e.takeLog(t)
	assert.Zero(t, countPrefix(log, "fatbinary"))
	assert.Zero(t, countPrefix(log, "nvlink"))
	assert.FileExists(t, e.out)
	assert.False(t, res.Unchanged)

	// Extra flags are part of the key.
	opt = e.opts()
	opt.ExtraFlags = []string{"-lineinfo"}
	res, err = Build(ctx, opt)
	require.NoError(t, err)
	assert.Equal(t, 9, res.Compiled)
	e.takeLog(t)

	// A new nvcc invalidates everything.
	e.setVersion(t, "Cuda compilation tools, release 12.5, V12.5.40")
	res, err = Build(ctx, e.opts())
	require.NoError(t, err)
	assert.Equal(t, 9, res.Compiled)
	assert.Equal(t, "12.5", res.NVCCRelease)

	// No temporary files are left in the cache.
	ents, err := os.ReadDir(filepath.Join(e.cache, "tmp"))
	require.NoError(t, err)
	assert.Empty(t, ents)
}

func TestFakeBuildNoPTX(t *testing.T) {
	e := newFakeEnv(t)
	opt := e.opts()
	opt.PTX = false
	opt.Arches = []string{"sm_90"}
	res, err := Build(context.Background(), opt)
	require.NoError(t, err)
	assert.Equal(t, 3, res.Compiled)
	assert.Equal(t, 1, res.Linked)
	assert.Empty(t, res.PTXArch)
	log := e.takeLog(t)
	assert.NotContains(t, log, "nvlink compute_90")
	fat, err := os.ReadFile(e.out)
	require.NoError(t, err)
	assert.NotContains(t, string(fat), "kind=ptx")
}

func TestFakeBuildParallel(t *testing.T) {
	e := newFakeEnv(t)
	var files []string
	for i := range 8 {
		f := "cuda/unit" + strconv.Itoa(i) + ".cu"
		e.write(t, "src/generated/"+f, "// FAKE_SLEEP\n")
		files = append(files, f)
	}
	e.writeManifest(t, files)
	opt := e.opts()
	opt.Arches = []string{"sm_90"}
	opt.PTX = false
	opt.Jobs = 4
	start := time.Now()
	res, err := Build(context.Background(), opt)
	require.NoError(t, err)
	elapsed := time.Since(start)
	assert.Equal(t, 8, res.Compiled)
	// 8 one-second compiles on 4 workers: about 2 s, never 8.
	assert.Less(t, elapsed, 5*time.Second)
	data, err := os.ReadFile(filepath.Join(e.root, "log"))
	require.NoError(t, err)
	peak := 0
	for _, l := range strings.Split(string(data), "\n") {
		if n, ok := strings.CutPrefix(l, "concurrent "); ok {
			v, _ := strconv.Atoi(strings.TrimSpace(n))
			peak = max(peak, v)
		}
	}
	assert.Greater(t, peak, 1, "compiles ran one at a time")
	assert.LessOrEqual(t, peak, 4, "more compiles than Jobs at once")
}

func TestFakeBuildCompileError(t *testing.T) {
	e := newFakeEnv(t)
	var files []string
	for i := range 6 {
		f := "cuda/slow" + strconv.Itoa(i) + ".cu"
		e.write(t, "src/generated/"+f, "// FAKE_SLEEP_LONG\n")
		files = append(files, f)
	}
	e.write(t, "src/generated/cuda/broken.cu", "// small, but FAKE_ERROR\n")
	files = append(files, "cuda/broken.cu")
	e.writeManifest(t, files)
	opt := e.opts()
	opt.Arches = []string{"sm_90"}
	opt.PTX = false
	opt.Jobs = 4
	start := time.Now()
	_, err := Build(context.Background(), opt)
	require.Error(t, err)
	// The slow compiles (6 s each) were killed, not waited for.
	assert.Less(t, time.Since(start), 4*time.Second)
	var te *ToolError
	require.ErrorAs(t, err, &te)
	assert.Equal(t, "compile", te.Step)
	assert.Equal(t, "cuda/broken.cu", te.File)
	assert.Equal(t, "sm_90", te.Target)
	assert.Contains(t, err.Error(), "cuda/broken.cu")
	assert.Contains(t, err.Error(), "sm_90")
	assert.Contains(t, err.Error(), `identifier "boom" is undefined`)
	assert.NoFileExists(t, e.out)
	// Nothing for the failed unit is cached: a retry compiles it again.
	e.write(t, "src/generated/cuda/broken.cu", "// fixed\n")
	e.writeManifest(t, []string{"cuda/broken.cu"})
	e.takeLog(t)
	res, err := Build(context.Background(), opt)
	require.NoError(t, err)
	assert.Equal(t, 1, res.Compiled)
}

func TestFakeBuildLinkErrorAndWarnings(t *testing.T) {
	e := newFakeEnv(t)
	e.write(t, "src/generated/cuda/all_gather.cu", "// FAKE_WARN\n")
	require.NoError(t, os.WriteFile(filepath.Join(e.root, "nvlink_fail"), nil, 0o644))
	var progress bytes.Buffer
	opt := e.opts()
	opt.Progress = &progress
	_, err := Build(context.Background(), opt)
	var te *ToolError
	require.ErrorAs(t, err, &te)
	assert.Equal(t, "link", te.Step)
	assert.Contains(t, err.Error(), "undefined reference to 'addOne'")
	assert.Contains(t, progress.String(), "warning: fake warning")

	require.NoError(t, os.Remove(filepath.Join(e.root, "nvlink_fail")))
	res, err := Build(context.Background(), e.opts())
	require.NoError(t, err)
	assert.Equal(t, 3, res.Linked)
}

func TestFakeBuildCancel(t *testing.T) {
	e := newFakeEnv(t)
	e.write(t, "src/generated/cuda/all_gather.cu", "// FAKE_SLEEP_LONG\n")
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := Build(ctx, e.opts())
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), 4*time.Second)
}

func TestBuildArchChecks(t *testing.T) {
	e := newFakeEnv(t)
	opt := e.opts()
	opt.Arches = []string{"sm_100"}
	_, err := Build(context.Background(), opt)
	require.ErrorIs(t, err, ErrBadArch)
	assert.Contains(t, err.Error(), "nvcc 12.4")
	assert.Contains(t, err.Error(), "cannot compile for sm_100")

	opt.Arches = []string{"sm_42"}
	_, err = Build(context.Background(), opt)
	require.ErrorIs(t, err, ErrBadArch)
}

func TestBuildNoNVCC(t *testing.T) {
	e := newFakeEnv(t)
	opt := e.opts()
	opt.NVCC = filepath.Join(e.root, "nowhere", "nvcc")
	_, err := Build(context.Background(), opt)
	require.ErrorIs(t, err, ErrNoNVCC)
	assert.Contains(t, err.Error(), "nowhere")
}

func TestBuildNotes(t *testing.T) {
	e := newFakeEnv(t)
	e.write(t, "src/generated/manifest.json", `{"version": 1, "include_dirs": ["include", "../devicesrc"],
 "units": [{"file": "cuda/all_gather.cu", "requires": {"cudart": 12090, "arch": 1000}}]}`)
	var progress bytes.Buffer
	opt := e.opts()
	opt.Progress = &progress
	res, err := Build(context.Background(), opt)
	require.NoError(t, err)
	require.Len(t, res.Warnings, 2)
	assert.Contains(t, res.Warnings[0], "need up to sm_100")
	assert.Contains(t, res.Warnings[1], "need CUDA 12.9")
}

func TestBuildWithoutKernelSetManifest(t *testing.T) {
	e := newFakeEnv(t)
	require.NoError(t, os.Remove(filepath.Join(e.gen, kset.FileName)))
	res, err := Build(context.Background(), e.opts())
	require.NoError(t, err)
	require.NotEmpty(t, res.Warnings)
	assert.Contains(t, res.Warnings[len(res.Warnings)-1], "has no kernelset.json")
	b, err := os.ReadFile(e.out)
	require.NoError(t, err)
	assert.False(t, kset.IsSet(b))

	// A broken one is an error naming it.
	e.write(t, "src/generated/"+kset.FileName, `{"format": 1}`)
	_, err = Build(context.Background(), e.opts())
	require.ErrorIs(t, err, kset.ErrCorrupt)
	assert.Contains(t, err.Error(), kset.FileName)
}

func TestToolErrorIs(t *testing.T) {
	inner := errors.New("exit status 2")
	err := error(&ToolError{Step: "compile", File: "cuda/x.cu", Target: "sm_90", Err: inner, Output: "x.cu(1): error"})
	assert.ErrorIs(t, err, inner)
	assert.Equal(t, "nvcc failed on cuda/x.cu for sm_90: exit status 2\nx.cu(1): error", err.Error())
}
