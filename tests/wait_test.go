package tests

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo"
	"github.com/ncclgo/ncclgo/internal/diag"
)

// EnvTestWait bounds every wait of the suite for a group (a Go duration).
const EnvTestWait = "NCCLGO_TEST_WAIT"

// defaultTestWait is the bound without NCCLGO_TEST_WAIT.
const defaultTestWait = 60 * time.Second

// testWait is NCCLGO_TEST_WAIT, or 60 s when it is unset. A value that is
// not a positive Go duration is reported once on stderr and ignored.
func testWait() time.Duration {
	s := os.Getenv(EnvTestWait)
	if s == "" {
		return defaultTestWait
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		warnWaitOnce.Do(func() {
			fmt.Fprintf(os.Stderr, "%s=%q: want a positive Go duration such as 20s; using %v\n", EnvTestWait, s, defaultTestWait)
		})
		return defaultTestWait
	}
	return d
}

var warnWaitOnce sync.Once

// errHang is wrapped by waitAll's error when a group does not complete in
// time.
var errHang = errors.New("the group did not complete")

// dumpWait bounds the connection dump itself: it copies from device
// memory, which a broken context could block.
const dumpWait = 20 * time.Second

// waitAll waits, at most testWait(), for every rank of comms (comms[r] is
// rank r, or the ranks this process holds) at once. errs[r] is rank r's
// Wait error. When some rank's Wait ran into the deadline, hang is non-nil
// (it wraps errHang) and its text, also printed on stderr at once so that
// a test killed from outside still shows it, says which ranks' Wait
// returned and which did not, and holds every connection's counters
// (internal/diag): where the group is stuck. The caller must then abort
// the communicators before destroying them.
func waitAll(what string, comms []*ncclgo.Comm) (errs []error, hang error) {
	return waitAllWithin(what, comms, testWait())
}

// waitAllWithin is waitAll with a bound of its own.
func waitAllWithin(what string, comms []*ncclgo.Comm, d time.Duration) (errs []error, hang error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	errs = make([]error, len(comms))
	took := make([]time.Duration, len(comms))
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Go(func() {
			errs[r] = c.Wait(ctx)
			took[r] = time.Since(start)
		})
	}
	wg.Wait()
	if ctx.Err() == nil {
		return errs, nil
	}
	var stuck []int
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %v after %v (%s=%v):\n", what, errHang, d, EnvTestWait, d)
	for r, err := range errs {
		switch {
		case err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()):
			stuck = append(stuck, r)
			fmt.Fprintf(&b, "  rank %d (device %d): Wait did not return\n", comms[r].Rank(), comms[r].Device())
		case err != nil:
			fmt.Fprintf(&b, "  rank %d (device %d): Wait returned after %v: %v\n", comms[r].Rank(), comms[r].Device(), took[r].Round(time.Millisecond), err)
		default:
			fmt.Fprintf(&b, "  rank %d (device %d): Wait returned after %v\n", comms[r].Rank(), comms[r].Device(), took[r].Round(time.Millisecond))
		}
	}
	if len(stuck) == 0 {
		return errs, nil // the deadline passed just after the last rank returned
	}
	fmt.Fprintf(&b, "connections (%d channels):\n%s", comms[0].NChannels(), connDump(comms))
	report := b.String()
	fmt.Fprintf(os.Stderr, "HANG %s\n", report)
	return errs, fmt.Errorf("%w; ranks %v did not finish: %s", errHang, stuck, report)
}

// connDump is diag.Dump of comms, bounded by dumpWait.
func connDump(comms []*ncclgo.Comm) string {
	as := make([]any, len(comms))
	for i, c := range comms {
		as[i] = c
	}
	return diag.DumpWithin(as, dumpWait)
}

// watchdog reports a step of the suite that blocks where no context bounds
// it (an upload or Synchronize behind a stuck kernel, Group.End, a read
// back): when the step it was last told of has run longer than
// testWait()+dumpWait, it prints the step, the connection dump and every
// goroutine's stack on stderr. It cannot unblock the step; it makes the
// hang visible before a test timeout kills the process.
type watchdog struct {
	what  string
	comms []*ncclgo.Comm
	mu    sync.Mutex
	step  string
	since time.Time
	timer *time.Timer
	out   io.Writer // os.Stderr
}

// watch starts a watchdog over comms, at step.
func watch(what string, comms []*ncclgo.Comm, step string) *watchdog {
	w := &watchdog{what: what, comms: comms, step: step, since: time.Now(), out: os.Stderr}
	w.timer = time.AfterFunc(testWait()+dumpWait, w.fire)
	return w
}

// at records that the watched code entered step.
func (w *watchdog) at(step string) {
	w.mu.Lock()
	w.step, w.since = step, time.Now()
	w.mu.Unlock()
	w.timer.Reset(testWait() + dumpWait)
}

// stop ends the watch.
func (w *watchdog) stop() { w.timer.Stop() }

func (w *watchdog) fire() {
	w.mu.Lock()
	step, since := w.step, w.since
	w.mu.Unlock()
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	fmt.Fprintf(w.out, "STUCK %s: step %q has run %v (%s=%v)\nconnections:\n%s\ngoroutines:\n%s\n",
		w.what, step, time.Since(since).Round(time.Millisecond), EnvTestWait, testWait(), connDump(w.comms), buf)
}

func TestTestWait(t *testing.T) {
	t.Setenv(EnvTestWait, "")
	assert.Equal(t, defaultTestWait, testWait())
	t.Setenv(EnvTestWait, "15s")
	assert.Equal(t, 15*time.Second, testWait())
	t.Setenv(EnvTestWait, "soon")
	assert.Equal(t, defaultTestWait, testWait())
	t.Setenv(EnvTestWait, "-1s")
	assert.Equal(t, defaultTestWait, testWait())
	errs, hang := waitAll("nothing", nil)
	require.NoError(t, hang)
	require.Empty(t, errs)
	// The watchdog's report, without communicators.
	w := watch("a test", nil, "first")
	w.at("second")
	w.stop()
	var b strings.Builder
	w.out = &b
	w.fire()
	assert.Contains(t, b.String(), `STUCK a test: step "second" has run`)
	assert.Contains(t, b.String(), "TestTestWait", "every goroutine's stack")
	assert.Equal(t, "no connections", connDump(nil))
}
