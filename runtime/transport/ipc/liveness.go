package ipc

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// byeByte is what a watcher writes before closing a connection on purpose:
// a connection that ends without it belonged to a process that died.
const byeByte = 'B'

// helloTimeout bounds the wait for a dialer's greeting.
const helloTimeout = 10 * time.Second

// Watcher notices the death of other processes' ranks. Each rank runs one;
// every pair of ranks in different processes shares one Unix socket
// connection (the lower rank dials), which the kernel closes when either
// process exits. A connection that ends without a goodbye reports its
// rank to the watcher's callback, once. Close says goodbye on every
// connection, so that a rank that finishes normally is never reported.
type Watcher struct {
	rank   int
	onLost func(rank int)
	ln     *net.UnixListener

	mu      sync.Mutex
	conns   map[*net.UnixConn]int
	closing bool
	lost    map[int]bool

	wg sync.WaitGroup
}

// NewWatcher starts rank's watcher; onLost is called (from a goroutine of
// the watcher, at most once per rank) with each rank whose process ends
// without saying goodbye.
func NewWatcher(rank int, onLost func(rank int)) (*Watcher, error) {
	name := NewName(fmt.Sprintf("ncclgo-live-r%d", rank))
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("ipc: rank %d: liveness socket %q: %w", rank, name, err)
	}
	w := &Watcher{rank: rank, onLost: onLost, ln: ln, conns: map[*net.UnixConn]int{}, lost: map[int]bool{}}
	w.wg.Go(w.accept)
	return w, nil
}

// Name is the address other ranks pass to Dial.
func (w *Watcher) Name() string { return w.ln.Addr().String() }

func (w *Watcher) accept() {
	for {
		c, err := w.ln.AcceptUnix()
		if err != nil {
			return
		}
		w.wg.Go(func() {
			if !samePeerUser(c) {
				c.Close()
				return
			}
			var hello [4]byte
			_ = c.SetReadDeadline(time.Now().Add(helloTimeout))
			if _, err := io.ReadFull(c, hello[:]); err != nil {
				c.Close()
				return
			}
			_ = c.SetReadDeadline(time.Time{})
			w.watch(c, int(binary.LittleEndian.Uint32(hello[:])))
		})
	}
}

// Dial connects to the watcher of rank peer at name.
func (w *Watcher) Dial(ctx context.Context, peer int, name string) error {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", name)
	if err != nil {
		return fmt.Errorf("ipc: rank %d: dialing rank %d's liveness socket %q: %w", w.rank, peer, name, err)
	}
	c := nc.(*net.UnixConn)
	var hello [4]byte
	binary.LittleEndian.PutUint32(hello[:], uint32(w.rank))
	if _, err := c.Write(hello[:]); err != nil {
		c.Close()
		return fmt.Errorf("ipc: rank %d: greeting rank %d: %w", w.rank, peer, err)
	}
	w.wg.Go(func() { w.watch(c, peer) })
	return nil
}

// watch reads c until it ends and reports peer unless the end was a
// goodbye or this watcher is closing.
func (w *Watcher) watch(c *net.UnixConn, peer int) {
	w.mu.Lock()
	if w.closing {
		w.mu.Unlock()
		c.Close()
		return
	}
	w.conns[c] = peer
	w.mu.Unlock()
	var b [1]byte
	bye := false
	for {
		n, err := c.Read(b[:])
		if n == 1 && b[0] == byeByte {
			bye = true
		}
		if err != nil {
			break
		}
	}
	w.mu.Lock()
	delete(w.conns, c)
	report := !bye && !w.closing && !w.lost[peer]
	if report {
		w.lost[peer] = true
	}
	w.mu.Unlock()
	c.Close()
	if report && w.onLost != nil {
		w.onLost(peer)
	}
}

// Close says goodbye on every connection, closes them and the listener and
// waits for the watcher's goroutines (including a running onLost).
func (w *Watcher) Close() error {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	if w.closing {
		w.mu.Unlock()
		return nil
	}
	w.closing = true
	err := w.ln.Close()
	for c := range w.conns {
		// A peer already gone cannot be told goodbye: not an error.
		_, _ = c.Write([]byte{byeByte})
		_ = c.CloseWrite()
		_ = c.CloseRead() // ends our reader
	}
	w.mu.Unlock()
	w.wg.Wait()
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("ipc: rank %d: closing the liveness socket: %w", w.rank, err)
	}
	return nil
}
