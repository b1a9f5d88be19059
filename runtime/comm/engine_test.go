package comm

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/internal/diag"
	"github.com/ncclgo/ncclgo/runtime/bootstrap"
	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// TestAbortErrDuringDestroy: Abort and Err used to read Comm.flags while
// Destroy freed it (on a GPU, a read of freed pinned memory). Run with
// -race: the flags here are Go memory standing in for the pinned page.
func TestAbortErrDuringDestroy(t *testing.T) {
	for range 20 {
		c := fakeEngine(t, 0, 1)
		c.net = bootstrap.NewInProcess(1)[0]
		start := make(chan struct{})
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				<-start
				for range 200 {
					c.Abort()
					_ = c.ErrorCode()
				}
			})
		}
		close(start)
		require.NoError(t, c.Destroy())
		wg.Wait()
		assert.Nil(t, c.flags)
		assert.True(t, c.Aborted(), "the abort outlives Destroy")
		assert.Zero(t, c.ErrorCode())
	}
}

// TestContextDuringDestroy: Destroy cleared Comm.cctx (and kset) while
// Context, a call's stream check and the planner's kernel lookup could be
// reading them on other goroutines (run with -race; the context here is a
// stand-in whose release fails without a driver).
func TestContextDuringDestroy(t *testing.T) {
	c := fakeEngine(t, 0, 1)
	cx := &cuda.Context{}
	c.cctx = cx
	start := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		<-start
		for range 1000 {
			if got := c.Context(); got != cx {
				t.Errorf("Context() = %p, want %p", got, cx)
				return
			}
		}
	})
	close(start)
	_ = c.Destroy() // the stand-in's release fails
	wg.Wait()
	assert.Same(t, cx, c.Context(), "the released context, still c's")
}

// Fault records a device error and a lost peer on a host-only engine.
func TestFault(t *testing.T) {
	c := fakeEngine(t, 0, 2)
	c.Fault(2, nil)
	assert.EqualValues(t, 2, c.ErrorCode())
	assert.False(t, c.Aborted())
	c.Fault(0, &PeerLost{Rank: 1, PID: 7, Host: "h"})
	assert.True(t, c.Aborted())
	assert.Equal(t, 1, c.Lost().Rank)
	require.NoError(t, c.Destroy())
}

// The one wait loop: done at once, a step error, and the context's cause.
func TestPoll(t *testing.T) {
	require.NoError(t, poll(context.Background(), func() (bool, error) { return true, nil }))
	n := 0
	require.ErrorIs(t, poll(context.Background(), func() (bool, error) {
		n++
		if n == 3 {
			return false, ErrAborted
		}
		return false, nil
	}), ErrAborted)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	require.ErrorIs(t, poll(ctx, func() (bool, error) { return false, nil }), context.DeadlineExceeded)
	assert.Less(t, time.Since(start), 2*time.Second)
}

func TestDiagConnectionsInstalled(t *testing.T) {
	require.NotNil(t, diag.Connections, "package comm installs the hook")
	_, err := diag.Connections("x")
	assert.ErrorContains(t, err, "not a communicator")
	_, err = diag.Connections((*Engine)(nil))
	assert.ErrorContains(t, err, "not a communicator")
}
