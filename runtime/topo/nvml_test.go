package topo

import (
	"os"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// loadNVML runs nvmlLinks with NVML loaded from lib, afresh.
func loadNVML(t *testing.T, lib, busID string) ([]string, error) {
	t.Helper()
	saved := nvmlLibrary
	t.Cleanup(func() { nvmlLibrary, nvmlOnce, nvmlErr = saved, sync.Once{}, nil })
	nvmlLibrary, nvmlOnce, nvmlErr = lib, sync.Once{}, nil
	return NVML(busID)
}

// TestNVMLAbsentIsTolerated: a missing NVML, or a library without its
// symbols, is ErrNoNVML naming what failed, and ProbeNVLinks leaves every
// count unknown instead of failing the layout.
func TestNVMLAbsentIsTolerated(t *testing.T) {
	for _, tc := range []struct{ lib, want string }{
		{"/nonexistent/libnvidia-ml.so.1", "/nonexistent/libnvidia-ml.so.1"},
		{"libc.so.6", "lacks one of nvmlInit_v2"},
	} {
		_, err := loadNVML(t, tc.lib, "0000:19:00.0")
		require.ErrorIs(t, err, ErrNoNVML, tc.lib)
		assert.Contains(t, err.Error(), tc.want)
		l := NewLayout([]int{0, 1})
		require.Error(t, l.ProbeNVLinks([]string{"0000:19:00.0", "0000:3b:00.0"}, NVML))
		assert.Equal(t, [][]int{{-1, -1}, {-1, -1}}, l.NVLinks)
	}
}

// TestNVMLBadBusID: with NVML present (a GPU machine), a bus id that
// names no GPU is an error naming it.
func TestNVMLBadBusID(t *testing.T) {
	if _, err := os.Stat("/dev/nvidiactl"); err != nil {
		t.Skip("no NVIDIA driver on this machine")
	}
	_, err := loadNVML(t, "libnvidia-ml.so.1", "0000:ff:1f.7")
	require.ErrorIs(t, err, ErrNoNVML)
	assert.Contains(t, err.Error(), "0000:ff:1f.7")
}
