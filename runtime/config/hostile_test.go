package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func fromMap(m map[string]string) (Config, error) {
	return FromEnv(func(k string) (string, bool) { v, ok := m[k]; return v, ok })
}

// Digit separators and prefixes that Go's base-0 syntax reads but NCCL's
// strtoll does not are refused, instead of "1_6" reading as 16 (NCCL reads
// 1); NCCL's own forms (decimal, 0x, 0-octal, sign, spaces) still parse.
func TestIntegerSyntaxAsNCCL(t *testing.T) {
	for _, v := range []string{"1_6", "0b11", "0o17", "16abc", "1 6", "--4", "0x", "+-2", "1e1"} {
		_, err := fromMap(map[string]string{"NCCL_NCHANNELS": v})
		require.ErrorIs(t, err, ErrInvalid, "NCCL_NCHANNELS=%q", v)
		assert.ErrorContains(t, err, "NCCL_NCHANNELS")
	}
	for v, want := range map[string]int{"16": 16, " 8 ": 8, "0x10": 16, "010": 8, "+4": 4} {
		c, err := fromMap(map[string]string{"NCCL_NCHANNELS": v})
		require.NoError(t, err, "NCCL_NCHANNELS=%q", v)
		assert.Equal(t, want, c.NChannels, "NCCL_NCHANNELS=%q", v)
	}
	for _, v := range []string{"1_0", "0x1p3", "1_0.5", "10s"} {
		_, err := ParseBootstrapTimeout(v)
		require.ErrorIs(t, err, ErrInvalid, "NCCL_BOOTSTRAP_TIMEOUT=%q", v)
	}
	for v, want := range map[string]time.Duration{"10": 10 * time.Second, "0.5": 500 * time.Millisecond, "1e-3": time.Millisecond, " 2 ": 2 * time.Second} {
		d, err := ParseBootstrapTimeout(v)
		require.NoError(t, err, v)
		assert.Equal(t, want, d, v)
	}
}

// NCCL_LL128_BUFFSIZE must split into whole LL128 FIFO units (2048 bytes),
// which the transport would otherwise refuse only at connection time.
func TestLL128BuffSizeGranule(t *testing.T) {
	_, err := fromMap(map[string]string{"NCCL_LL128_BUFFSIZE": "1024"})
	require.ErrorIs(t, err, ErrInvalid)
	assert.ErrorContains(t, err, "multiple of 2048")
	n := 3072
	_, err = Default().Apply(Overrides{LL128BuffSize: &n})
	require.ErrorIs(t, err, ErrInvalid)
	c, err := fromMap(map[string]string{"NCCL_LL128_BUFFSIZE": "4096"})
	require.NoError(t, err)
	assert.Equal(t, 4096, c.LL128BuffSize)
}

// NCCL_HOSTID is bounded as NCCL's buffer is and must be printable.
func TestHostIDBounded(t *testing.T) {
	for _, v := range []string{strings.Repeat("h", 1<<20), "node\n1", "a\x00b", "x\x1b[2J"} {
		_, err := fromMap(map[string]string{"NCCL_HOSTID": v})
		require.ErrorIs(t, err, ErrInvalid)
		assert.ErrorContains(t, err, "NCCL_HOSTID")
		assert.Less(t, len(err.Error()), 400, "the error must not echo a huge value")
		_, err = Default().Apply(Overrides{HostID: &v})
		require.ErrorIs(t, err, ErrInvalid)
	}
	c, err := fromMap(map[string]string{"NCCL_HOSTID": "node-1.rack 2"})
	require.NoError(t, err)
	assert.Equal(t, "node-1.rack 2", c.HostID)
}

// A symbolic link planted where the debug file goes is not followed to a
// regular file: its target keeps its contents. Links to devices
// (/dev/stderr's kind) still work.
func TestDebugFileSymlinkRefused(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "precious")
	require.NoError(t, os.WriteFile(target, []byte("keep me\n"), 0o644))
	link := filepath.Join(dir, "nccl.log")
	require.NoError(t, os.Symlink(target, link))
	c := Default()
	c.Debug, c.DebugFile = DebugInfo, link
	_, err := c.OpenDebugFile()
	require.Error(t, err)
	assert.ErrorContains(t, err, "symbolic link")
	b, _ := os.ReadFile(target)
	assert.Equal(t, "keep me\n", string(b))

	dangling := filepath.Join(dir, "dangling.log")
	require.NoError(t, os.Symlink(filepath.Join(dir, "created"), dangling))
	c.DebugFile = dangling
	_, err = c.OpenDebugFile()
	require.Error(t, err)
	_, statErr := os.Stat(filepath.Join(dir, "created"))
	assert.True(t, os.IsNotExist(statErr), "a dangling link must not create its target")

	dev := filepath.Join(dir, "null.log")
	require.NoError(t, os.Symlink(os.DevNull, dev))
	c.DebugFile = dev
	w, err := c.OpenDebugFile()
	require.NoError(t, err)
	require.NoError(t, w.Close())
}
