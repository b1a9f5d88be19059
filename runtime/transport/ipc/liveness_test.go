package ipc

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const envWatchChild = "NCCLGO_IPC_TEST_WATCH" // the parent watcher's name

// lostLog collects onLost calls.
type lostLog struct {
	mu   sync.Mutex
	got  []int
	seen chan int
}

func newLostLog() *lostLog { return &lostLog{seen: make(chan int, 8)} }

func (l *lostLog) add(r int) {
	l.mu.Lock()
	l.got = append(l.got, r)
	l.mu.Unlock()
	l.seen <- r
}

func (l *lostLog) all() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]int(nil), l.got...)
}

// TestWatcherGoodbye: ranks that close normally are never reported.
func TestWatcherGoodbye(t *testing.T) {
	logs := []*lostLog{newLostLog(), newLostLog(), newLostLog()}
	ws := make([]*Watcher, 3)
	for r := range ws {
		w, err := NewWatcher(r, len(ws), logs[r].add)
		require.NoError(t, err)
		ws[r] = w
	}
	ctx := context.Background()
	for a := range ws {
		for b := a + 1; b < len(ws); b++ {
			require.NoError(t, ws[a].Dial(ctx, b, ws[b].Addr()))
		}
	}
	for _, w := range ws { // at once: a hello not read yet still gets its goodbye
		require.NoError(t, w.Close())
		require.NoError(t, w.Close(), "Close twice")
	}
	for r := range logs {
		assert.Empty(t, logs[r].all(), "rank %d reported a rank that said goodbye", r)
	}
}

// TestWatcherProcessDeath: a child process (this test binary) dials as
// rank 1 and is killed; rank 0's watcher reports rank 1 promptly.
func TestWatcherProcessDeath(t *testing.T) {
	if os.Getenv(envWatchChild) != "" {
		t.Skip("child process")
	}
	lost := newLostLog()
	w, err := NewWatcher(0, 2, lost.add)
	require.NoError(t, err)
	defer w.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestWatcherChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), envWatchChild+"="+w.Addr())
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	// Wait for the child to be connected.
	buf := make([]byte, 4096)
	var out strings.Builder
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "CONNECTED") {
		require.True(t, time.Now().Before(deadline), "child never connected:\n%s", out.String())
		n, err := stdout.Read(buf)
		out.Write(buf[:n])
		require.NoError(t, err, "child output:\n%s", out.String())
	}
	killed := time.Now()
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
	select {
	case r := <-lost.seen:
		assert.Equal(t, 1, r)
		assert.Less(t, time.Since(killed), 2*time.Second)
	case <-time.After(10 * time.Second):
		t.Fatal("the death of rank 1's process was not reported within 10 s")
	}
	require.NoError(t, w.Close())
	assert.Equal(t, []int{1}, lost.all(), "reported once")
}

// TestWatcherChild is the child role of TestWatcherProcessDeath: it
// connects as rank 1 and waits to be killed.
func TestWatcherChild(t *testing.T) {
	name := os.Getenv(envWatchChild)
	if name == "" {
		t.Skip("only runs as a child of TestWatcherProcessDeath")
	}
	w, err := NewWatcher(1, 2, nil)
	require.NoError(t, err)
	require.NoError(t, w.Dial(context.Background(), 0, name))
	os.Stdout.WriteString("CONNECTED\n")
	time.Sleep(time.Minute)
}

// TestWatcherRefusesForeignHello: a greeting that names no other rank of
// the job (out of range, or the watcher's own) is refused without an ack,
// and the connection's end is never reported: onLost only sees ranks the
// caller can index.
func TestWatcherRefusesForeignHello(t *testing.T) {
	lost := newLostLog()
	w, err := NewWatcher(1, 3, lost.add)
	require.NoError(t, err)
	defer w.Close()
	for _, bad := range []uint32{3, 1, 1 << 31, 0xffffffff} {
		nc, err := net.Dial("unix", w.Name())
		require.NoError(t, err)
		c := nc.(*net.UnixConn)
		var hello [4]byte
		binary.LittleEndian.PutUint32(hello[:], bad)
		require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
		_, err = dialAuth(c, w.secret, hello[:]) // holds the secret, names a bad rank
		require.NoError(t, err)
		var ack [1]byte
		n, err := c.Read(ack[:])
		assert.Equal(t, 0, n, "rank %d's greeting was acknowledged", bad)
		assert.ErrorIs(t, err, io.EOF, "rank %d", bad)
		require.NoError(t, c.Close()) // no goodbye: a "death"
	}
	select {
	case r := <-lost.seen:
		t.Fatalf("reported rank %d, which is no peer of rank 1 in a job of 3", r)
	case <-time.After(200 * time.Millisecond):
	}
	require.Error(t, w.Dial(context.Background(), 3, w.Addr()), "dialing a rank outside the job")
	_, err = NewWatcher(3, 3, nil)
	require.Error(t, err, "a rank outside the job")
}

// TestWatcherDialHonoursContext: a peer that accepts but never answers
// the greeting holds Dial only until ctx is cancelled.
func TestWatcherDialHonoursContext(t *testing.T) {
	name := NewName("ncclgo-test-mute")
	ln, err := net.Listen("unix", name)
	require.NoError(t, err)
	muted := make(chan struct{})
	defer func() { ln.Close(); <-muted }()
	go func() {
		defer close(muted)
		c, err := ln.Accept()
		if err == nil {
			defer c.Close()
			_, _ = io.Copy(io.Discard, c) // reads the greeting, never acknowledges
		}
	}()
	w, err := NewWatcher(0, 2, nil)
	require.NoError(t, err)
	defer w.Close()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	err = w.Dial(ctx, 1, formatAddr(name, newSecret()))
	require.ErrorIs(t, err, context.Canceled)
	assert.Contains(t, err.Error(), "rank 1")
	assert.Less(t, time.Since(start), 3*time.Second, "Dial outlived its context")
}
