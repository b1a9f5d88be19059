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

// ackByte is what the accepting watcher answers a hello with: once Dial
// has it, both ends track the connection and a Close on either says
// goodbye on it (a connection still in the listen queue would be reset).
const ackByte = 'A'

// errNoAck is in Dial's error when the peer closed the connection
// without acknowledging it.
var errNoAck = errors.New("no acknowledgement")

// Watcher notices the death of other processes' ranks. Each rank runs one;
// every pair of ranks in different processes shares one Unix socket
// connection (the lower rank dials), which the kernel closes when either
// process exits. A connection that ends without a goodbye reports its
// rank to the watcher's callback, once. Close says goodbye on every
// connection, so that a rank that finishes normally is never reported.
type Watcher struct {
	rank    int
	size    int
	onLost  func(rank int)
	ln      *net.UnixListener
	secret  Secret
	quit    chan struct{} // closed by Close: stops the accept loop's backoff
	pending pendingSet

	mu      sync.Mutex
	conns   map[*net.UnixConn]int
	closing bool
	lost    map[int]bool

	wg sync.WaitGroup
}

// NewWatcher starts the watcher of rank, one of size ranks; onLost is
// called (from a goroutine of the watcher, at most once per rank) with
// each rank whose process ends without saying goodbye. It is only ever
// called with a rank in [0, size) other than rank: a connection whose
// greeting names another is refused unacknowledged.
func NewWatcher(rank, size int, onLost func(rank int)) (*Watcher, error) {
	if rank < 0 || rank >= size {
		return nil, fmt.Errorf("ipc: liveness watcher of rank %d in a job of %d ranks: want 0 <= rank < size", rank, size)
	}
	name := NewName(fmt.Sprintf("ncclgo-live-r%d", rank))
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("ipc: rank %d: liveness socket %q: %w", rank, name, err)
	}
	w := &Watcher{rank: rank, size: size, onLost: onLost, ln: ln, secret: newSecret(), quit: make(chan struct{}),
		conns: map[*net.UnixConn]int{}, lost: map[int]bool{}}
	w.wg.Go(w.accept)
	return w, nil
}

// Name is the socket's name (for messages; Dial needs Addr).
func (w *Watcher) Name() string { return w.ln.Addr().String() }

// Addr is what other ranks pass to Dial: the socket's name and the
// watcher's secret. It is a credential: hand it to the other ranks over
// the bootstrap only.
func (w *Watcher) Addr() string { return formatAddr(w.Name(), w.secret) }

func (w *Watcher) accept() {
	acceptLoop(w.ln, w.quit, func(c *net.UnixConn) bool {
		// Tracked from the accept on, so that a Close before the hello
		// is read still says goodbye to the dialer.
		if !w.track(c, -1) {
			c.Close()
			return false
		}
		w.pending.add(c) // in accept order: the oldest stranger goes first
		go func() {
			defer w.wg.Done()
			// Only a dialer that proves it holds the secret, and names a
			// rank of the job, is acknowledged and watched; any other
			// gets no ack (its Dial fails) and is never reported.
			hello, proof, err := acceptAuth(c, w.secret, 4, time.Now().Add(handshakeTimeout))
			w.pending.done(c)
			peer := -1
			if err == nil {
				peer = int(binary.LittleEndian.Uint32(hello))
			}
			if err != nil || !w.valid(peer) {
				w.untrack(c)
				c.Close()
				return
			}
			// A failed ack ends the dialer's Dial with an error.
			_, _ = c.Write(append([]byte{ackByte}, proof...))
			w.watch(c, peer)
		}()
		return true
	})
}

// valid reports whether peer is another rank of the job.
func (w *Watcher) valid(peer int) bool { return peer >= 0 && peer < w.size && peer != w.rank }

// Dial connects to the watcher of rank peer at addr (its Addr, exchanged
// over the bootstrap).
func (w *Watcher) Dial(ctx context.Context, peer int, addr string) error {
	if !w.valid(peer) {
		return fmt.Errorf("ipc: rank %d: dialing the liveness socket of rank %d: want another rank in [0, %d)", w.rank, peer, w.size)
	}
	name, secret, err := parseAddr(addr)
	if err != nil {
		return fmt.Errorf("ipc: rank %d: rank %d's liveness socket: %w", w.rank, peer, err)
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", name)
	if err != nil {
		return fmt.Errorf("ipc: rank %d: dialing rank %d's liveness socket %q: %w", w.rank, peer, name, err)
	}
	c := nc.(*net.UnixConn)
	// Cancelling ctx ends the greeting at once (through the deadline, so
	// that c stays usable once acknowledged).
	_ = c.SetDeadline(time.Now().Add(handshakeTimeout))
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	var hello [4]byte
	binary.LittleEndian.PutUint32(hello[:], uint32(w.rank))
	var ack [1]byte
	want, err := dialAuth(c, secret, hello[:])
	if err == nil {
		if _, err = io.ReadFull(c, ack[:]); err == nil && ack[0] == ackByte {
			err = checkProof(c, want)
		}
	}
	if !stop() || ctx.Err() != nil {
		err = errors.Join(err, context.Cause(ctx))
	}
	if err != nil || ack[0] != ackByte {
		if ack[0] == ackByte && !errors.Is(err, ErrAuth) {
			// Acknowledged, then cancelled: the peer tracks c, so a
			// goodbye, lest it report this rank lost.
			_ = c.SetDeadline(time.Time{})
			_, _ = c.Write([]byte{byeByte})
		}
		c.Close()
		return fmt.Errorf("ipc: rank %d: rank %d did not acknowledge the liveness connection %q (got %q): %w",
			w.rank, peer, name, ack[:], errors.Join(err, errNoAck))
	}
	_ = c.SetDeadline(time.Time{})
	if !w.track(c, peer) {
		// The peer tracks c already: a goodbye, so that it does not
		// report this rank lost.
		_, _ = c.Write([]byte{byeByte})
		c.Close()
		return fmt.Errorf("ipc: rank %d: dialing rank %d: %w", w.rank, peer, net.ErrClosed)
	}
	go func() {
		defer w.wg.Done()
		w.watch(c, peer)
	}()
	return nil
}

// track registers c, a connection to peer (-1 before its hello), for
// Close's goodbye, and counts in w.wg the goroutine that the caller then
// starts to serve it (which calls w.wg.Done). Under the lock, so that a
// Close that has not seen c waits for that goroutine: an Add after the
// Wait began, from a Dial racing Close, let Close return before it. It
// reports false, counting nothing, once the watcher is closing.
func (w *Watcher) track(c *net.UnixConn, peer int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closing {
		return false
	}
	w.conns[c] = peer
	w.wg.Add(1)
	return true
}

func (w *Watcher) untrack(c *net.UnixConn) {
	w.mu.Lock()
	delete(w.conns, c)
	w.mu.Unlock()
}

// watch reads c, tracked already, until it ends and reports peer unless
// the end was a goodbye or this watcher is closing (whose Close ended the
// reads of every tracked connection).
func (w *Watcher) watch(c *net.UnixConn, peer int) {
	w.mu.Lock()
	if !w.closing {
		w.conns[c] = peer
	}
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
	close(w.quit)
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
