package leakcheck

import (
	"runtime"
	"testing"
	"time"
)

// GoroutineSettle is how long WaitGoroutines waits for goroutines to end.
const GoroutineSettle = 5 * time.Second

// WaitGoroutines waits up to GoroutineSettle for the process's goroutines
// to number at most before (runtime.NumGoroutine before the code under
// test started any) and otherwise fails t, going on, with both counts and
// every goroutine's stack. It polls by hand: assert.Eventually would run
// its condition in goroutines of its own.
func WaitGoroutines(t testing.TB, before int) {
	t.Helper()
	deadline := time.Now().Add(GoroutineSettle)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<20)
		t.Errorf("goroutines: %d before, %d after:\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
}
