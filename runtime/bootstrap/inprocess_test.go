package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestInProcessCollectives(t *testing.T) {
	for _, n := range []int{1, 2, 4, 8} {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			nets := NewInProcess(n)
			defer func() {
				for _, nw := range nets {
					require.NoError(t, nw.Close())
				}
			}()
			exercise(t, nets)
		})
	}
}

func TestInProcessArgs(t *testing.T) {
	_, err := NewInProcessOptions(0, Options{})
	require.Error(t, err)
	assert.Panics(t, func() { NewInProcess(0) })
	nets := NewInProcess(2)
	err = nets[0].Send(context.Background(), 2, 0, nil)
	require.ErrorContains(t, err, "peer rank 2 out of range for 2 ranks")
	_, err = nets[0].Recv(context.Background(), -1, 0)
	require.ErrorContains(t, err, "peer rank -1 out of range")
}

// testWakeups checks that Abort, ctx cancellation, the timeout and a closed
// peer each end a blocked Recv promptly.
func testWakeups(t *testing.T, mk func(t *testing.T, n int, timeout time.Duration) []Network) {
	t.Run("abort", func(t *testing.T) {
		nets := mk(t, 2, 10*time.Second)
		res := make(chan error, 2)
		go func() { _, err := nets[0].Recv(context.Background(), 1, 5); res <- err }()
		go func() { res <- nets[0].Barrier(context.Background()) }()
		time.Sleep(50 * time.Millisecond)
		start := time.Now()
		nets[0].Abort()
		for range 2 {
			select {
			case err := <-res:
				require.ErrorIs(t, err, ErrAborted)
			case <-time.After(2 * time.Second):
				t.Fatal("Abort did not wake the waiters")
			}
		}
		assert.Less(t, time.Since(start), time.Second)
		// Later calls fail at once too.
		_, err := nets[0].Recv(context.Background(), 1, 5)
		require.ErrorIs(t, err, ErrAborted)
		require.ErrorIs(t, nets[0].Send(context.Background(), 1, 5, nil), ErrAborted)
	})
	t.Run("ctx", func(t *testing.T) {
		nets := mk(t, 2, 10*time.Second)
		ctx, cancel := context.WithCancel(context.Background())
		res := make(chan error, 1)
		go func() { _, err := nets[1].Recv(ctx, 0, 1); res <- err }()
		time.Sleep(50 * time.Millisecond)
		cancel()
		select {
		case err := <-res:
			require.ErrorIs(t, err, context.Canceled)
			assert.ErrorContains(t, err, "rank 1: recv from rank 0 tag 1")
		case <-time.After(2 * time.Second):
			t.Fatal("ctx cancel did not wake Recv")
		}
		// A message sent after the cancelled Recv is still delivered.
		require.NoError(t, nets[0].Send(context.Background(), 1, 1, []byte("late")))
		got, err := nets[1].Recv(context.Background(), 0, 1)
		require.NoError(t, err)
		assert.Equal(t, "late", string(got))
	})
	t.Run("timeout", func(t *testing.T) {
		nets := mk(t, 2, 200*time.Millisecond)
		start := time.Now()
		_, err := nets[1].Recv(context.Background(), 0, 9)
		require.ErrorIs(t, err, ErrTimeout)
		assert.ErrorContains(t, err, "bootstrap: rank 1: recv from rank 0 tag 9: timed out after 200ms")
		assert.Less(t, time.Since(start), 2*time.Second)
		var te *TimeoutError
		require.True(t, errors.As(err, &te))
	})
	t.Run("peer-closed", func(t *testing.T) {
		nets := mk(t, 2, 10*time.Second)
		require.NoError(t, nets[0].Send(context.Background(), 1, 3, []byte("bye")))
		res := make(chan error, 1)
		got, err := nets[1].Recv(context.Background(), 0, 3)
		require.NoError(t, err)
		require.Equal(t, "bye", string(got))
		go func() { _, err := nets[1].Recv(context.Background(), 0, 3); res <- err }()
		time.Sleep(50 * time.Millisecond)
		require.NoError(t, nets[0].Close())
		select {
		case err := <-res:
			require.ErrorIs(t, err, ErrPeerClosed)
		case <-time.After(3 * time.Second):
			t.Fatal("peer Close did not wake Recv")
		}
	})
}

func TestInProcessWakeups(t *testing.T) {
	testWakeups(t, func(t *testing.T, n int, timeout time.Duration) []Network {
		nets, err := NewInProcessOptions(n, Options{Timeout: timeout})
		require.NoError(t, err)
		t.Cleanup(func() {
			for _, nw := range nets {
				nw.Close()
			}
		})
		return nets
	})
}

func TestInProcessAbortOneRankAllGather(t *testing.T) {
	// Rank 1 never joins; rank 0 blocks in AllGather until Abort.
	nets := NewInProcess(2)
	res := make(chan error, 1)
	go func() { _, err := nets[0].AllGather(context.Background(), []byte("x")); res <- err }()
	time.Sleep(20 * time.Millisecond)
	nets[0].Abort()
	require.ErrorIs(t, <-res, ErrAborted)
	require.NoError(t, nets[0].Close())
	require.NoError(t, nets[1].Close())
}
