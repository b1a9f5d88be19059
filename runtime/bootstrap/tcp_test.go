package bootstrap

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/internal/leakcheck"
)

func TestTCPCollectives(t *testing.T) {
	for _, n := range []int{1, 2, 4, 8} {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			exercise(t, initTCP(t, n, loopbackOpts(20*time.Second)))
		})
	}
}

func TestTCPIPv6Loopback(t *testing.T) {
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	ln.Close()
	opts := loopbackOpts(10 * time.Second)
	opts.Addr = "[::1]:0"
	nets := initTCP(t, 3, opts)
	assert.True(t, strings.HasPrefix(nets[1].(*Conn).PeerAddr(2), "[::1]:"), nets[1].(*Conn).PeerAddr(2))
	exercise(t, nets)
}

func TestTCPCommIDEnv(t *testing.T) {
	// Reserve a free port, then let NCCL_COMM_ID name it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	t.Setenv("NCCL_COMM_ID", addr)
	t.Setenv("NCCL_BOOTSTRAP_TIMEOUT", "10")
	root, id, err := NewRoot(context.Background(), Options{Logger: quietLogger})
	require.NoError(t, err)
	defer root.Close()
	assert.Equal(t, addr, id.Addr())
	assert.Equal(t, addr, root.Addr().String())
	assert.Equal(t, 10*time.Second, root.timeout)
}

func TestTCPWakeups(t *testing.T) {
	testWakeups(t, func(t *testing.T, n int, timeout time.Duration) []Network {
		return initTCP(t, n, loopbackOpts(timeout))
	})
}

func TestInitArgs(t *testing.T) {
	ctx := context.Background()
	root, id, err := NewRoot(ctx, loopbackOpts(5*time.Second))
	require.NoError(t, err)
	defer root.Close()
	_, err = Init(ctx, id, 4, 4, Options{})
	require.EqualError(t, err, "bootstrap: rank 4 out of range for 4 ranks (want 0..3)")
	_, err = Init(ctx, id, -1, 4, Options{})
	require.ErrorContains(t, err, "rank -1 out of range for 4 ranks")
	_, err = Init(ctx, id, 0, 0, Options{})
	require.ErrorContains(t, err, "nRanks=0: want 1..1048576")
	_, err = Init(ctx, UniqueID{}, 0, 1, Options{})
	require.ErrorIs(t, err, ErrInvalidID)
	_, err = Init(ctx, id, 0, 1, Options{Timeout: -time.Second})
	require.ErrorContains(t, err, "Options.Timeout=-1s: want 1ms..168h0m0s")
	t.Setenv("NCCL_BOOTSTRAP_TIMEOUT", "soon")
	_, err = Init(ctx, id, 0, 1, Options{})
	require.ErrorContains(t, err, `NCCL_BOOTSTRAP_TIMEOUT="soon"`)
}

// startRanks runs Init for the given ranks concurrently and returns the
// results by rank.
func startRanks(ctx context.Context, id UniqueID, ranks []int, n int, opts Options) ([]*Conn, []error) {
	conns := make([]*Conn, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for _, r := range ranks {
		wg.Go(func() { conns[r], errs[r] = Init(ctx, id, r, n, opts) })
	}
	wg.Wait()
	return conns, errs
}

func TestMissingRank(t *testing.T) {
	// Rank 3 never shows up.
	t.Run("ranks-time-out-first", func(t *testing.T) {
		before := runtime.NumGoroutine()
		ctx := context.Background()
		root, id, err := NewRoot(ctx, loopbackOpts(2*time.Second))
		require.NoError(t, err)
		start := time.Now()
		conns, errs := startRanks(ctx, id, []int{0, 1, 2}, 4, loopbackOpts(time.Second))
		assert.Less(t, time.Since(start), 2500*time.Millisecond)
		for r := range 3 {
			require.Nil(t, conns[r])
			require.ErrorIs(t, errs[r], ErrTimeout, "rank %d", r)
			require.EqualError(t, errs[r], fmt.Sprintf("bootstrap: rank %d: timed out after 1s waiting for ranks [3] of 4 to check in", r))
			var te *TimeoutError
			require.ErrorAs(t, errs[r], &te)
			assert.Equal(t, []int{3}, te.Missing)
			assert.Equal(t, 4, te.NRanks)
		}
		// The root reports it too, once its own timeout expires.
		err = root.Wait(ctx)
		require.ErrorIs(t, err, ErrTimeout)
		require.EqualError(t, err, "bootstrap: timed out after 2s waiting for ranks [3] of 4 to check in")
		require.NoError(t, root.Close())
		leakcheck.WaitGoroutines(t, before)
	})
	t.Run("root-times-out-first", func(t *testing.T) {
		ctx := context.Background()
		root, id, err := NewRoot(ctx, loopbackOpts(700*time.Millisecond))
		require.NoError(t, err)
		defer root.Close()
		start := time.Now()
		_, errs := startRanks(ctx, id, []int{0, 2}, 4, loopbackOpts(10*time.Second))
		assert.Less(t, time.Since(start), 3*time.Second, "ranks should hear from the root, not wait for their own timeout")
		for _, r := range []int{0, 2} {
			require.ErrorIs(t, errs[r], ErrTimeout)
			require.ErrorContains(t, errs[r], "timed out after 700ms waiting for ranks [1 3] of 4 to check in")
		}
		require.EqualError(t, root.Wait(ctx), "bootstrap: timed out after 700ms waiting for ranks [1 3] of 4 to check in")
	})
	t.Run("caller-deadline", func(t *testing.T) {
		root, id, err := NewRoot(context.Background(), loopbackOpts(10*time.Second))
		require.NoError(t, err)
		defer root.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err = Init(ctx, id, 1, 2, loopbackOpts(10*time.Second))
		require.ErrorIs(t, err, ErrTimeout)
		require.ErrorContains(t, err, "waiting for ranks [0] of 2 to check in")
	})
	t.Run("no-root", func(t *testing.T) {
		ctx := context.Background()
		root, id, err := NewRoot(ctx, loopbackOpts(time.Second))
		require.NoError(t, err)
		require.NoError(t, root.Close()) // nobody listens any more
		_, err = Init(ctx, id, 0, 2, loopbackOpts(300*time.Millisecond))
		require.ErrorIs(t, err, ErrTimeout)
		require.ErrorContains(t, err, "connecting to root at "+id.Addr())
	})
	t.Run("ctx-cancel", func(t *testing.T) {
		before := runtime.NumGoroutine()
		root, id, err := NewRoot(context.Background(), loopbackOpts(10*time.Second))
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		go func() { time.Sleep(100 * time.Millisecond); cancel() }()
		_, err = Init(ctx, id, 0, 2, loopbackOpts(10*time.Second))
		require.ErrorIs(t, err, context.Canceled)
		require.NotErrorIs(t, err, ErrTimeout)
		require.NoError(t, root.Close())
		require.ErrorIs(t, root.Wait(context.Background()), ErrClosed)
		leakcheck.WaitGoroutines(t, before)
	})
	t.Run("root-ctx-cancel", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		root, _, err := NewRoot(ctx, loopbackOpts(10*time.Second))
		require.NoError(t, err)
		cancel()
		select {
		case <-root.Done():
		case <-time.After(2 * time.Second):
			t.Fatal("root ignored ctx cancellation")
		}
		require.ErrorIs(t, root.Wait(context.Background()), context.Canceled)
		require.NoError(t, root.Close())
	})
}

// strangers connects to addr and misbehaves; it returns once every
// stranger's connection was closed by the other side.
func strangers(t *testing.T, addr string) {
	t.Helper()
	bad := map[string][]byte{}
	h := hello{magic: 0x1234, kind: helloCheckIn, rank: 0, nRanks: 4, addr: "127.0.0.1:1"}.encode()
	bad["wrong-magic"] = append(binary.BigEndian.AppendUint32(nil, uint32(len(h))), h...)
	bad["http"] = []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	bad["short"] = []byte{0, 0, 0, 3, 1, 2, 3}
	names := make([]string, 0, len(bad))
	for k := range bad {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, name := range names {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		_, err = c.Write(bad[name])
		require.NoError(t, err, name)
		require.NoError(t, c.SetReadDeadline(time.Now().Add(3*time.Second)))
		var buf [64]byte
		n, err := c.Read(buf[:])
		assert.Equal(t, 0, n, "%s: stranger got an answer", name)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Errorf("%s: connection not closed", name)
		}
		c.Close()
	}
}

func TestStrangersRejected(t *testing.T) {
	before := runtime.NumGoroutine()
	ctx := context.Background()
	logs := &lockedBuffer{}
	opts := loopbackOpts(10 * time.Second)
	opts.Logger = slog.New(slog.NewTextHandler(logs, nil))
	root, id, err := NewRoot(ctx, opts)
	require.NoError(t, err)
	// An idle stranger that never says anything must not hold anything up.
	idle, err := net.Dial("tcp", id.Addr())
	require.NoError(t, err)
	defer idle.Close()

	const n = 4
	conns := make([]*Conn, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	wg.Go(func() { conns[0], errs[0] = Init(ctx, id, 0, n, opts) })
	strangers(t, id.Addr()) // while rank 0 is waiting in check-in
	for r := 1; r < n; r++ {
		wg.Go(func() { conns[r], errs[r] = Init(ctx, id, r, n, opts) })
	}
	wg.Wait()
	for r := range n {
		require.NoError(t, errs[r], "rank %d", r)
	}
	require.NoError(t, root.Wait(ctx))
	require.NoError(t, root.Close())
	assert.Equal(t, 3, strings.Count(logs.String(), "level=WARN msg=\"bootstrap root: rejected connection\""), logs.String())
	assert.Contains(t, logs.String(), "bad magic")
	assert.Contains(t, logs.String(), "subsys=BOOTSTRAP")

	// Strangers at a rank's own listener are rejected the same way.
	strangers(t, conns[2].PeerAddr(2))
	nets := make([]Network, n)
	for i, c := range conns {
		nets[i] = c
	}
	exercise(t, nets)
	for _, c := range conns {
		require.NoError(t, c.Close())
	}
	idle.Close()
	leakcheck.WaitGoroutines(t, before)
}

func TestRootRejectsDuplicateRank(t *testing.T) {
	ctx := context.Background()
	opts := loopbackOpts(5 * time.Second)
	root, id, err := NewRoot(ctx, opts)
	require.NoError(t, err)
	defer root.Close()

	// Rank 0 checks in by hand, and asks for the status so that we know the
	// root has registered it.
	raw := dialHello(t, id.Addr(), id, hello{kind: helloCheckIn, rank: 0, nRanks: 2, addr: "127.0.0.1:9"})
	defer raw.Close()
	require.NoError(t, writeFrame(raw, []byte{msgQuery}))
	b, err := readFrame(raw, 1024)
	require.NoError(t, err)
	st, err := decodeStatus(b)
	require.NoError(t, err)
	assert.Equal(t, status{nRanks: 2, nMissing: 1, missing: []int{1}, afterMS: st.afterMS}, st)

	_, err = Init(ctx, id, 0, 2, opts)
	require.ErrorIs(t, err, ErrRejected)
	require.ErrorContains(t, err, "rank 0 checked in twice")
	_, err = Init(ctx, id, 1, 3, opts)
	require.ErrorIs(t, err, ErrRejected)
	require.ErrorContains(t, err, "rank 1 says 3 ranks, others said 2 (is another process")
	c1, err := Init(ctx, id, 1, 2, opts)
	require.NoError(t, err)
	defer c1.Close()
	assert.Equal(t, "127.0.0.1:9", c1.PeerAddr(0))
	b, err = readFrame(raw, 1024)
	require.NoError(t, err)
	// Rank 0's table: itself, its finger rank 1, and rank 1 again (0-1):
	// the rank that dials it, token only.
	table, err := decodeTable(b, tableLen(2))
	require.NoError(t, err)
	assert.Equal(t, []tableEntry{{addr: "127.0.0.1:9"}, {addr: c1.PeerAddr(1), token: c1.token}, {token: c1.token}}, table)
}

func TestCloseLeavesNoGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	func() {
		ctx := context.Background()
		opts := loopbackOpts(10 * time.Second)
		root, id, err := NewRoot(ctx, opts)
		require.NoError(t, err)
		defer root.Close()
		conns, errs := startRanks(ctx, id, []int{0, 1, 2, 3}, 4, opts)
		nets := make([]Network, 4)
		for r := range 4 {
			require.NoError(t, errs[r])
			nets[r] = conns[r]
		}
		exercise(t, nets)
		// A Recv left blocked and an Abort before Close must not leak
		// either.
		res := make(chan error, 1)
		go func() { _, err := conns[0].Recv(ctx, 3, 77); res <- err }()
		time.Sleep(20 * time.Millisecond)
		conns[1].Abort()
		for _, c := range conns {
			require.NoError(t, c.Close())
			require.NoError(t, c.Close()) // idempotent
		}
		require.ErrorIs(t, <-res, ErrClosed)
		_, err = conns[0].AllGather(ctx, nil)
		require.ErrorIs(t, err, ErrClosed)
		_, err = conns[1].Recv(ctx, 0, 0)
		require.ErrorIs(t, err, ErrAborted)
	}()
	leakcheck.WaitGoroutines(t, before)
}
