package comm

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/internal/testutil"
	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// A rank whose window is invalid (past its allocation, or at 0) fails
// RegisterWindow after the exchange, so its peers fail at once too
// (rather than waiting in the exchange for a rank that left it), and the
// next registration of every rank pairs with its peers'.
func TestRegisterWindowLocalErrorFailsEveryRank(t *testing.T) {
	for _, c := range []struct {
		name string
		buf  func(r int) cuda.DevicePtr
		want string
	}{
		{"past its allocation", func(r int) cuda.DevicePtr {
			if r == 1 {
				return fakeBase(r) + fakeAlloc - 8
			}
			return fakeBase(r)
		}, "runs past its allocation"},
		{"null buffer", func(r int) cuda.DevicePtr {
			if r == 1 {
				return 0
			}
			return fakeBase(r)
		}, "buf=0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			es, fs := windowEngines(t, 3, []int{1, 2, 3})
			defer destroyAll(t, es...)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			start := time.Now()
			_, errs := testutil.OnEveryRank(3, func(r int) (*Window, error) { return es[r].RegisterWindow(ctx, c.buf(r), 64) })
			assert.Less(t, time.Since(start), 4*time.Second, "every rank returns at once")
			require.ErrorIs(t, errs[1], ErrInvalidArgument)
			assert.ErrorContains(t, errs[1], c.want)
			for _, r := range []int{0, 2} {
				require.Error(t, errs[r], "rank %d", r)
				assert.NotErrorIs(t, errs[r], context.DeadlineExceeded, "rank %d waited for rank 1", r)
				assert.ErrorIs(t, errs[r], ErrWindowMismatch, "rank %d", r)
				assert.ErrorContains(t, errs[r], "rank 1", "rank %d's error names the rank", r)
			}
			for r := range 3 {
				assert.Empty(t, es[r].win.live, "rank %d", r)
				assert.Zero(t, fs[r].nOpen, "rank %d", r)
			}
			// The next registration pairs up on every rank.
			ws, errs := register(es, fakeBase, func(int) uint64 { return 64 })
			require.NoError(t, errors.Join(errs...))
			for r := range 3 {
				assert.Equal(t, 0, ws[r].Row(), "rank %d", r)
			}
		})
	}
}

// Abort ends a registration or deregistration that waits for peers
// which never come, and Destroy after it returns: neither waits on the
// caller's context alone.
func TestAbortEndsWindowExchange(t *testing.T) {
	for _, withChild := range []bool{false, true} {
		es, _ := windowEngines(t, 2, []int{1, 2})
		var kids []*Engine
		if withChild {
			// A Split child rides on the parent's network: Abort then
			// leaves the network open for it.
			ks, errs := testutil.OnEveryRank(2, func(r int) (*Engine, error) { return split(context.Background(), es[r], 0, r) })
			require.NoError(t, errors.Join(errs...))
			kids = ks
		}
		done := make(chan error, 1)
		go func() {
			_, err := es[0].RegisterWindow(context.Background(), fakeBase(0), 64)
			done <- err
		}()
		time.Sleep(100 * time.Millisecond) // rank 0 waits in the exchange; rank 1 never registers
		es[0].Abort()
		select {
		case err := <-done:
			assert.Error(t, err, "child=%v", withChild)
		case <-time.After(5 * time.Second):
			t.Fatalf("child=%v: RegisterWindow still waits after Abort", withChild)
		}
		destroyed := make(chan error, 1)
		go func() { destroyed <- es[0].Destroy() }()
		select {
		case <-destroyed:
		case <-time.After(5 * time.Second):
			t.Fatalf("child=%v: Destroy after Abort hangs", withChild)
		}
		es[1].Abort()
		_ = es[1].Destroy()
		for _, k := range kids {
			k.Abort()
			_ = k.Destroy()
		}
	}
}
