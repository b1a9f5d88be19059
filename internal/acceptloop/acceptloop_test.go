package acceptloop

import (
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// flaky fails its first n Accepts with EMFILE, then accepts from ln.
type flaky struct {
	net.Listener
	fails atomic.Int32
}

func (f *flaky) Accept() (net.Conn, error) {
	if f.fails.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: syscall.EMFILE}
	}
	return f.Listener.Accept()
}

// TestRunSurvivesErrors: failed Accepts are retried; a connection after
// them is served; closing the listener ends the loop.
func TestRunSurvivesErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	f := &flaky{Listener: ln}
	f.fails.Store(3)
	served := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		Run(f, nil, slog.New(slog.NewTextHandler(io.Discard, nil)), "test", func(c net.Conn) bool {
			c.Close()
			served <- struct{}{}
			return true
		})
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	select {
	case <-served:
	case <-time.After(5 * time.Second):
		t.Fatal("no connection served after the failed Accepts")
	}
	assert.Negative(t, f.fails.Load(), "every failure was retried")
	ln.Close()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the loop did not end with its listener")
	}
}

// TestRunEndsOnQuit: a loop backing off after a failure ends when quit closes.
func TestRunEndsOnQuit(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	f := &flaky{Listener: ln}
	f.fails.Store(1 << 30)
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		Run(f, quit, slog.New(slog.NewTextHandler(io.Discard, nil)), "test", func(net.Conn) bool { return true })
	}()
	time.Sleep(20 * time.Millisecond)
	close(quit)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the loop did not end when quit closed")
	}
}
