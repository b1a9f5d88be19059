package ncclgo

import (
	"context"
	"github.com/ncclgo/ncclgo/internal/leakcheck"
	"github.com/ncclgo/ncclgo/internal/testutil"
	"github.com/ncclgo/ncclgo/runtime/config"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

func TestOptionsOverrideEnv(t *testing.T) {
	t.Setenv("NCCL_NCHANNELS", "4")
	t.Setenv("NCCL_DEBUG", "INFO")
	s, err := (&Options{Overrides: config.Overrides{NChannels: new(2)}, Logger: slog.New(slog.DiscardHandler)}).resolve()
	require.NoError(t, err)
	assert.Equal(t, 2, s.Config.NChannels)
	assert.Equal(t, config.DebugInfo, s.Config.Debug)
	assert.Equal(t, 0, s.P2PPerPeer, "0: the paths decide (runtime/comm/p2pchan.go)")
	s, err = (*Options)(nil).resolve()
	require.NoError(t, err)
	assert.Equal(t, 4, s.Config.NChannels)
	assert.False(t, s.UntrackedOneRankCopies, "the Go API's Wait waits for copies too")
	s, err = (&Options{UntrackedOneRankCopies: true}).resolve()
	require.NoError(t, err)
	assert.True(t, s.UntrackedOneRankCopies)
	_, err = (&Options{Overrides: config.Overrides{Algo: new("NOPE")}}).resolve()
	assert.ErrorIs(t, err, config.ErrInvalid)
}

// openFDs counts this process's open file descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	return len(ents)
}

// TestDebugFileClosed: the NCCL_DEBUG_FILE each resolution of the options
// opens used to stay open when no communicator took it: after a root
// stopped, and after a Split (with its own options) that failed before
// building the child.
func TestDebugFileClosed(t *testing.T) {
	t.Setenv("NCCL_COMM_ID", "127.0.0.1:0")
	t.Setenv("NCCL_DEBUG", "INFO")
	t.Setenv("NCCL_DEBUG_FILE", filepath.Join(t.TempDir(), "nccl.%p.log"))
	// No collection: the finalizer of an unreachable *os.File would close
	// a leaked descriptor and hide the leak.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	fds := openFDs(t)
	before := runtime.NumGoroutine()
	settleFDs := func(what string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for openFDs(t) > fds && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		assert.LessOrEqual(t, openFDs(t), fds, what) // an earlier test's leftovers may close some meanwhile
	}

	r, err := StartRoot(context.Background(), nil)
	require.NoError(t, err)
	require.NoError(t, r.Close())
	settleFDs("StartRoot, Close")

	ctx, cancel := context.WithCancel(context.Background())
	_, err = GetUniqueID(ctx)
	require.NoError(t, err)
	cancel()
	settleFDs("GetUniqueID, its context ended")
	leakcheck.WaitGoroutines(t, before)

	parents := fakeParents(t, 2, false)
	_, errs := testutil.OnEveryRank(2, func(r int) (*Comm, error) {
		return parents[r].Split(context.Background(), []int{0, -5}[r], 0, &Options{})
	})
	require.ErrorIs(t, errs[0], ErrInvalidArgument)
	require.ErrorIs(t, errs[1], ErrInvalidArgument)
	settleFDs("Split with options, failed")
	destroyAll(t, parents...)
}
