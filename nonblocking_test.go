package ncclgo

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// TestPendingLifecycle drives the nonblocking machinery with an init that
// waits for a signal: Err is ErrInProgress until it ends, Wait honours its
// context, and the result comes out once.
func TestPendingLifecycle(t *testing.T) {
	release := make(chan struct{})
	want := fakeComm(t, 0, 1)
	p := startPending(context.Background(), func(ctx context.Context) (*Comm, error) {
		select {
		case <-release:
			return want, nil
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}, func(c *Comm) { c.Abort() })
	require.ErrorIs(t, p.Err(), ErrInProgress)
	short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := p.Wait(short)
	require.ErrorIs(t, err, ErrInProgress)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	close(release)
	c, err := p.Wait(context.Background())
	require.NoError(t, err)
	require.Same(t, want, c)
	require.NoError(t, p.Err())
	<-p.Done()
	// Abort after success aborts the communicator.
	p.Abort()
	require.ErrorIs(t, want.Err(), ErrAborted)
}

// TestPendingAbort: Abort ends an initialisation in progress with
// ErrAborted, promptly.
func TestPendingAbort(t *testing.T) {
	p := startPending(context.Background(), func(ctx context.Context) (*Comm, error) {
		<-ctx.Done()
		return nil, context.Cause(ctx)
	}, func(c *Comm) { c.Abort() })
	start := time.Now()
	p.Abort()
	_, err := p.Wait(context.Background())
	require.ErrorIs(t, err, ErrAborted)
	require.Less(t, time.Since(start), time.Second)
	require.ErrorIs(t, p.Err(), ErrAborted)
}

// TestStartInitRankErrors: errors of the real init come back through Wait
// and Err; StartInitRank itself never blocks.
func TestStartInitRankErrors(t *testing.T) {
	start := time.Now()
	p := StartInitRank(context.Background(), 1<<32+1, UniqueID{}, 0, 0, nil)
	require.Less(t, time.Since(start), 100*time.Millisecond)
	_, err := p.Wait(context.Background())
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.ErrorIs(t, p.Err(), ErrInvalidArgument)
	if cuda.Init() == nil {
		t.Skip("a CUDA driver is present: the rest covers machines without one")
	}
	pa := StartInitAll(context.Background(), []int{0, 0}, nil)
	_, err = pa.Wait(context.Background())
	require.True(t, errors.Is(err, cuda.ErrNoDriver), "%v", err)
}

// TestFinalize: after Finalize new calls fail with ErrInvalidUsage, Wait
// and Destroy still work, and a device error is reported.
func TestFinalize(t *testing.T) {
	c := fakeComm(t, 0, 2)
	s := cuda.WrapStream(nil, 0x100)
	require.NoError(t, c.Finalize(context.Background()))
	err := c.AllReduce(1, 2, 3, Float32, Sum, s)
	require.ErrorIs(t, err, ErrInvalidUsage)
	require.ErrorContains(t, err, "finalized")
	require.ErrorIs(t, NewGroup().Send(c, 1, 3, Float32, 1, s), ErrInvalidUsage)
	require.NoError(t, c.Finalize(context.Background()), "Finalize again")
	require.NoError(t, c.Wait(context.Background()))
	require.NoError(t, c.Destroy())
	require.ErrorIs(t, c.Finalize(context.Background()), ErrDestroyed)

	// A device error recorded by a kernel comes out of Finalize.
	c = fakeComm(t, 1, 2)
	c.e.Fault(2, nil) // what a kernel stores in the error flag
	err = c.Finalize(context.Background())
	var de *DeviceError
	require.ErrorAs(t, err, &de)
	assert.Equal(t, 1, de.Rank)
	assert.ErrorContains(t, err, "rank 1: Finalize")
}
