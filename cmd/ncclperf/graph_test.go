package main

import (
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGraphFlag(t *testing.T) {
	for _, args := range [][]string{{"-G", "100"}, {"-G100"}, {"--cudagraph", "100"}, {"--cudagraph=100"}} {
		c, err := parseFlags(args, io.Discard)
		require.NoError(t, err, "%q", args)
		assert.Equal(t, 100, c.graphLaunches, "%q", args)
	}
	c, err := parseFlags(nil, io.Discard)
	require.NoError(t, err)
	assert.Zero(t, c.graphLaunches, "graph mode is off by default")
}

// TestGraphRefused: combinations -G cannot run are refused before any
// device is touched.
func TestGraphRefused(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-G", "-1"}, "-G -1"},
		{[]string{"-G", "10", "-np", "2"}, "leave out -np"},
		{[]string{"-G", "10", "-compare", "libnccl.so.2"}, "-ncclgo=false"},
	} {
		c, err := parseFlags(tc.args, io.Discard)
		require.NoError(t, err, "%q", tc.args)
		err = c.measureGraph(io.Discard, []int{0})
		require.Error(t, err, "%q", tc.args)
		assert.Contains(t, err.Error(), tc.want, "%q", tc.args)
	}
}
