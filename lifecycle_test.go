package ncclgo

// The CPU half of issue 13's leak test: the bootstrap networks and the
// device-less part of communicator setup, many times over, must leave
// goroutines, file descriptors and OS threads at their baseline. The GPU
// half is tests/leak_test.go.
//
//	NCCLGO_LEAK_CYCLES  cycles (default 1000; 200 with -test.short or -race)

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/internal/leakcheck"
	"github.com/ncclgo/ncclgo/internal/testutil"
	"github.com/ncclgo/ncclgo/runtime/bootstrap"
)

// leakCycles is NCCLGO_LEAK_CYCLES, or def (def/5 with -test.short or
// -race).
func leakCycles(t *testing.T, def int) int {
	t.Helper()
	if s := os.Getenv("NCCLGO_LEAK_CYCLES"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err, "NCCLGO_LEAK_CYCLES=%q", s)
		require.Positive(t, n, "NCCLGO_LEAK_CYCLES")
		return n
	}
	if testing.Short() || raceEnabled {
		return max(def/5, 1)
	}
	return def
}

// cpuLeakTolerance: goroutines and descriptors exactly back; a few idle
// threads more than after the warm-up (the Go runtime keeps the threads a
// busier moment started, and never ends them).
func cpuLeakTolerance() leakcheck.Tolerance {
	return leakcheck.Tolerance{Threads: 4, Settle: 5 * time.Second}
}

// loopback keeps the TCP bootstrap on 127.0.0.1, its logs discarded (the
// failure paths warn).
func loopback(timeout time.Duration) bootstrap.Options {
	return bootstrap.Options{Timeout: timeout, Addr: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)}
}

// leakCycle is one cycle of TestLeakCPU: an in-process network, a TCP
// root with two ranks, a Split of two device-less ranks and its Destroy,
// the roots of StartRoot and GetUniqueID ended by Close and by their
// context, and every 10th cycle the failure paths (leakFaults).
func leakCycle(t *testing.T, i int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	block := []byte(strconv.Itoa(i))

	// In-process bootstrap.
	nets, err := bootstrap.NewInProcessOptions(2, bootstrap.Options{Timeout: 20 * time.Second})
	require.NoError(t, err)
	gather(t, ctx, nets, block)

	// TCP bootstrap: a root and two ranks.
	opts := loopback(20 * time.Second)
	root, id, err := bootstrap.NewRoot(ctx, opts)
	require.NoError(t, err)
	conns, errs := testutil.OnEveryRank(2, func(r int) (bootstrap.Network, error) {
		return bootstrap.Init(ctx, id, r, 2, opts)
	})
	for r, err := range errs {
		require.NoError(t, err, "cycle %d rank %d", i, r)
	}
	require.NoError(t, root.Wait(ctx))
	require.NoError(t, root.Close())
	gather(t, ctx, conns, block)

	// Split views of device-less ranks (every 4th cycle over TCP).
	parents := fakeParents(t, 2, i%4 == 3)
	kids, errs := testutil.OnEveryRank(2, func(r int) (*Comm, error) {
		return parents[r].Split(ctx, 0, -r, nil)
	})
	for r, err := range errs {
		require.NoError(t, err, "cycle %d rank %d: Split", i, r)
	}
	destroyAll(t, parents...)
	destroyAll(t, kids...)

	// Roots nobody joins: closed, and ended by their context.
	sr, err := StartRoot(ctx, nil)
	require.NoError(t, err)
	require.NoError(t, sr.Close())
	gctx, gcancel := context.WithCancel(ctx)
	_, err = GetUniqueID(gctx)
	require.NoError(t, err)
	gcancel()

	if i%10 == 0 {
		leakFaults(t, ctx, i)
	}
}

// leakFaults is the failure paths of a cycle: a TCP rank whose peer never
// joins, an Abort while a Recv waits (in-process and TCP), and a Shrink in
// abort mode around a dead rank.
func leakFaults(t *testing.T, ctx context.Context, i int) {
	t.Helper()
	opts := loopback(20 * time.Second)
	root, id, err := bootstrap.NewRoot(ctx, opts)
	require.NoError(t, err)
	short, cancel := context.WithTimeout(ctx, 5*time.Millisecond)
	_, err = bootstrap.Init(short, id, 0, 2, opts)
	cancel()
	require.Error(t, err, "cycle %d: rank 0 of 2 alone", i)
	require.NoError(t, root.Close())

	inproc, err := bootstrap.NewInProcessOptions(2, bootstrap.Options{Timeout: 20 * time.Second})
	require.NoError(t, err)
	abortRecv(t, ctx, inproc)
	root, id, err = bootstrap.NewRoot(ctx, opts)
	require.NoError(t, err)
	conns, errs := testutil.OnEveryRank(2, func(r int) (bootstrap.Network, error) {
		return bootstrap.Init(ctx, id, r, 2, opts)
	})
	for r, err := range errs {
		require.NoError(t, err, "cycle %d rank %d", i, r)
	}
	require.NoError(t, root.Close())
	abortRecv(t, ctx, conns)

	parents, nets := hostOnlyRanks(t, 3, false)
	nets[1].Abort() // rank 1 is dead
	kids, errs := testutil.OnEveryRank(3, func(r int) (*Comm, error) {
		if r == 1 {
			return nil, nil
		}
		return parents[r].Shrink(ctx, []int{1}, nil, true)
	})
	for r, err := range errs {
		require.NoError(t, err, "cycle %d rank %d: Shrink", i, r)
	}
	destroyAll(t, kids...)
	destroyAll(t, parents...)
}

// abortRecv aborts rank 0 of nets while it waits in a Recv from rank 1,
// then closes both.
func abortRecv(t *testing.T, ctx context.Context, nets []bootstrap.Network) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := nets[0].Recv(ctx, 1, 9)
		done <- err
	}()
	time.Sleep(100 * time.Microsecond)
	nets[0].Abort()
	require.ErrorIs(t, <-done, bootstrap.ErrAborted)
	for _, n := range nets {
		require.NoError(t, n.Close())
	}
}

// gather runs an AllGather and a Barrier on every rank of nets, checks
// the blocks, then closes the ranks.
func gather(t *testing.T, ctx context.Context, nets []bootstrap.Network, block []byte) {
	t.Helper()
	all, errs := testutil.OnEveryRank(len(nets), func(r int) ([][]byte, error) {
		got, err := nets[r].AllGather(ctx, append(slices.Clip(block), byte(r)))
		if err == nil {
			err = nets[r].Barrier(ctx)
		}
		return got, err
	})
	for r := range nets {
		require.NoError(t, errs[r], "rank %d", r)
		for p, b := range all[r] {
			require.Equal(t, append(slices.Clip(block), byte(p)), b, "rank %d block %d", r, p)
		}
	}
	for r, n := range nets {
		require.NoError(t, n.Close(), "rank %d: Close", r)
	}
}

// TestLeakCPU runs NCCLGO_LEAK_CYCLES cycles of bootstrap and device-less
// setup and checks goroutines, descriptors and threads at their baseline.
func TestLeakCPU(t *testing.T) {
	if os.Getenv(leakEnvChild) != "" {
		t.Skip("child process")
	}
	n := leakCycles(t, 1000)
	ctx := context.Background()
	// Warm-up: the runtime's lazily started threads and the poller.
	for i := range 3 {
		leakCycle(t, i)
	}
	// The warm-up's roots of GetUniqueID end with their context, soon.
	base, err := leakcheck.Baseline(ctx, leakcheck.Probe{}, 100*time.Millisecond)
	require.NoError(t, err)
	start := time.Now()
	for i := range n {
		leakCycle(t, i)
	}
	now, err := leakcheck.Settle(ctx, base, leakcheck.Probe{}, cpuLeakTolerance())
	t.Logf("LEAK cycles=%d %s elapsed=%v (CPU: bootstrap in-process and TCP, Split, roots)", n, leakcheck.Figures(base, now), time.Since(start).Round(time.Millisecond))
	require.NoError(t, err)
}

// Environment of TestLeakMultiProcessCPU's children.
const (
	leakEnvChild = "NCCLGO_LEAK_TEST_CHILD" // "1" marks the child role
	leakEnvID    = "NCCLGO_LEAK_TEST_ID"
	leakEnvRank  = "NCCLGO_LEAK_TEST_RANK"
)

// TestLeakMultiProcessCPU runs a few cycles of two processes (this test
// binary re-executed) joining a root of this process over TCP; the parent,
// which holds the roots and starts the processes, returns to its baseline.
func TestLeakMultiProcessCPU(t *testing.T) {
	if os.Getenv(leakEnvChild) != "" {
		t.Skip("child process")
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NCCL_") && !strings.HasPrefix(kv, "NCCLGO_LEAK_TEST_") {
			env = append(env, kv)
		}
	}
	cycle := func(i int) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		root, err := StartRoot(ctx, &Options{BootstrapTimeout: 20 * time.Second})
		require.NoError(t, err)
		defer root.Close()
		outs := make([]bytes.Buffer, 2)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for r := range 2 {
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestLeakChild$", "-test.count=1", "-test.v")
			cmd.Env = append(slices.Clip(env), leakEnvChild+"=1", leakEnvID+"="+root.ID().String(), leakEnvRank+"="+strconv.Itoa(r))
			cmd.Stdout, cmd.Stderr = &outs[r], &outs[r]
			wg.Go(func() { errs[r] = cmd.Run() })
		}
		wg.Wait()
		for r := range 2 {
			require.NoError(t, errs[r], "cycle %d process %d:\n%s", i, r, outs[r].String())
			require.Contains(t, outs[r].String(), fmt.Sprintf("LEAKCHILD rank=%d ok", r), "cycle %d process %d", i, r)
		}
		require.NoError(t, root.Wait(ctx))
	}
	cycle(0) // warm-up
	base, err := leakcheck.Baseline(context.Background(), leakcheck.Probe{}, 100*time.Millisecond)
	require.NoError(t, err)
	n := 5
	if testing.Short() {
		n = 2
	}
	start := time.Now()
	for i := range n {
		cycle(i + 1)
	}
	now, err := leakcheck.Settle(context.Background(), base, leakcheck.Probe{}, cpuLeakTolerance())
	t.Logf("LEAK cycles=%d %s elapsed=%v (CPU: roots of 2 processes' TCP bootstrap)", n, leakcheck.Figures(base, now), time.Since(start).Round(time.Millisecond))
	require.NoError(t, err)
}

// TestLeakChild is a rank process of TestLeakMultiProcessCPU: it joins the
// root, gathers, closes, and checks its own goroutines and descriptors at
// their level before it joined.
func TestLeakChild(t *testing.T) {
	if os.Getenv(leakEnvChild) != "1" {
		t.Skip("only runs as a child of TestLeakMultiProcessCPU")
	}
	id, err := bootstrap.ParseUniqueID(os.Getenv(leakEnvID))
	require.NoError(t, err)
	rank, err := strconv.Atoi(os.Getenv(leakEnvRank))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	base, err := leakcheck.Take(leakcheck.Probe{})
	require.NoError(t, err)
	c, err := bootstrap.Init(ctx, id, rank, 2, loopback(20*time.Second))
	require.NoError(t, err)
	all, err := c.AllGather(ctx, []byte{byte(rank)})
	require.NoError(t, err)
	require.Equal(t, [][]byte{{0}, {1}}, all)
	require.NoError(t, c.Barrier(ctx))
	require.NoError(t, c.Close())
	now, err := leakcheck.Settle(ctx, base, leakcheck.Probe{}, cpuLeakTolerance())
	require.NoError(t, err)
	fmt.Printf("LEAKCHILD rank=%d ok %s\n", rank, leakcheck.Figures(base, now))
}
