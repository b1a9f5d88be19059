package bootstrap

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/internal/syncbuf"
)

var quietLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

// lockedBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type lockedBuffer = syncbuf.Buffer

// loopbackOpts returns options that keep everything on 127.0.0.1.
func loopbackOpts(timeout time.Duration) Options {
	return Options{Timeout: timeout, Addr: "127.0.0.1:0", Logger: quietLogger}
}

// initTCP starts a root and n ranks in goroutines and returns the ranks.
func initTCP(t *testing.T, n int, opts Options) []Network {
	t.Helper()
	ctx := context.Background()
	root, id, err := NewRoot(ctx, opts)
	require.NoError(t, err)
	t.Cleanup(func() { root.Close() })
	nets := make([]Network, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			c, err := Init(ctx, id, r, n, opts)
			errs[r] = err
			if err == nil {
				nets[r] = c
			}
		})
	}
	wg.Wait()
	for r := range n {
		require.NoError(t, errs[r], "rank %d", r)
	}
	require.NoError(t, root.Wait(ctx))
	t.Cleanup(func() {
		for _, c := range nets {
			c.Close()
		}
	})
	return nets
}

// onAll runs fn for every rank concurrently and fails on any error.
func onAll(t *testing.T, nets []Network, fn func(nw Network) error) {
	t.Helper()
	errs := make([]error, len(nets))
	var wg sync.WaitGroup
	for i, nw := range nets {
		wg.Go(func() { errs[i] = fn(nw) })
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "rank %d", i)
	}
}

func block(rank, round int) []byte {
	b := make([]byte, rank*3+round) // any size, including empty
	for i := range b {
		b[i] = byte(rank*31 + round*7 + i)
	}
	return b
}

// exercise runs allgather, barrier and send/recv with out-of-order tags on
// every rank of nets.
func exercise(t *testing.T, nets []Network) {
	t.Helper()
	n := len(nets)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	onAll(t, nets, func(nw Network) error {
		r := nw.Rank()
		if nw.Size() != n {
			return fmt.Errorf("size %d, want %d", nw.Size(), n)
		}
		for round := range 3 {
			all, err := nw.AllGather(ctx, block(r, round))
			if err != nil {
				return err
			}
			for p := range n {
				if !bytes.Equal(all[p], block(p, round)) {
					return fmt.Errorf("allgather round %d: block of rank %d = %v, want %v", round, p, all[p], block(p, round))
				}
			}
			if err := nw.Barrier(ctx); err != nil {
				return err
			}
		}
		// Send tags 3,2,1,0 (and tag 0 twice) to every peer, receive in
		// order 0,1,2,3: early tags wait in the queue; same tag stays FIFO.
		for p := range n {
			for tag := 3; tag >= 0; tag-- {
				if err := nw.Send(ctx, p, tag, fmt.Appendf(nil, "%d->%d tag %d", r, p, tag)); err != nil {
					return err
				}
			}
			if err := nw.Send(ctx, p, 0, fmt.Appendf(nil, "%d->%d tag 0 again", r, p)); err != nil {
				return err
			}
		}
		for p := range n {
			for tag := range 4 {
				got, err := nw.Recv(ctx, p, tag)
				if err != nil {
					return err
				}
				if want := fmt.Sprintf("%d->%d tag %d", p, r, tag); string(got) != want {
					return fmt.Errorf("recv from %d tag %d: %q, want %q", p, tag, got, want)
				}
			}
			got, err := nw.Recv(ctx, p, 0)
			if err != nil {
				return err
			}
			if want := fmt.Sprintf("%d->%d tag 0 again", p, r); string(got) != want {
				return fmt.Errorf("second recv from %d tag 0: %q, want %q", p, got, want)
			}
		}
		return nw.Barrier(ctx)
	})
}
