package nvbuild

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseManifest(t *testing.T) {
	good := `{
  "version": 1,
  "filter": "AllReduce Sum f32 * *",
  "include_dirs": ["include", "../devicesrc"],
  "nvcc_flags": ["-std=c++17"],
  "units": [
    {"file": "cuda/all_reduce_sum_f32.cu", "coll": "AllReduce",
     "functions": ["AllReduce Sum f32 RING LL"], "kernels": ["AllReduce Sum f32 RING LL"],
     "requires": {"cudart": 0, "arch": 0}},
    {"file": "cuda/device_table.cu", "coll": "", "functions": [], "kernels": ["Generic"], "requires": {"cudart": 12010, "arch": 900}}
  ]
}`
	m, err := ParseManifest([]byte(good))
	require.NoError(t, err)
	assert.Equal(t, "AllReduce Sum f32 * *", m.Filter)
	assert.Equal(t, []string{"include", "../devicesrc"}, m.IncludeDirs)
	require.Len(t, m.Units, 2)
	assert.Equal(t, Requires{CUDART: 12010, Arch: 900}, m.Units[1].Requires)
	assert.Equal(t, []string{"Generic"}, m.Units[1].Kernels)

	bad := []struct{ name, json, want string }{
		{"syntax", "{\n  \"version\": 1,\n  \"units\": [,]\n}", "line 3 col"},
		{"type", `{"version": 1, "units": "cuda/x.cu"}`, `field "units"`},
		{"no version", `{"units": [{"file": "a.cu"}]}`, `missing "version"`},
		{"future version", `{"version": 2, "units": [{"file": "a.cu"}]}`, "version 2"},
		{"no units", `{"version": 1, "units": []}`, "no units"},
		{"no file", `{"version": 1, "units": [{"coll": "AllReduce"}]}`, `units[0]: missing "file"`},
		{"absolute", `{"version": 1, "units": [{"file": "/tmp/a.cu"}]}`, "must be relative"},
		{"not cu", `{"version": 1, "units": [{"file": "a.cpp"}]}`, "not a .cu file"},
		{"duplicate", `{"version": 1, "units": [{"file": "a.cu"}, {"file": "./a.cu"}]}`, "units[0] and units[1]"},
		{"empty include", `{"version": 1, "include_dirs": [""], "units": [{"file": "a.cu"}]}`, "include_dirs[0] is empty"},
		{"trailing", `{"version": 1, "units": [{"file": "a.cu"}]} {}`, "trailing data"},
		{"empty", ``, "bad build manifest"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseManifest([]byte(tc.json))
			require.ErrorIs(t, err, ErrBadManifest)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestLoadManifest(t *testing.T) {
	dir := t.TempDir()
	_, err := LoadManifest(dir)
	require.ErrorIs(t, err, ErrBadManifest)
	assert.Contains(t, err.Error(), "does not exist")

	write := func(rel, s string) {
		p := filepath.Join(dir, rel)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(s), 0o644))
	}
	write("manifest.json", `{"version": 1, "include_dirs": ["include"], "units": [{"file": "cuda/a.cu"}]}`)
	_, err = LoadManifest(dir)
	require.ErrorIs(t, err, ErrBadManifest)
	assert.Contains(t, err.Error(), `include dir "include"`)

	require.NoError(t, os.Mkdir(filepath.Join(dir, "include"), 0o755))
	_, err = LoadManifest(dir)
	require.ErrorIs(t, err, ErrBadManifest)
	assert.Contains(t, err.Error(), `unit "cuda/a.cu" does not exist`)

	write("cuda/a.cu", "")
	m, err := LoadManifest(dir)
	require.NoError(t, err)
	assert.Equal(t, dir, m.Dir)
}

// The generator's real output must parse (skipped until it exists).
func TestParseGeneratedManifest(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "generated", ManifestName))
	if os.IsNotExist(err) {
		t.Skip("generated/manifest.json not present")
	}
	require.NoError(t, err)
	m, err := ParseManifest(data)
	require.NoError(t, err)
	assert.NotEmpty(t, m.Units)
}

func TestParseArches(t *testing.T) {
	got, err := ParseArches([]string{"sm_90,80", "9.0", " SM_100 ", "compute_86"})
	require.NoError(t, err)
	assert.Equal(t, []string{"sm_80", "sm_86", "sm_90", "sm_100"}, got)

	got, err = ParseArches([]string{"sm_90a", "sm_90", "sm_120"})
	require.NoError(t, err)
	assert.Equal(t, []string{"sm_90", "sm_90a", "sm_120"}, got)
	assert.Equal(t, "120", ptxArchFor(got[len(got)-1]))
	assert.Equal(t, "90", ptxArchFor("sm_90a"))
	assert.Equal(t, "90a", smNumber("sm_90a"))

	for _, bad := range []string{"sm_42", "sm_90,ampere", "hopper"} {
		_, err := ParseArches([]string{bad})
		require.ErrorIs(t, err, ErrBadArch, bad)
		assert.Contains(t, err.Error(), "sm_70 sm_75 sm_80 sm_86 sm_87 sm_89 sm_90")
		assert.Contains(t, err.Error(), "sm_100 ")
		assert.Contains(t, err.Error(), "sm_120")
	}
	_, err = ParseArches([]string{" , "})
	require.ErrorIs(t, err, ErrBadArch)
}

func TestDetectArchFallback(t *testing.T) {
	saved := archDetectors
	t.Cleanup(func() { archDetectors = saved })
	archDetectors = []func() (string, bool){func() (string, bool) { return "", false }}
	a, ok := DetectArch()
	assert.False(t, ok)
	assert.Equal(t, "sm_90", a)
	archDetectors = []func() (string, bool){func() (string, bool) { return "8.6", true }}
	a, ok = DetectArch()
	assert.True(t, ok)
	assert.Equal(t, "sm_86", a)
	// Something this package cannot build for is ignored.
	archDetectors = []func() (string, bool){func() (string, bool) { return "sm_53", true }}
	a, ok = DetectArch()
	assert.False(t, ok)
	assert.Equal(t, "sm_90", a)
}

func TestResolveArches(t *testing.T) {
	saved := archDetectors
	t.Cleanup(func() { archDetectors = saved })
	archDetectors = nil
	m := &Manifest{Arches: []string{"sm_80", "sm_90"}}
	a, src, err := resolveArches(nil, m)
	require.NoError(t, err)
	assert.Equal(t, []string{"sm_80", "sm_90"}, a)
	assert.Equal(t, "manifest", src)
	a, src, err = resolveArches(nil, &Manifest{})
	require.NoError(t, err)
	assert.Equal(t, []string{"sm_90"}, a)
	assert.Equal(t, "default", src)
	archDetectors = []func() (string, bool){func() (string, bool) { return "9.0", true }}
	a, src, err = resolveArches(nil, m)
	require.NoError(t, err)
	assert.Equal(t, []string{"sm_90"}, a)
	assert.Equal(t, "local GPU", src)
}

func TestFindNVCC(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "bin", "nvcc")
	require.NoError(t, os.MkdirAll(filepath.Dir(fake), 0o755))
	require.NoError(t, os.WriteFile(fake, []byte("#!/bin/sh\n"), 0o755))

	t.Setenv("NVCC", "")
	t.Setenv("CUDA_HOME", "")
	t.Setenv("PATH", "")

	// Explicit wins; a bad explicit path is an error even if others exist.
	p, err := FindNVCC(fake)
	require.NoError(t, err)
	assert.Equal(t, fake, p)
	_, err = FindNVCC(filepath.Join(dir, "missing"))
	require.ErrorIs(t, err, ErrNoNVCC)

	t.Setenv("NVCC", filepath.Join(dir, "nowhere", "nvcc"))
	_, err = FindNVCC("")
	require.ErrorIs(t, err, ErrNoNVCC)
	assert.Contains(t, err.Error(), "$NVCC")
	assert.Contains(t, err.Error(), "install the CUDA toolkit")

	t.Setenv("NVCC", fake)
	p, err = FindNVCC("")
	require.NoError(t, err)
	assert.Equal(t, fake, p)

	t.Setenv("NVCC", "")
	t.Setenv("CUDA_HOME", dir)
	p, err = FindNVCC("")
	require.NoError(t, err)
	assert.Equal(t, fake, p)

	t.Setenv("CUDA_HOME", "")
	t.Setenv("PATH", filepath.Dir(fake))
	p, err = FindNVCC("")
	require.NoError(t, err)
	assert.Equal(t, fake, p)

	t.Setenv("PATH", "")
	t.Setenv("CUDA_HOME", filepath.Join(dir, "no-cuda"))
	_, err = FindNVCC("")
	if fileExists("/usr/local/cuda/bin/nvcc") {
		t.Log("/usr/local/cuda/bin/nvcc exists here; skipping the not-found case")
		return
	}
	require.ErrorIs(t, err, ErrNoNVCC)
	for _, s := range []string{"CUDA_HOME", "NVCC", "install the CUDA toolkit", "no-cuda"} {
		assert.Contains(t, err.Error(), s)
	}
}

func TestParseDepfile(t *testing.T) {
	d := "out.cubin : cuda/a.cu \\\n    include/ngabi.h \\\n    ../devicesrc/my\\ dir/x.h \\\n" +
		"    /usr/local/cuda/include/cuda_runtime.h\n\ninclude/ngabi.h:\nsecond.o: include/ngabi.h extra.h\n"
	assert.Equal(t, []string{
		"cuda/a.cu", "include/ngabi.h", "../devicesrc/my dir/x.h",
		"/usr/local/cuda/include/cuda_runtime.h", "extra.h",
	}, parseDepfile([]byte(d)))
	assert.Equal(t, []string{`C:\cuda\x.h`}, parseDepfile([]byte(`C:\out.o: C:\cuda\x.h`)))
	assert.Empty(t, parseDepfile(nil))
}

func TestCacheKeyFollowsHeaders(t *testing.T) {
	dir := t.TempDir()
	h := filepath.Join(dir, "include", "x.h")
	require.NoError(t, os.MkdirAll(filepath.Dir(h), 0o755))
	require.NoError(t, os.WriteFile(h, []byte("v1"), 0o644))
	key := func() string {
		b := &builder{gen: dir, hasher: newFileHasher()}
		k, err := b.objKey("deps", []string{"include/x.h"})
		require.NoError(t, err)
		return k
	}
	k1 := key()
	assert.Equal(t, k1, key(), "deterministic")
	require.NoError(t, os.WriteFile(h, []byte("v2"), 0o644))
	k2 := key()
	assert.NotEqual(t, k1, k2)
	require.NoError(t, os.WriteFile(h, []byte("v1"), 0o644))
	assert.Equal(t, k1, key())
	// A listed header that vanishes changes the key; its coming back restores it.
	require.NoError(t, os.Remove(h))
	assert.NotEqual(t, k1, key())
	require.NoError(t, os.WriteFile(h, []byte("v1"), 0o644))
	assert.Equal(t, k1, key())
	assert.NotEqual(t, hashStrings("a", "bc"), hashStrings("ab", "c"))
}

func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a", "b.json")
	require.NoError(t, writeFileAtomic(p, []byte("one")))
	require.NoError(t, writeFileAtomic(p, []byte("two")))
	data, err := os.ReadFile(p)
	require.NoError(t, err)
	assert.Equal(t, "two", string(data))
	ents, err := os.ReadDir(filepath.Dir(p))
	require.NoError(t, err)
	assert.Len(t, ents, 1, "no temporary files left")

	// A copy lands whole; a failed write leaves the file as it was.
	q := filepath.Join(dir, "c", "d.json")
	require.NoError(t, copyFileAtomic(p, q))
	data, err = os.ReadFile(q)
	require.NoError(t, err)
	assert.Equal(t, "two", string(data))
	boom := errors.New("boom")
	require.ErrorIs(t, writeAtomic(q, func(w io.Writer) error {
		_, _ = w.Write([]byte("partial"))
		return boom
	}), boom)
	data, err = os.ReadFile(q)
	require.NoError(t, err)
	assert.Equal(t, "two", string(data))
	ents, err = os.ReadDir(filepath.Dir(q))
	require.NoError(t, err)
	assert.Len(t, ents, 1, "no temporary files left")
	require.Error(t, copyFileAtomic(filepath.Join(dir, "missing"), q))
}

func TestProgressTerminalLine(t *testing.T) {
	var buf strings.Builder
	p := &progress{w: &buf, tty: true, start: time.Now()}
	p.total = 4
	p.phase = "compiling"
	p.compiled("all_reduce_sum_f32.cu", "sm_90", 8100*time.Millisecond)
	p.compiled("all_gather.cu", "sm_90", time.Second)
	out := buf.String()
	assert.True(t, strings.HasPrefix(out, "\r\x1b[K["))
	assert.Contains(t, out, "2/4")
	assert.Contains(t, out, "slowest: all_reduce_sum_f32.cu sm_90 8.1s")
	assert.NotContains(t, out, "\n")
	buf.Reset()
	p.step("linked SASS sm_90")
	assert.Equal(t, "\r\x1b[K", buf.String()[:4], "status line cleared before a message")
	assert.Contains(t, buf.String(), "linked SASS sm_90\n")
	f, err := os.CreateTemp(t.TempDir(), "x")
	require.NoError(t, err)
	defer f.Close()
	assert.False(t, isTerminal(f))
	assert.False(t, isTerminal(&buf))
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	require.NoError(t, err)
	defer null.Close()
	assert.False(t, isTerminal(null), "a character device that is not a terminal")
}
