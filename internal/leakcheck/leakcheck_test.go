package leakcheck

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// parkedForLeakTest blocks until stop closes: a goroutine with a
// recognisable stack.
func parkedForLeakTest(stop chan struct{}) { <-stop }

func TestLeakNamed(t *testing.T) {
	var dev, pin atomic.Uint64
	dev.Store(1 << 30)
	p := Probe{DeviceMem: func() (uint64, error) { return dev.Load(), nil }, Pinned: pin.Load}
	tol := Tolerance{Threads: 4, DeviceMem: 1 << 20, Settle: 200 * time.Millisecond}
	// A quiet baseline: a goroutine of an earlier test still ending
	// between a plain Take and the check would hide the parked one (the
	// count is what is compared), as seen with -count=2.
	base, err := Baseline(context.Background(), p, 100*time.Millisecond)
	require.NoError(t, err)
	require.Greater(t, len(base.FDs), 2, "stdin, stdout, stderr at least")
	require.Greater(t, base.Threads, 0)

	stop := make(chan struct{})
	go parkedForLeakTest(stop)
	path := filepath.Join(t.TempDir(), "leaked-file")
	f, err := os.Create(path)
	require.NoError(t, err)
	dev.Add(2 << 20)
	pin.Add(4096)

	now, err := Settle(context.Background(), base, p, tol)
	var leak *Leak
	require.ErrorAs(t, err, &leak)
	assert.ErrorIs(t, err, ErrLeak)
	msg := err.Error()
	assert.Contains(t, msg, "parkedForLeakTest")
	assert.Contains(t, msg, "[chan receive]")
	assert.Contains(t, msg, "-> "+path)
	assert.Contains(t, msg, "device memory in use")
	assert.Contains(t, msg, "pinned host memory: 4096 bytes")
	assert.NotContains(t, msg, "OS threads")
	assert.Len(t, leak.Problems, 4)
	assert.Contains(t, Figures(base, now), "pinned 0→4096")

	// Released in the background: Settle waits for it.
	go func() {
		time.Sleep(50 * time.Millisecond)
		close(stop)
		f.Close()
		dev.Store(1<<30 + 1<<19) // within the slack
		pin.Store(0)
	}()
	tol.Settle = 5 * time.Second
	now, err = Settle(context.Background(), base, p, tol)
	require.NoError(t, err)
	assert.Equal(t, base.Goroutines, now.Goroutines)
	assert.Equal(t, len(base.FDs), len(now.FDs))
	assert.True(t, strings.HasPrefix(Figures(base, now), "goroutines "), Figures(base, now))
}

func TestSettleContext(t *testing.T) {
	calls := 0
	p := Probe{Pinned: func() uint64 { calls++; return uint64(calls) }}
	base, err := Take(p)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	_, err = Settle(ctx, base, p, Tolerance{Settle: time.Hour})
	assert.ErrorIs(t, err, ErrLeak)
	assert.ErrorIs(t, err, context.DeadlineExceeded)

	boom := errors.New("boom")
	_, err = Take(Probe{DeviceMem: func() (uint64, error) { return 0, boom }})
	assert.ErrorIs(t, err, boom)
}

// recorder is a testing.TB that keeps what Errorf says.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func TestWaitGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	// A goroutine that ends soon is waited for.
	done := make(chan struct{})
	go func() { time.Sleep(20 * time.Millisecond); close(done) }()
	r := &recorder{TB: t}
	WaitGoroutines(r, before)
	assert.Empty(t, r.errs)
	<-done
	// One that outlives the wait is reported, with its stack.
	if testing.Short() {
		t.Skip("waits GoroutineSettle")
	}
	// The count is taken again just before: under load another
	// goroutine of the process (the test framework's) may have ended
	// since, which would hide the parked one from a count taken earlier.
	before = runtime.NumGoroutine()
	stop := make(chan struct{})
	go parkedForWaitGoroutines(stop)
	WaitGoroutines(r, before)
	close(stop)
	require.Len(t, r.errs, 1)
	assert.Contains(t, r.errs[0], fmt.Sprintf("goroutines: %d before,", before))
	assert.Contains(t, r.errs[0], "parkedForWaitGoroutines")
}

func parkedForWaitGoroutines(stop chan struct{}) { <-stop }
