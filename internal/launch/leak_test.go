package launch

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"
)

// TestGroupCloseReleases: a job of goroutine ranks that join, exchange and
// close leaves no descriptor or goroutine behind (the root rank 0 started
// included).
func TestGroupCloseReleases(t *testing.T) {
	count := func() (int, int) {
		es, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skip("no /proc/self/fd")
		}
		buf := make([]byte, 1<<20)
		return len(es), bytes.Count(buf[:runtime.Stack(buf, true)], []byte("\ngoroutine ")) + 1
	}
	run := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		f := filepath.Join(t.TempDir(), "id")
		const n = 3
		var wg sync.WaitGroup
		for r := range n {
			wg.Go(func() {
				g, err := Join(ctx, Place{Rank: r, Size: n, LocalRank: r, LocalSize: n, Launcher: "mpirun"}, envOf(EnvIDFile, f))
				if !assertNoError(t, err, r) {
					return
				}
				_, err = g.AllGather(ctx, []byte{byte(r)})
				assertNoError(t, err, r)
				assertNoError(t, g.Barrier(ctx), r)
				assertNoError(t, g.Close(), r)
			})
		}
		wg.Wait()
	}
	run() // the runtime's lasting descriptors and goroutines start here
	fds, gs := count()
	run()
	f, g := count()
	for deadline := time.Now().Add(3 * time.Second); (f > fds || g > gs) && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		f, g = count()
	}
	if f > fds || g > gs {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d descriptors and %d goroutines left behind:\n%s", f-fds, g-gs, buf[:runtime.Stack(buf, true)])
	}
}

func assertNoError(t *testing.T, err error, rank int) bool {
	t.Helper()
	if err != nil {
		t.Errorf("rank %d: %v", rank, err)
		return false
	}
	return true
}
