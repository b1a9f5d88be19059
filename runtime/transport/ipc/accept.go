package ipc

import (
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"
)

// Backoff of the accept loops after a failed Accept.
const (
	acceptBackoffMin = 5 * time.Millisecond
	acceptBackoffMax = time.Second
)

// acceptLoop accepts connections on ln and hands each to serve, until ln
// is closed, quit is closed or serve returns false. A failed Accept for
// any other reason (EMFILE or ENFILE when descriptors run out,
// ECONNABORTED) does not end the loop: it is logged once per burst and
// retried after a backoff (5 ms doubling up to 1 s), as the bootstrap's
// loops do, so that a burst of descriptors cannot close the door for good.
func acceptLoop(ln *net.UnixListener, quit <-chan struct{}, serve func(*net.UnixConn) bool) {
	backoff := time.Duration(0)
	for {
		c, err := ln.AcceptUnix()
		if err == nil {
			backoff = 0
			if !serve(c) {
				return
			}
			continue
		}
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if backoff == 0 {
			slog.Warn("ipc: accept failed, retrying", "addr", ln.Addr().String(), "err", err)
			backoff = acceptBackoffMin
		} else {
			backoff = min(2*backoff, acceptBackoffMax)
		}
		t := time.NewTimer(backoff)
		select {
		case <-quit:
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// maxPending bounds the connections of one listener that have not yet
// authenticated; a new one past the bound closes the oldest, so that
// strangers cannot hold descriptors and goroutines in bulk while a real
// peer, which authenticates within microseconds, still gets through.
const maxPending = 32

// pendingSet tracks the connections that have not authenticated yet.
type pendingSet struct {
	mu    sync.Mutex
	conns []*net.UnixConn // oldest first
}

// add registers c, closing the oldest pending connection when full.
func (p *pendingSet) add(c *net.UnixConn) {
	p.mu.Lock()
	var evict *net.UnixConn
	if len(p.conns) >= maxPending {
		evict = p.conns[0]
		p.conns = p.conns[1:]
	}
	p.conns = append(p.conns, c)
	p.mu.Unlock()
	if evict != nil {
		_ = evict.Close()
	}
}

// done unregisters c (authenticated or given up).
func (p *pendingSet) done(c *net.UnixConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, x := range p.conns {
		if x == c {
			p.conns = append(p.conns[:i], p.conns[i+1:]...)
			return
		}
	}
}
