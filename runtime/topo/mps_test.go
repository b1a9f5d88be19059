package topo

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMPSActive(t *testing.T) {
	dir := t.TempDir()
	env := map[string]string{"CUDA_MPS_PIPE_DIRECTORY": dir}
	getenv := func(k string) string { return env[k] }
	assert.False(t, MPSActive(getenv), "no control pipe")
	require.NoError(t, os.Mkdir(filepath.Join(dir, "control"), 0o700))
	assert.False(t, MPSActive(getenv), "a directory is no control pipe")
	require.NoError(t, os.Remove(filepath.Join(dir, "control")))
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "control"), 0o600))
	assert.True(t, MPSActive(getenv), "control pipe present")
	env["NCCLGO_MPS"] = "0"
	assert.False(t, MPSActive(getenv))
	env["CUDA_MPS_PIPE_DIRECTORY"] = t.TempDir()
	env["NCCLGO_MPS"] = "1"
	assert.True(t, MPSActive(getenv))
}
