package ncclgo

import (
	"context"
	"github.com/stretchr/testify/require"
	"sync"
	"testing"
)

// TestGPUAbortErrDuringDestroy: Abort and Err from other goroutines while
// Destroy frees the pinned flags (run the race-enabled binary too).
func TestGPUAbortErrDuringDestroy(t *testing.T) {
	gpuOrSkip(t)
	comms, err := InitAll(context.Background(), []int{0, 0}, nil)
	require.NoError(t, err)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for _, c := range comms {
		for range 2 {
			wg.Go(func() {
				<-start
				for range 1000 {
					c.Abort()
					_ = c.Err()
				}
			})
		}
	}
	close(start)
	for _, c := range comms {
		require.NoError(t, c.Destroy())
	}
	wg.Wait()
	for _, c := range comms {
		require.ErrorIs(t, c.Err(), ErrAborted)
	}
}
