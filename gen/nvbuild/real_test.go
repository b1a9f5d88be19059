package nvbuild

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// realTree writes two units: a.cu defines an extern "C" __device__ function;
// b.cu holds the extern "C" __device__ function table pointing at it and an
// extern "C" __global__ kernel that calls through the table.
func realTree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	files := map[string]string{
		"devicesrc/dev_common.h": `#pragma once
typedef void (*ngDevFn_t)(float* p, int n);
extern "C" __device__ void ngDevFunc_AddOne(float* p, int n);
extern "C" __device__ ngDevFn_t ngDevFuncTable[];
`,
		"generated/include/ngabi.h": "#pragma once\n#define NG_ABI_VERSION 1\n",
		"generated/cuda/add_one.cu": `#include "ngabi.h"
#include "dev_common.h"
extern "C" __device__ void ngDevFunc_AddOne(float* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] += 1.0f;
}
`,
		"generated/cuda/device_table.cu": `#include "ngabi.h"
#include "dev_common.h"
extern "C" __device__ ngDevFn_t ngDevFuncTable[] = { ngDevFunc_AddOne };
extern "C" __global__ void ngDevKernel_Generic(float* p, int n, int fn) {
  ngDevFuncTable[fn](p, n);
}
`,
		"generated/manifest.json": `{"version": 1, "filter": "", "include_dirs": ["include", "../devicesrc"], "nvcc_flags": ["-std=c++17"],
 "units": [
  {"file": "cuda/add_one.cu", "coll": "", "functions": ["AddOne"], "kernels": [], "requires": {"cudart": 0, "arch": 0}},
  {"file": "cuda/device_table.cu", "coll": "", "functions": [], "kernels": ["Generic"], "requires": {"cudart": 0, "arch": 0}}
 ]}`,
	}
	for rel, s := range files {
		p := filepath.Join(root, filepath.FromSlash(rel))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(s), 0o644))
	}
	return root
}

func realNVCC(t *testing.T) string {
	t.Helper()
	nvcc, err := FindNVCC("")
	if err != nil {
		t.Skipf("no CUDA toolkit: %v", err)
	}
	return nvcc
}

// realArch is sm_80 unless NVBUILD_TEST_ARCH says otherwise (the GPU suite
// sets it to the local GPU's arch to load the result).
func realArch() string {
	if a := os.Getenv("NVBUILD_TEST_ARCH"); a != "" {
		return a
	}
	return "sm_80"
}

func TestRealNVCC(t *testing.T) {
	nvcc := realNVCC(t)
	cuobjdump, err := siblingTool(nvcc, "cuobjdump")
	if err != nil {
		t.Skipf("no cuobjdump next to %s", nvcc)
	}
	root := realTree(t)
	gen := filepath.Join(root, "generated")
	out := filepath.Join(root, "build", "ncclgo.fatbin")
	if d := os.Getenv("NVBUILD_TEST_OUT"); d != "" {
		out = d
	}
	var log strings.Builder
	opt := Options{GenDir: gen, Arches: []string{realArch()}, Jobs: 4, Out: out,
		CacheDir: filepath.Join(root, "cache"), NVCC: nvcc, Progress: &log, PTX: true}
	res, err := Build(context.Background(), opt)
	require.NoError(t, err, log.String())
	t.Log(log.String())
	assert.Equal(t, 4, res.Compiled) // 2 units × (SASS, LTO)
	assert.Equal(t, 2, res.Linked)
	num := strings.TrimPrefix(realArch(), "sm_")
	assert.Equal(t, "compute_"+num, res.PTXArch)
	require.FileExists(t, out)

	listing, err := exec.Command(cuobjdump, "-lelf", "-lptx", out).CombinedOutput()
	require.NoError(t, err, string(listing))
	assert.Regexp(t, `ELF file\s+1: .*sm_`+num+`\.cubin`, string(listing))
	assert.Regexp(t, `PTX file\s+1: .*sm_`+num+`\.ptx`, string(listing))

	elf, err := exec.Command(cuobjdump, "-elf", out).CombinedOutput()
	require.NoError(t, err)
	for _, sym := range []string{"ngDevKernel_Generic", "ngDevFuncTable", "ngDevFunc_AddOne"} {
		assert.Contains(t, string(elf), sym, "the linked SASS keeps %s", sym)
	}
	ptx, err := exec.Command(cuobjdump, "-ptx", out).CombinedOutput()
	require.NoError(t, err)
	assert.Contains(t, string(ptx), ".visible .entry ngDevKernel_Generic")
	assert.Contains(t, string(ptx), ".visible .global .align 8 .u64 ngDevFuncTable[1] = {ngDevFunc_AddOne}")

	// Nothing changed: nothing runs.
	log.Reset()
	res, err = Build(context.Background(), opt)
	require.NoError(t, err)
	assert.Equal(t, 0, res.Compiled)
	assert.Equal(t, 0, res.Linked)
	assert.True(t, res.Unchanged)

	// The shared header changed: both units recompile.
	hdr := filepath.Join(root, "devicesrc", "dev_common.h")
	data, err := os.ReadFile(hdr)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(hdr, append(data, "// edited\n"...), 0o644))
	res, err = Build(context.Background(), opt)
	require.NoError(t, err)
	assert.Equal(t, 4, res.Compiled)

	// A compile error names the file and the arch and carries nvcc's message.
	unit := filepath.Join(gen, "cuda", "add_one.cu")
	require.NoError(t, os.WriteFile(unit, []byte("#include \"dev_common.h\"\nextern \"C\" __device__ void ngDevFunc_AddOne(float* p, int n) { undefined_thing(p); }\n"), 0o644))
	_, err = Build(context.Background(), opt)
	var te *ToolError
	require.ErrorAs(t, err, &te)
	assert.Equal(t, "cuda/add_one.cu", te.File)
	assert.Contains(t, err.Error(), "undefined_thing")
}
