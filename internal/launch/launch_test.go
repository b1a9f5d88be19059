package launch

import (
	"bytes"
	"context"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func envOf(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

func TestFromEnv(t *testing.T) {
	for _, c := range []struct {
		name string
		env  func(string) string
		want Place
	}{
		{"ncclgo", envOf(EnvRank, "1", EnvSize, "4", EnvLocalRank, "1", EnvLocalSize, "4", EnvID, "abc"),
			Place{Rank: 1, Size: 4, LocalRank: 1, LocalSize: 4, Launcher: "ncclgo", ID: "abc"}},
		{"mpirun", envOf("OMPI_COMM_WORLD_RANK", "3", "OMPI_COMM_WORLD_SIZE", "8", "OMPI_COMM_WORLD_LOCAL_RANK", "1", "OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
			Place{Rank: 3, Size: 8, LocalRank: 1, LocalSize: 2, Launcher: "mpirun"}},
		{"torchrun", envOf("RANK", "2", "WORLD_SIZE", "4", "LOCAL_RANK", "0", "LOCAL_WORLD_SIZE", "2", "MASTER_ADDR", "10.0.0.1", "MASTER_PORT", "29500"),
			Place{Rank: 2, Size: 4, LocalRank: 0, LocalSize: 2, Launcher: "torchrun", MasterAddr: "10.0.0.1:29500"}},
		{"slurm", envOf("SLURM_PROCID", "5", "SLURM_NTASKS", "8", "SLURM_LOCALID", "1", "SLURM_NTASKS_PER_NODE", "4(x2)"),
			Place{Rank: 5, Size: 8, LocalRank: 1, LocalSize: 4, Launcher: "slurm"}},
		{"local rank defaults", envOf("PMI_RANK", "1", "PMI_SIZE", "2"),
			Place{Rank: 1, Size: 2, LocalRank: 1, LocalSize: 2, Launcher: "pmi"}},
		{"ncclgo wins over torchrun", envOf(EnvRank, "0", EnvSize, "2", "RANK", "1", "WORLD_SIZE", "2"),
			Place{Rank: 0, Size: 2, LocalRank: 0, LocalSize: 2, Launcher: "ncclgo"}},
	} {
		got, err := FromEnv(c.env)
		require.NoError(t, err, c.name)
		assert.Equal(t, c.want, got, c.name)
	}
	_, err := FromEnv(envOf())
	assert.ErrorIs(t, err, ErrNotLaunched)
	_, err = FromEnv(envOf("RANK", "0")) // no WORLD_SIZE: not torchrun
	assert.ErrorIs(t, err, ErrNotLaunched)
	for _, bad := range []func(string) string{
		envOf("RANK", "x", "WORLD_SIZE", "2"),
		envOf("RANK", "2", "WORLD_SIZE", "2"),
		envOf("RANK", "0", "WORLD_SIZE", "2", "LOCAL_RANK", "3", "LOCAL_WORLD_SIZE", "2"),
		envOf("RANK", "0", "WORLD_SIZE", "2", "LOCAL_WORLD_SIZE", "4"),
	} {
		_, err := FromEnv(bad)
		assert.Error(t, err)
		assert.NotErrorIs(t, err, ErrNotLaunched)
	}
}

const envChild = "NCCLGO_LAUNCHTEST_CHILD" // not NCCLGO_LAUNCH_*, which Spawn replaces

// syncBuf is a bytes.Buffer safe for the exec package's copying goroutine
// and the test.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// TestSpawn starts this test binary as 3 ranks, which read their place
// back with FromEnv.
func TestSpawn(t *testing.T) {
	if os.Getenv(envChild) != "" {
		t.Skip("child process")
	}
	outs := make([]*syncBuf, 3)
	env := append(os.Environ(), envChild+"=ok", EnvRank+"=99") // a stale rank variable is replaced
	j, err := Spawn(context.Background(), 3, os.Args[0], []string{"-test.run=^TestChild$", "-test.v"}, env, "the-id",
		func(r int) (io.Writer, io.Writer) { outs[r] = &syncBuf{}; return outs[r], outs[r] })
	require.NoError(t, err)
	assert.Len(t, j.Pids(), 3)
	require.NoError(t, j.Wait(time.Second))
	for r, o := range outs {
		assert.Contains(t, o.String(), "PLACE "+strings.Join([]string{itoa(r), "3", itoa(r), "3", "ncclgo", "the-id"}, " "), "rank %d", r)
	}
}

// envEach is the variable TestSpawnEach sets differently for each rank.
const envEach = "NCCLGO_LAUNCHTEST_EACH"

// TestSpawnEach: each rank gets its own environment, with Spawn's
// variables added (a stale one replaced) and no other rank's.
func TestSpawnEach(t *testing.T) {
	if os.Getenv(envChild) != "" {
		t.Skip("child process")
	}
	outs := make([]*syncBuf, 3)
	env := func(r int) []string {
		if r == 2 {
			return nil // this process's environment, without envEach
		}
		return append(os.Environ(), envChild+"=ok", EnvRank+"=99", envEach+"=rank"+itoa(r))
	}
	t.Setenv(envChild, "ok") // rank 2's, inherited
	j, err := SpawnEach(context.Background(), 3, os.Args[0], []string{"-test.run=^TestChild$", "-test.v"}, env, "id",
		func(r int) (io.Writer, io.Writer) { outs[r] = &syncBuf{}; return outs[r], outs[r] })
	require.NoError(t, err)
	require.NoError(t, j.Wait(time.Second))
	for r, o := range outs {
		assert.Contains(t, o.String(), "PLACE "+strings.Join([]string{itoa(r), "3", itoa(r), "3", "ncclgo", "id"}, " "), "rank %d", r)
	}
	assert.Contains(t, outs[0].String(), "EACH rank0\n")
	assert.Contains(t, outs[1].String(), "EACH rank1\n")
	assert.NotContains(t, outs[2].String(), "EACH", "nil: this process's environment")
}

// TestSpawnFailure: when one rank fails, the others are killed after the
// grace period and Wait names the failed rank.
func TestSpawnFailure(t *testing.T) {
	if os.Getenv(envChild) != "" {
		t.Skip("child process")
	}
	env := append(os.Environ(), envChild+"=fail1")
	j, err := Spawn(context.Background(), 2, os.Args[0], []string{"-test.run=^TestChild$"}, env, "",
		func(int) (io.Writer, io.Writer) { return io.Discard, io.Discard })
	require.NoError(t, err)
	start := time.Now()
	err = j.Wait(200 * time.Millisecond)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "rank 1 (pid")
	assert.Contains(t, err.Error(), "rank 0 (pid", "rank 0 was killed after the grace period")
	assert.Less(t, time.Since(start), 20*time.Second)
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestChild is the rank role of the tests above.
func TestChild(t *testing.T) {
	role := os.Getenv(envChild)
	if role == "" {
		t.Skip("only runs as a child of TestSpawn")
	}
	p, err := FromEnv(os.Getenv)
	require.NoError(t, err)
	switch {
	case role == "group":
		groupChild(t, p)
		return
	case role == "fail1" && p.Rank == 1:
		os.Exit(3)
	case role == "fail1":
		time.Sleep(time.Minute) // killed by the parent
	}
	os.Stdout.WriteString(strings.Join([]string{"PLACE", itoa(p.Rank), itoa(p.Size), itoa(p.LocalRank), itoa(p.LocalSize), p.Launcher, p.ID}, " ") + "\n")
	if v, ok := os.LookupEnv(envEach); ok {
		os.Stdout.WriteString("EACH " + v + "\n")
	}
}
