package bootstrap

import (
	"errors"
	"net"
	"sync"
	"time"
)

// maxPendingHellos bounds the connections of one Root or Conn that have
// not said hello yet. When the set is full, a new connection waits in the
// listener's backlog until a pending one's reader has waited
// minPendingAge for its hello, which is then closed, so that silent
// strangers hold at most this many descriptors and goroutines (each for at
// most min(5 s, timeout)), while a real rank, which sends its hello with
// its connect, still gets through: its reader finds the hello already
// there. The age counts from when the reader starts waiting, not from the
// accept, so that a process starved of CPU (thousands of ranks checking in
// on a loaded machine) does not close real ranks whose readers have not
// run yet. Variables for the tests.
var (
	maxPendingHellos = 64
	minPendingAge    = 100 * time.Millisecond
)

// errEvicted: the connection was closed to make room for another one
// before its hello counted (see pendingSet.done).
var errEvicted = errors.New("closed while awaiting its hello, to make room")

// pendingSet tracks the connections awaiting their hello, oldest first.
type pendingSet struct {
	mu    sync.Mutex
	conns []pendingConn
	freed chan struct{} // signalled (best effort) when one leaves
}

type pendingConn struct {
	c       net.Conn
	reading time.Time // when its reader began to wait; zero: not yet
}

// add registers c (call it in accept order, before c's reader starts).
// When the set is full it waits until one leaves or one's reader has
// waited minPendingAge, and returns that one, closed, for the caller to
// forget; it stops waiting when quit closes.
func (p *pendingSet) add(c net.Conn, quit <-chan struct{}) (evicted net.Conn) {
	for {
		p.mu.Lock()
		if p.freed == nil {
			p.freed = make(chan struct{}, 1)
		}
		var evict net.Conn
		wait := time.Duration(0)
		if len(p.conns) >= maxPendingHellos {
			wait = minPendingAge // when no reader waits yet: look again then
			now := time.Now()
			for i, x := range p.conns {
				if x.reading.IsZero() {
					continue
				}
				w := x.reading.Add(minPendingAge).Sub(now)
				if w <= 0 {
					evict = x.c
					p.conns = append(p.conns[:i], p.conns[i+1:]...)
					break
				}
				wait = min(wait, w)
			}
			if evict != nil {
				wait = 0
			}
		}
		if wait <= 0 {
			p.conns = append(p.conns, pendingConn{c: c})
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

// reading records that c's reader now waits for its hello.
func (p *pendingSet) reading(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range p.conns {
		if p.conns[i].c == c {
			p.conns[i].reading = time.Now()
			return
		}
	}
}

// done unregisters c: it said hello, or it is gone. It reports false
// when c was no longer pending: add closed it to make room (perhaps just
// after its reader read the hello), and the reader must drop it.
func (p *pendingSet) done(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, x := range p.conns {
		if x.c == c {
			p.conns = append(p.conns[:i], p.conns[i+1:]...)
			select {
			case p.freed <- struct{}{}:
			default:
			}
			return true
		}
	}
	return false
}
