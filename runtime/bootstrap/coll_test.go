package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestCollectiveBrokenAsItStarts: a collective declared broken (by a
// peer's abandon) just as it starts either runs its body or fails with
// ErrCollectiveBroken; it never reports success without having run. A
// call cancelled between reading its context's cause and its error used
// to skip the body and return no blocks and no error, which made rank 1
// of TestCollectiveWithEndedContext/tcp succeed now and then.
//
// The window is a few nanoseconds, so the breaker starts with the call
// and waits a delay that adapts towards the boundary between "broken
// before the body" and "body ran", where the window lies.
func TestCollectiveBrokenAsItStarts(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("needs two threads to race")
	}
	tries := 10000
	if testing.Short() {
		tries = 1000
	}
	// No collection during the tries: it would spread the timing of the
	// call, and with it the breaker's hits.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	why := fmt.Errorf("%w: rank 1 abandoned collective #1", ErrCollectiveBroken)
	delay := 0 // spins before breaking
	nRan, nBroken := 0, 0
	defer func() { t.Logf("ran %d, broken %d, final delay %d", nRan, nBroken, delay) }()
	for i := range tries {
		nets, err := NewInProcessOptions(1, Options{Timeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		r := nets[0].(*inProcRank)
		var ready, start atomic.Bool
		var wg sync.WaitGroup
		d := delay
		wg.Go(func() {
			ready.Store(true)
			for !start.Load() { // no Gosched: it would make this side late
			}
			for k := 0; k < d; k++ {
				spinSink.Add(1)
			}
			r.coll().fail(1, why)
		})
		for !ready.Load() {
			runtime.Gosched()
		}
		ran := false
		start.Store(true)
		out, err := collective(context.Background(), r, "race", func(ctx context.Context, seq int64) ([][]byte, string, error) {
			ran = true
			return [][]byte{[]byte("mine")}, "", nil
		})
		wg.Wait()
		switch {
		case err == nil && !ran:
			t.Fatalf("try %d (delay %d): the collective returned %v and no error without running its body", i, d, out)
		case err != nil && !errors.Is(err, ErrCollectiveBroken):
			t.Fatalf("try %d: %v, want ErrCollectiveBroken", i, err)
		case ran:
			nRan++
			delay = max(0, delay-1)
		default:
			nBroken++
			delay++
		}
	}
}

// spinSink keeps the breaker's delay loop from being optimised away.
var spinSink atomic.Int64
