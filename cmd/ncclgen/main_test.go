package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(args, &out, &errb)
	return out.String() + errb.String(), err
}

func TestListSummary(t *testing.T) {
	out, err := runCLI(t, "list", "--summary")
	require.NoError(t, err)
	assert.Equal(t, "rows=1999 valid=919 functions=673 kernels=40\n", out)
}

func TestListSummaryDesignExamples(t *testing.T) {
	for only, want := range map[string]string{
		"SendRecv":                             "functions=2 kernels=2",
		"AllGather * *|Broadcast * *|SendRecv": "functions=11 kernels=4",
		"AllReduce Sum f32 * *":                "functions=11 kernels=3",
		"AllReduce MinMax i32 NVLS *":          "functions=2 kernels=1",
		"AllReduce Sum f32 RING LL128":         "functions=2 kernels=1",
	} {
		out, err := runCLI(t, "list", "--summary", "--only", only)
		require.NoError(t, err, only)
		assert.Equal(t, "rows=1999 valid=919 "+want+"\n", out, only)
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
	out, err := runCLI(t, "explain", "AllReduce Sum bf16 RING LL128")
	require.NoError(t, err)
	for _, want := range []string{"row:", "function id:", "ngDevKernel_AllReduce_Sum_bf16_RING_LL", "all_reduce_sum_bf16.cu", "CUDA >= 11.0"} {
		assert.Contains(t, out, want)
	}
	out, err = runCLI(t, "explain", "AllReduce Sum i32 RING SIMPLE")
	require.NoError(t, err)
	assert.Contains(t, out, "by AllReduce Sum u32 RING SIMPLE (same code as its equivalence class)")
	out, err = runCLI(t, "explain", "AllReduce Prod f32 NVLS SIMPLE")
	require.NoError(t, err)
	assert.Contains(t, out, "valid:        no: NVLS does not support Prod on f32")
	out, err = runCLI(t, "explain", "--only", "SendRecv", "AllReduce Sum f32 RING LL")
	require.NoError(t, err)
	assert.Contains(t, out, `by Nop: the filter "SendRecv" leaves it out`)
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
