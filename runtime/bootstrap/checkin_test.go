package bootstrap

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// cutProxy listens on loopback and passes connections to addr, except
// that it cuts the first cut ones once their first frame (a check-in
// hello) has gone through: both sides are closed, as when a starved root
// closed a connection whose hello it had read.
type cutProxy struct {
	ln   net.Listener
	mu   sync.Mutex
	cut  int
	held []net.Conn
	wg   sync.WaitGroup
}

func newCutProxy(t *testing.T, addr string, cut int) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &cutProxy{ln: ln, cut: cut}
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			cutThis := p.cut > 0
			p.cut--
			p.held = append(p.held, c, up)
			p.mu.Unlock()
			if cutThis {
				p.wg.Go(func() {
					if b, err := readFrame(bufio.NewReader(c), maxHelloSize); err == nil {
						_ = writeFrame(up, b)
					}
					c.Close()
					up.Close()
				})
				continue
			}
			p.wg.Go(func() { _, _ = io.Copy(up, c); up.Close() })
			p.wg.Go(func() { _, _ = io.Copy(c, up); c.Close() })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.held {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

// TestCheckInAgain: a check-in whose connection broke before the root
// answered used to fail Init with EOF (at 1024 ranks under load, hundreds
// of ranks did), and the root, counting a rank that hung up as checked
// in, answered into the dead connections. Now the rank checks in again,
// and the root waits for it.
func TestCheckInAgain(t *testing.T) {
	ctx := context.Background()
	opts := loopbackOpts(10 * time.Second)
	root, id, err := NewRoot(ctx, opts)
	require.NoError(t, err)
	defer root.Close()
	const n = 3
	proxy := newCutProxy(t, id.Addr(), n)
	magic, _, err := id.decode()
	require.NoError(t, err)
	pid, err := encodeID(magic, netip.MustParseAddrPort(proxy.ln.Addr().String()))
	require.NoError(t, err)
	conns, errs := startRanks(ctx, pid, seq(n), n, opts)
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
		defer conns[r].Close()
	}
	require.NoError(t, root.Wait(ctx))
	nets := make([]Network, n)
	for r, c := range conns {
		nets[r] = c
	}
	onAll(t, nets, func(nw Network) error { return nw.Barrier(ctx) })
}

// TestPendingAgeFromReader: the hello cap used to close the oldest
// connection awaiting its hello once 100 ms had passed since its accept,
// even when its reader had not run yet: a root starved of CPU closed real
// ranks whose hellos sat unread in its socket buffers. The age now counts
// from when the reader starts waiting.
func TestPendingAgeFromReader(t *testing.T) {
	oldMax, oldAge := maxPendingHellos, minPendingAge
	maxPendingHellos, minPendingAge = 2, 20*time.Millisecond
	defer func() { maxPendingHellos, minPendingAge = oldMax, oldAge }()
	pipe := func() net.Conn {
		a, b := net.Pipe()
		t.Cleanup(func() { a.Close(); b.Close() })
		return a
	}
	var p pendingSet
	quit := make(chan struct{})
	defer close(quit)
	c1, c2 := pipe(), pipe()
	require.Nil(t, p.add(c1, quit))
	require.Nil(t, p.add(c2, quit))
	got := make(chan net.Conn, 1)
	go func() { got <- p.add(pipe(), quit) }()
	select {
	case ev := <-got:
		t.Fatalf("evicted %v before any reader waited", ev)
	case <-time.After(10 * minPendingAge):
	}
	p.reading(c2)
	select {
	case ev := <-got:
		assert.Same(t, c2, ev, "the connection whose reader waited")
	case <-time.After(5 * time.Second):
		t.Fatal("no eviction after a reader waited minPendingAge")
	}
}

// TestRootPushRetried checks that a root pushes its slice again when the
// other root closed the first connection without reading it (as its
// hello cap does under load), and stops once the slice is acknowledged.
func TestRootPushRetried(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	got := make(chan []byte, 1)
	go func() {
		first, err := ln.Accept()
		if err != nil {
			return
		}
		first.(*net.TCPConn).SetLinger(0) // reset, as a closed unread socket does
		first.Close()
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		if _, err := readFrame(c, maxHelloSize); err != nil {
			return
		}
		b, err := readFrame(c, 1<<16)
		if err != nil {
			return
		}
		_ = writeFrame(c, []byte{msgAck})
		got <- b
	}()
	r := &Root{timeout: 5 * time.Second, log: quietLogger}
	events := make(chan rootEvent, 1)
	r.wg.Add(1)
	go r.push(context.Background(), rootRef{magic: 7, addr: ln.Addr().String()}, 0, 4, []byte("slice"), events, nil)
	select {
	case ev := <-events:
		require.NoError(t, ev.err)
	case <-time.After(10 * time.Second):
		t.Fatal("push did not end")
	}
	select {
	case b := <-got:
		require.Equal(t, "slice", string(b))
	default:
		t.Fatal("the slice never reached the second connection")
	}
}
