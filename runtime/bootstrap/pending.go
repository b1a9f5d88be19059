package bootstrap

import (
	"net"
	"sync"
	"time"
)

// maxPendingHellos bounds the connections of one Root or Conn that have
// not said hello yet. When the set is full, a new connection waits in the
// listener's backlog until the oldest pending one has waited
// minPendingAge, which is then closed, so that silent strangers hold at
// most this many descriptors and goroutines (each for at most
// min(5 s, timeout)), while a real rank, which sends its hello with its
// connect, still gets through: its hello is read within minPendingAge
// even when hundreds of ranks check in at once. Variables for the tests.
var (
	maxPendingHellos = 64
	minPendingAge    = 100 * time.Millisecond
)

// pendingSet tracks the connections awaiting their hello, oldest first.
type pendingSet struct {
	mu    sync.Mutex
	conns []pendingConn
	freed chan struct{} // signalled (best effort) when one leaves
}

type pendingConn struct {
	c     net.Conn
	since time.Time
}

// add registers c (call it in accept order, before c's reader starts).
// When the set is full it waits until one leaves or the oldest has waited
// minPendingAge, and returns that one, closed, for the caller to forget;
// it stops waiting when quit closes.
func (p *pendingSet) add(c net.Conn, quit <-chan struct{}) (evicted net.Conn) {
	for {
		p.mu.Lock()
		if p.freed == nil {
			p.freed = make(chan struct{}, 1)
		}
		var evict net.Conn
		wait := time.Duration(0)
		if len(p.conns) >= maxPendingHellos {
			if wait = time.Until(p.conns[0].since.Add(minPendingAge)); wait <= 0 {
				evict = p.conns[0].c
				p.conns = p.conns[1:]
			}
		}
		if wait <= 0 {
			p.conns = append(p.conns, pendingConn{c: c, since: time.Now()})
		}
		freed := p.freed
		p.mu.Unlock()
		if evict != nil {
			_ = evict.Close()
		}
		if wait <= 0 {
			return evict
		}
		t := time.NewTimer(wait)
		select {
		case <-freed:
		case <-t.C:
		case <-quit:
			t.Stop()
			return nil // shutting down: c is closed with every socket
		}
		t.Stop()
	}
}

// done unregisters c: it said hello, or it is gone.
func (p *pendingSet) done(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, x := range p.conns {
		if x.c == c {
			p.conns = append(p.conns[:i], p.conns[i+1:]...)
			select {
			case p.freed <- struct{}{}:
			default:
			}
			return
		}
	}
}
