package launch

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// shareAll runs ShareID on n goroutine ranks and returns their ids.
func shareAll(t *testing.T, n int, place func(r int) Place, getenv func(string) string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ids := make([]string, n)
	errs := make([]error, n)
	calls := 0
	var mu sync.Mutex
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			ids[r], errs[r] = ShareID(ctx, place(r), getenv, func() (string, error) {
				mu.Lock()
				defer mu.Unlock()
				calls++
				return fmt.Sprintf("id-from-rank-%d", r), nil
			})
		})
	}
	wg.Wait()
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	assert.Equal(t, 1, calls, "only rank 0 creates the id")
	return ids
}

func TestShareIDByTCP(t *testing.T) {
	// A free port for the id; MASTER_PORT is the one below it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	master := net.JoinHostPort("127.0.0.1", strconv.Itoa(port-1))
	ids := shareAll(t, 4, func(r int) Place {
		return Place{Rank: r, Size: 4, LocalRank: r, LocalSize: 4, Launcher: "torchrun", MasterAddr: master}
	}, envOf())
	for _, id := range ids {
		assert.Equal(t, "id-from-rank-0", id)
	}
}

func TestShareIDByFile(t *testing.T) {
	f := filepath.Join(t.TempDir(), "id")
	ids := shareAll(t, 3, func(r int) Place { return Place{Rank: r, Size: 3, LocalRank: r, LocalSize: 3, Launcher: "mpirun"} },
		envOf(EnvIDFile, f))
	for _, id := range ids {
		assert.Equal(t, "id-from-rank-0", id)
	}
}

func TestShareIDOthers(t *testing.T) {
	ctx := context.Background()
	boom := errors.New("boom")
	id, err := ShareID(ctx, Place{Rank: 1, Size: 2, Launcher: "ncclgo", ID: "given"}, envOf(), func() (string, error) { return "", boom })
	require.NoError(t, err)
	assert.Equal(t, "given", id)
	id, err = ShareID(ctx, Place{Rank: 0, Size: 1}, envOf(), func() (string, error) { return "solo", nil })
	require.NoError(t, err)
	assert.Equal(t, "solo", id)
	_, err = ShareID(ctx, Place{Rank: 1, Size: 2, Launcher: "mpirun"}, envOf(), nil)
	assert.ErrorContains(t, err, EnvIDFile)
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = ShareID(short, Place{Rank: 1, Size: 2, Launcher: "mpirun"}, envOf(EnvIDFile, filepath.Join(t.TempDir(), "never")), nil)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	_, err = idAddr("host:65535", "")
	assert.Error(t, err)
	a, err := idAddr("[::1]:29500", "")
	require.NoError(t, err)
	assert.Equal(t, "[::1]:29501", a)
	a, err = idAddr("h:29500", "4000")
	require.NoError(t, err)
	assert.Equal(t, "h:4000", a)
}

func TestDefaultIDFile(t *testing.T) {
	p := Place{Rank: 1, Size: 2, LocalRank: 1, LocalSize: 2, Launcher: "mpirun"}
	f := DefaultIDFile(p, envOf("PMIX_NAMESPACE", "prterun-host-123@1"))
	assert.Contains(t, f, "ncclgo-id-")
	assert.True(t, strings.HasSuffix(f, "-mpirun-prterun-host-123_1"), f)
	assert.NotEqual(t, f, DefaultIDFile(p, envOf("PMIX_NAMESPACE", "prterun-host-124@1")), "one file per job")
	assert.NotEmpty(t, DefaultIDFile(p, envOf("OMPI_MCA_ess_base_jobid", "4242")))
	assert.NotEmpty(t, DefaultIDFile(p, envOf("SLURM_JOB_ID", "7", "SLURM_STEP_ID", "0")))
	assert.Empty(t, DefaultIDFile(p, envOf()), "no job name")
	p.LocalSize = 1
	assert.Empty(t, DefaultIDFile(p, envOf("PMIX_NAMESPACE", "x")), "ranks on several hosts share no temporary directory")
}

// TestShareIDByJobName: under mpirun with no NCCLGO_ID_FILE, the job's
// name picks the file.
func TestShareIDByJobName(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	ids := shareAll(t, 3, func(r int) Place { return Place{Rank: r, Size: 3, LocalRank: r, LocalSize: 3, Launcher: "mpirun"} },
		envOf("OMPI_MCA_ess_base_jobid", fmt.Sprint(time.Now().UnixNano())))
	for _, id := range ids {
		assert.Equal(t, "id-from-rank-0", id)
	}
}

// TestShareIDByTCPBoundsTheLine: a server at the id's address that sends
// an endless line does not make a rank read it all: it keeps waiting for
// an id until its context ends, saying why.
func TestShareIDByTCPBoundsTheLine(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = c.Write(append(bytes.Repeat([]byte("x"), 1<<20), '\n'))
			}()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	master := net.JoinHostPort("127.0.0.1", strconv.Itoa(port-1))
	// Long enough for one whole attempt on a loaded machine (CI's 2 cores
	// running other packages' tests: at 300 ms the first dial once did
	// not finish, and only the deadline's error was left to report).
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	id, err := ShareID(ctx, Place{Rank: 1, Size: 2, LocalRank: 1, LocalSize: 2, Launcher: "torchrun", MasterAddr: master}, envOf(), nil)
	require.Error(t, err, "got an id of %d bytes", len(id))
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "longer than 4095 bytes")
}

// TestShareIDByTCPCountsRanks: connections that take the id without
// acknowledging it (a port scanner's) do not use up rank 0's service: the
// real ranks still get the id; a rank that never comes is named.
func TestShareIDByTCPCountsRanks(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	master := net.JoinHostPort("127.0.0.1", strconv.Itoa(port-1))
	place := func(r, n int) Place {
		return Place{Rank: r, Size: n, LocalRank: r, LocalSize: n, Launcher: "torchrun", MasterAddr: master}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	served := make(chan error, 1)
	go func() {
		_, err := ShareID(ctx, place(0, 2), envOf(), func() (string, error) { return "the-id", nil })
		served <- err
	}()
	// A scanner: connects, reads, leaves.
	var c net.Conn
	require.Eventually(t, func() bool { c, err = net.Dial("tcp", addr); return err == nil }, 5*time.Second, 10*time.Millisecond)
	line, err := bufio.NewReader(c).ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "the-id\n", line)
	c.Close()
	id, err := ShareID(ctx, place(1, 2), envOf(), nil)
	require.NoError(t, err)
	assert.Equal(t, "the-id", id)
	require.NoError(t, <-served)

	short, cancel2 := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel2()
	_, err = ShareID(short, place(0, 3), envOf(), func() (string, error) { return "the-id", nil })
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorContains(t, err, "rank(s) 1, 2 never fetched it")
}
