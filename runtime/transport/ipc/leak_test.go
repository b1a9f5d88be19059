package ipc

import (
	"bytes"
	"context"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// resources counts this process's open descriptors and goroutines, once
// the runtime has set up what it keeps for good on first use of the
// network (the poller's descriptors, a goroutine).
func resources(t *testing.T) (fds, goroutines int) {
	t.Helper()
	warmUp.Do(func() {
		s, err := Listen(NewName("ncclgo-warm"))
		require.NoError(t, err)
		_, _ = Fetch(context.Background(), s.Addr(), 1)
		require.NoError(t, s.Close())
		time.Sleep(10 * time.Millisecond)
	})
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(es), userGoroutines()
}

// userGoroutines counts the goroutines runtime.Stack lists (NumGoroutine
// also counts the runtime's finalizer and cleanup goroutines while they
// run, which come and go on their own).
func userGoroutines() int {
	buf := make([]byte, 1<<20)
	return bytes.Count(buf[:runtime.Stack(buf, true)], []byte("\ngoroutine ")) + 1
}

var warmUp sync.Once

// assertReleased checks that the descriptors and goroutines are back to
// (at most) what resources counted (goroutines end shortly after their Close).
func assertReleased(t *testing.T, fds, goroutines int) {
	t.Helper()
	// Polled here: assert.Eventually's condition runs in a goroutine of
	// its own.
	f, g := resources(t)
	for deadline := time.Now().Add(2 * time.Second); (f > fds || g > goroutines) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		f, g = resources(t)
	}
	if f > fds || g > goroutines {
		t.Errorf("%d descriptors and %d goroutines left behind", f-fds, g-goroutines)
		es, _ := os.ReadDir("/proc/self/fd")
		for _, e := range es {
			l, _ := os.Readlink("/proc/self/fd/" + e.Name())
			t.Logf("fd %s -> %s", e.Name(), l)
		}
		buf := make([]byte, 1<<20)
		t.Logf("%s", buf[:runtime.Stack(buf, true)])
	}
}

// TestServerCloseReleases: a server with registered descriptors, served
// and idle connections, leaves no descriptor or goroutine after Close.
func TestServerCloseReleases(t *testing.T) {
	fds, gs := resources(t)
	srv, err := Listen(NewName("ncclgo-test"))
	require.NoError(t, err)
	for k := range 3 {
		s, err := CreateSegment("ncclgo-test", 4096)
		require.NoError(t, err)
		fd, err := s.Dup()
		require.NoError(t, err)
		require.NoError(t, srv.Add(uint64(k), fd))
		require.NoError(t, s.Close())
	}
	got, err := Fetch(context.Background(), srv.Addr(), 0, 1, 2)
	require.NoError(t, err)
	closeAll(got)
	idle, err := net.Dial("unix", srv.Name()) // connected, never asks
	require.NoError(t, err)
	defer idle.Close()
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, srv.Close())
	require.NoError(t, idle.Close())
	assertReleased(t, fds, gs)
}

// TestWatcherCloseReleases: watchers connected in pairs, plus a dialer
// that never greets, leave nothing behind after Close.
func TestWatcherCloseReleases(t *testing.T) {
	fds, gs := resources(t)
	ws := make([]*Watcher, 3)
	for r := range ws {
		w, err := NewWatcher(r, len(ws), nil)
		require.NoError(t, err)
		ws[r] = w
	}
	for a := range ws {
		for b := a + 1; b < len(ws); b++ {
			require.NoError(t, ws[a].Dial(context.Background(), b, ws[b].Addr()))
		}
	}
	mute, err := net.Dial("unix", ws[0].Name())
	require.NoError(t, err)
	time.Sleep(20 * time.Millisecond)
	for _, w := range ws {
		require.NoError(t, w.Close())
	}
	require.NoError(t, mute.Close())
	assertReleased(t, fds, gs)
}

// TestWatcherCloseDuringDial: a Close concurrent with a Dial of the same
// watcher still waits for every goroutine of the watcher: none runs once
// both returned.
func TestWatcherCloseDuringDial(t *testing.T) {
	peer, err := NewWatcher(1, 2, nil)
	require.NoError(t, err)
	defer peer.Close()
	for range 50 {
		w, err := NewWatcher(0, 2, nil)
		require.NoError(t, err)
		dialed := make(chan struct{})
		go func() {
			defer close(dialed)
			_ = w.Dial(context.Background(), 1, peer.Addr())
		}()
		runtime.Gosched()
		require.NoError(t, w.Close())
		<-dialed
		buf := make([]byte, 1<<20)
		stacks := string(buf[:runtime.Stack(buf, true)])
		for _, g := range strings.Split(stacks, "\n\n") {
			if strings.Contains(g, "(*Watcher).watch(") && strings.Contains(g, "(*Watcher).Dial") {
				t.Fatalf("a watcher goroutine outlived Close and Dial:\n%s", g)
			}
		}
	}
}
