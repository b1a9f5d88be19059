package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGroupInProcess joins three goroutine ranks through a root started
// as Spawn's launcher starts it, exchanges, and leaves.
func TestGroupInProcess(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	id, stop, err := NewRoot(ctx)
	require.NoError(t, err)
	defer stop()
	const n = 3
	got := make([][][]byte, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			g, err := Join(ctx, Place{Rank: r, Size: n, LocalRank: r, LocalSize: n, Launcher: "ncclgo", ID: id}, envOf())
			if err != nil {
				errs[r] = err
				return
			}
			got[r], errs[r] = g.AllGather(ctx, []byte(fmt.Sprint("from ", r)))
			if errs[r] == nil {
				errs[r] = g.Barrier(ctx)
			}
			assert.NoError(t, g.Err())
			assert.Equal(t, r, g.Rank())
			assert.Equal(t, n, g.Size())
			require.NoError(t, g.Close())
			assert.ErrorIs(t, context.Cause(g.Context()), ErrLeft)
		})
	}
	wg.Wait()
	for r := range n {
		require.NoError(t, errs[r], "rank %d", r)
		require.Len(t, got[r], n)
		for p := range n {
			assert.Equal(t, fmt.Sprint("from ", p), string(got[r][p]))
		}
	}
}

// TestGroupLostRank: rank 1's process exits after joining without leaving;
// rank 0's exchange fails with a LostError naming it, and so does its
// context.
func TestGroupLostRank(t *testing.T) {
	if os.Getenv(envChild) != "" {
		t.Skip("child process")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id, stop, err := NewRoot(ctx)
	require.NoError(t, err)
	defer stop()
	outs := make([]*syncBuf, 2)
	env := append(os.Environ(), envChild+"=group")
	j, err := Spawn(ctx, 2, os.Args[0], []string{"-test.run=^TestChild$", "-test.v"}, env, id,
		func(r int) (io.Writer, io.Writer) { outs[r] = &syncBuf{}; return outs[r], outs[r] })
	require.NoError(t, err)
	start := time.Now()
	err = j.Wait(10 * time.Second)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "rank 1 (pid "+strconv.Itoa(j.Pids()[1])+"): exit status 3")
	assert.NotContains(t, err.Error(), "rank 0", "rank 0 exits on its own, with status 0")
	assert.Contains(t, outs[0].String(), "LOST rank 1 (pid "+strconv.Itoa(j.Pids()[1])+") exited before the job finished", outs[0].String())
	assert.Less(t, time.Since(start), 15*time.Second)
}

// groupChild is the rank role of TestGroupLostRank.
func groupChild(t *testing.T, p Place) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	g, err := Join(ctx, p, os.Getenv)
	require.NoError(t, err)
	_, err = g.AllGather(ctx, []byte("hello"))
	if p.Rank == 1 {
		require.NoError(t, err)
		os.Exit(3) // without Close: lost
	}
	// Rank 1 exits as soon as its own part of the exchange is done, and
	// its death may be noticed here before its block is read: then this
	// first exchange already fails naming it, as the second always does.
	var le *LostError
	if !errors.As(err, &le) {
		require.NoError(t, err)
		_, err = g.AllGather(ctx, []byte("never answered"))
	}
	require.True(t, errors.As(err, &le), "%v", err)
	<-g.Context().Done()
	assert.Equal(t, le, g.Err())
	os.Stdout.WriteString("LOST " + le.Error() + "\n")
}

// TestGroupUnderMpirun: ranks that get no id from their launcher share
// rank 0's through the id file, which is gone once all have joined.
func TestGroupUnderMpirun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	f := filepath.Join(t.TempDir(), "id")
	const n = 2
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			g, err := Join(ctx, Place{Rank: r, Size: n, LocalRank: r, LocalSize: n, Launcher: "mpirun"}, envOf(EnvIDFile, f))
			if err != nil {
				errs[r] = err
				return
			}
			errs[r] = g.Barrier(ctx)
			_ = g.Close()
		})
	}
	wg.Wait()
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	_, err := os.Stat(f)
	assert.ErrorIs(t, err, os.ErrNotExist, "rank 0 removed the id file")
}

// TestJoinBoundsTheIDWait: a rank whose rank 0 never publishes the id
// gives up after the bootstrap timeout, saying why, even under a context
// without deadline; a malformed timeout is refused by name.
func TestJoinBoundsTheIDWait(t *testing.T) {
	p := Place{Rank: 1, Size: 2, LocalRank: 1, LocalSize: 2, Launcher: "mpirun"}
	f := filepath.Join(t.TempDir(), "never")
	start := time.Now()
	_, err := Join(context.Background(), p, envOf(EnvIDFile, f, "NCCL_BOOTSTRAP_TIMEOUT", "0.2"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not shared within the bootstrap timeout 200ms")
	assert.Less(t, time.Since(start), 5*time.Second)
	_, err = Join(context.Background(), p, envOf(EnvIDFile, f, "NCCL_BOOTSTRAP_TIMEOUT", "soon"))
	assert.ErrorContains(t, err, "NCCL_BOOTSTRAP_TIMEOUT")
}
