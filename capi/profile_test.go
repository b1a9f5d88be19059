package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestProfileSpansCommunicators: NCCLGO_CPUPROFILE's profile starts with
// the first communicator and is written when the last one goes.
func TestProfileSpansCommunicators(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu")
	t.Setenv("NCCLGO_CPUPROFILE", path)
	file := fmt.Sprintf("%s.%d", path, os.Getpid())
	profileStart()
	profileStart()
	profileStop()
	_, err := os.Stat(file)
	require.NoError(t, err, "the profile is open while a communicator lives")
	profile.mu.Lock()
	open := profile.f != nil
	profile.mu.Unlock()
	assert.True(t, open, "one communicator is still alive")
	profileStop()
	st, err := os.Stat(file)
	require.NoError(t, err)
	assert.Positive(t, st.Size(), "the profile is written at the last destroy")
	profileStop() // one too many: no effect
	assert.Zero(t, profile.live)
}
