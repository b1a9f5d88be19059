package testutil

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/runtime/bootstrap"
)

func TestOnEveryRank(t *testing.T) {
	// Every rank runs at once: each waits for all to have started.
	const n = 4
	var started atomic.Int32
	out, errs := OnEveryRank(n, func(r int) (string, error) {
		started.Add(1)
		deadline := time.Now().Add(10 * time.Second)
		for started.Load() < n {
			if time.Now().After(deadline) {
				return "", errors.New("not every rank started")
			}
			time.Sleep(time.Millisecond)
		}
		if r == 2 {
			return "", fmt.Errorf("rank %d failed", r)
		}
		return fmt.Sprint(r), nil
	})
	assert.Equal(t, []string{"0", "1", "", "3"}, out)
	for r, err := range errs {
		if r == 2 {
			assert.EqualError(t, err, "rank 2 failed")
		} else {
			assert.NoError(t, err, r)
		}
	}
}

func TestNetworks(t *testing.T) {
	for _, tcp := range []bool{false, true} {
		t.Run(fmt.Sprint("tcp=", tcp), func(t *testing.T) {
			const n = 3
			nets := Networks(t, n, tcp, bootstrap.Options{Timeout: 20 * time.Second, Addr: "127.0.0.1:0"})
			require.Len(t, nets, n)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, errs := OnEveryRank(n, func(r int) (struct{}, error) {
				return struct{}{}, nets[r].Barrier(ctx)
			})
			for r, err := range errs {
				require.NoError(t, err, "rank %d", r)
			}
			for r, nw := range nets {
				assert.Equal(t, r, nw.Rank())
				assert.Equal(t, n, nw.Size())
				require.NoError(t, nw.Close())
			}
		})
	}
}
