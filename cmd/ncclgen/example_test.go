package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestExampleModuleGenerate is CI's check of examples/slim, a module of
// its own that requires ncclgo: copied out of the repository (as a user's
// module would be), its `go generate` runs ncclgen from ncclgo's module,
// generates the slim set's sources and stops where nvcc is needed with the
// message that says how to point at one; with a placeholder kernel set the
// example compiles, and its binary says it embeds no set.
func TestExampleModuleGenerate(t *testing.T) {
	if testing.Short() {
		t.Skip("builds ncclgen and the example with the go command")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	src := filepath.Join(root, "examples", "slim")
	dir := filepath.Join(t.TempDir(), "slim")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	for _, f := range []string{"go.mod", "go.sum", "main.go"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		require.NoError(t, err)
		if f == "go.mod" {
			b = []byte(strings.Replace(string(b), "=> ../..", "=> "+root, 1))
		}
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), b, 0o644))
	}
	gocache, err := exec.Command(goBin, "env", "GOCACHE").Output()
	require.NoError(t, err)
	env := append(os.Environ(),
		"GOCACHE="+strings.TrimSpace(string(gocache)),
		"XDG_CACHE_HOME="+t.TempDir(), // ncclgen's cache
		"GOFLAGS=-mod=readonly", "GOPROXY=off", "GOTOOLCHAIN=local",
		"NVCC="+filepath.Join(t.TempDir(), "no-nvcc-here"), "CUDA_HOME=")
	goCmd := func(args ...string) (string, error) {
		cmd := exec.Command(goBin, args...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	out, err := goCmd("generate")
	require.Error(t, err, out)
	for _, want := range []string{
		`sources for filter "AllReduce Sum (f32|bf16) * *"`,
		"nvcc not found", "CUDA_HOME", "--nvcc", "no-nvcc-here",
	} {
		assert.Contains(t, out, want)
	}
	assert.NoFileExists(t, filepath.Join(dir, "kernels.fatbin"))
	t.Logf("go generate without nvcc:\n%s", out)

	require.NoError(t, os.WriteFile(filepath.Join(dir, "kernels.fatbin"), nil, 0o644))
	out, err = goCmd("vet", ".")
	require.NoError(t, err, out)
	out, err = goCmd("run", ".")
	require.Error(t, err)
	assert.Contains(t, out, "embeds no kernel set")
}
