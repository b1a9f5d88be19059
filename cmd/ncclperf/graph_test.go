package main

import (
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/internal/launch"
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

// TestGraphRefused: combinations -G cannot run are refused with the other
// flags, before any device is touched, in every process of a job.
func TestGraphRefused(t *testing.T) {
	mpi := &launch.Place{Rank: 1, Size: 2, LocalRank: 1, LocalSize: 2, Launcher: "mpirun"}
	for _, tc := range []struct {
		args  []string
		place *launch.Place
		want  string
	}{
		{[]string{"-G", "-1"}, nil, "-G/--cudagraph -1: want a number of graph launches"},
		{[]string{"-G", "10", "-np", "2"}, nil, "leave out -np"},
		{[]string{"-G", "10"}, mpi, "leave out -np and the launcher"},
		{[]string{"-G", "10", "-compare", "libnccl.so.2"}, nil, "-ncclgo=false"},
		{[]string{"-graph-one"}, nil, "-graph-one captures for -G/--cudagraph: give -G/--cudagraph N"},
	} {
		_, err := parseArgs(tc.args, io.Discard, tc.place)
		require.Error(t, err, "%q", tc.args)
		assert.Contains(t, err.Error(), tc.want, "%q", tc.args)
	}
	for _, args := range [][]string{{"-G", "10"}, {"-G", "10", "-graph-one"}} {
		c, err := parseArgs(args, io.Discard, nil)
		require.NoError(t, err, "%q", args)
		assert.Equal(t, len(args) == 3, c.graphOne, "%q", args)
	}
}
